/*
 * The dataset interface: a sized, randomly indexable collection of examples, as
 * torch::data::Dataset. The loader's workers call get() concurrently, so implementations
 * must be thread-safe; they should also be deterministic (the same index gives the same
 * example), which is what makes a loader's batches depend only on its seed and epoch.
 *
 * TensorDataset serves rows of in-memory tensors (small data, tests).
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace loom::data {

// One sample: an input and its target (either may be undefined, e.g. no target for text
// blocks before a window transform splits them).
struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index` in [0, size()); throws loom::Error naming the dataset when out of range.
  // Thread-safe.
  virtual Example get(int64_t index) const = 0;
  // What this data is (file, dataset names, size and modification time of the file, the
  // transforms applied), for the disk cache: equal identities mean equal examples. Empty when
  // unknown: such a dataset cannot be cached on disk.
  virtual std::string identity() const { return ""; }
  // The file the examples are read from, for error messages ("data/train.h5"); empty for data
  // held in memory. Wrappers (Subset, caches) give their inner dataset's.
  virtual std::string source() const { return ""; }
  // Throws loom::Error naming the file when the file the examples are read from was replaced,
  // truncated, modified or deleted since the dataset opened it (see Hdf5File::check_unchanged).
  // The loader calls it once per batch: it must be cheap (a stat). Datasets in memory do nothing.
  virtual void check_unchanged() const {}
};

// Rows of `data` (and of `target`, if defined), as torch's TensorDataset. The tensors are
// made contiguous once; get(i) returns views, so do not modify them in place.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(Tensor data, Tensor target = {});
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;

 private:
  Tensor data_, target_;
  int64_t size_ = 0;
};

// The first `size` examples of another dataset (torch.utils.data.Subset of range(size)): a
// smaller labelled set for experiments (how a model does with less data) and quick runs.
// Throws loom::Error for a null dataset or a size outside [1, dataset->size()].
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, int64_t size);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  std::string identity() const override;
  std::string source() const override { return dataset_->source(); }
  void check_unchanged() const override { dataset_->check_unchanged(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  int64_t size_;
};

// Throws loom::Error "<what>: index 12 out of range [0, 10)" unless 0 <= index < size.
void check_index(int64_t index, int64_t size, const std::string& what);

}  // namespace loom::data
