/* TensorDataset and the index check shared by datasets (see dataset.h). */
#include "data/dataset.h"

#include "ops/ops.h"

namespace loom::data {

void check_index(int64_t index, int64_t size, const std::string& what) {
  LOOM_CHECK(index >= 0 && index < size, what, ": index ", index, " out of range [0, ", size, ")");
}

TensorDataset::TensorDataset(Tensor data, Tensor target) {
  LOOM_CHECK(data.defined() && data.dim() >= 1, "TensorDataset: data must have at least one dimension");
  data_ = data.contiguous();
  size_ = data_.size(0);
  if (target.defined()) {
    LOOM_CHECK(target.dim() >= 1 && target.size(0) == size_, "TensorDataset: target has ",
               target.dim() == 0 ? 0 : target.size(0), " rows but data has ", size_);
    target_ = target.contiguous();
  }
}

Example TensorDataset::get(int64_t index) const {
  check_index(index, size_, "TensorDataset");
  return {data_.select(0, index), target_.defined() ? target_.select(0, index) : Tensor()};
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, int64_t size) : dataset_(std::move(dataset)), size_(size) {
  LOOM_CHECK(dataset_ != nullptr, "Subset: null dataset");
  LOOM_CHECK(size >= 1 && size <= dataset_->size(), "Subset: expected a size in [1, ", dataset_->size(),
             "] (the dataset's), got ", size);
}

Example Subset::get(int64_t index) const {
  check_index(index, size_, "Subset");
  return dataset_->get(index);
}

std::string Subset::identity() const {
  const std::string inner = dataset_->identity();
  return inner.empty() ? "" : inner + " [first " + std::to_string(size_) + "]";
}

}  // namespace loom::data
