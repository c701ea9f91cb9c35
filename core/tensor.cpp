/* TensorImpl geometry and the core creation functions (empty, from_blob, make_view). */
#include "core/tensor.h"

#include "core/grad_mode.h"

namespace loom {

TensorImpl::TensorImpl(Storage storage, DimVector sizes, DimVector strides, int64_t storage_offset, DType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      storage_offset_(storage_offset),
      dtype_(dtype) {
  refresh();
}

void TensorImpl::set_geometry(DimVector sizes, DimVector strides, int64_t storage_offset) {
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  storage_offset_ = storage_offset;
  refresh();
}

void TensorImpl::set_data(const TensorImpl& other) {
  storage_ = other.storage_;
  dtype_ = other.dtype_;
  set_geometry(other.sizes_, other.strides_, other.storage_offset_);
}

void TensorImpl::refresh() {
  numel_ = shape_numel(sizes_);
  // Contiguous = row-major order; dims of size 1 may have any stride (as in PyTorch).
  is_contiguous_ = true;
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      is_contiguous_ = numel_ == 0;
      break;
    }
    expected *= sizes_[i];
  }
}

int64_t Tensor::size(int64_t dim) const {
  return sizes()[static_cast<size_t>(wrap_dim(dim, this->dim(), "size"))];
}

int64_t Tensor::stride(int64_t dim) const {
  return strides()[static_cast<size_t>(wrap_dim(dim, this->dim(), "stride"))];
}

Tensor empty(IntArrayRef sizes, TensorOptions options) {
  int64_t n = shape_numel(sizes);
  auto storage = std::allocate_shared<StorageImpl>(PoolAllocator<StorageImpl>(), static_cast<size_t>(n) * dtype_size(options.dtype()),
                                               options.device());
  return Tensor(make_tensor_impl(std::move(storage), DimVector(sizes), contiguous_strides(sizes), 0,
                                             options.dtype()));
}

Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options,
                 std::function<void(void*)> deleter) {
  LOOM_CHECK(sizes.size() == strides.size(), "from_blob: ", sizes.size(), " sizes but ", strides.size(),
             " strides");
  LOOM_CHECK(data != nullptr || shape_numel(sizes) == 0, "from_blob: null data pointer for shape ", sizes);
  // Span of elements reachable from the first one (strides may be negative only in views).
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    LOOM_CHECK(strides[i] >= 0, "from_blob: negative stride ", strides[i]);
    if (sizes[i] == 0) extent = 0;
    if (extent) extent += (sizes[i] - 1) * strides[i];
  }
  if (shape_numel(sizes) == 0) extent = 0;
  auto storage = std::allocate_shared<StorageImpl>(PoolAllocator<StorageImpl>(), data, static_cast<size_t>(extent) * dtype_size(options.dtype()),
                                               options.device(), std::move(deleter));
  return Tensor(make_tensor_impl(std::move(storage), DimVector(sizes), DimVector(strides), 0,
                                             options.dtype()));
}

Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions options, std::function<void(void*)> deleter) {
  return from_blob(data, sizes, contiguous_strides(sizes), options, std::move(deleter));
}

Tensor alias(const Tensor& t) {
  return Tensor(make_tensor_impl(t.storage(), DimVector(t.sizes()), DimVector(t.strides()), t.storage_offset(),
                                 t.dtype()));
}

Tensor make_view(const Tensor& base, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset) {
  auto impl = make_tensor_impl(base.storage(), DimVector(sizes), DimVector(strides), storage_offset,
                                           base.dtype());
  // Remember the root base (inference mode skips it: nothing will be differentiated).
  if (!GradMode::is_inference()) impl->set_view_base(base.is_view() ? base.impl()->view_base() : base.impl_ptr());
  return Tensor(std::move(impl));
}

}  // namespace loom
