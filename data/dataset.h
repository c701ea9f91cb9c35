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

// Throws loom::Error "<what>: index 12 out of range [0, 10)" unless 0 <= index < size.
void check_index(int64_t index, int64_t size, const std::string& what);

}  // namespace loom::data
