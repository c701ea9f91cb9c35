/*
 * loom::Tensor: a handle (shared, like torch::Tensor) to a TensorImpl — a storage plus
 * sizes, strides, an element offset, a dtype and a device. Views share the storage.
 *
 * This header declares the whole method API so that user code reads like libtorch
 * (x.matmul(w).relu().sum()). The methods that only read metadata are defined in core; those
 * that compute are thin forwards to the free functions of the ops layer (ops/ops.h), which
 * validate their inputs and dispatch to a kernel. A program that calls them links loom_ops.
 */
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/object_pool.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"
#include "core/tensor_options.h"

namespace loom {

namespace autograd {
class Node;
}

// Autograd keeps its per-tensor state (grad, grad_fn, requires_grad) behind this interface so
// that core does not depend on the autograd layer.
struct AutogradMetaInterface {
  virtual ~AutogradMetaInterface() = default;
  virtual bool requires_grad() const = 0;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, DimVector sizes, DimVector strides, int64_t storage_offset, DType dtype);

  const Storage& storage() const { return storage_; }
  IntArrayRef sizes() const { return sizes_; }
  IntArrayRef strides() const { return strides_; }
  int64_t storage_offset() const { return storage_offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  int64_t numel() const { return numel_; }
  bool is_contiguous() const { return is_contiguous_; }
  void* data() const {
    return static_cast<char*>(storage_->data()) + storage_offset_ * static_cast<int64_t>(dtype_size(dtype_));
  }

  // Re-points this impl at new geometry over the same storage (used by in-place resizes).
  void set_geometry(DimVector sizes, DimVector strides, int64_t storage_offset);
  // Takes over other's storage, geometry and dtype, keeping this impl's identity and autograd
  // state (torch's set_data): Module::to() converts parameters without breaking the handles
  // that layers and optimizers hold.
  void set_data(const TensorImpl& other);

  AutogradMetaInterface* autograd_meta() const { return autograd_meta_.get(); }
  void set_autograd_meta(std::unique_ptr<AutogradMetaInterface> meta) { autograd_meta_ = std::move(meta); }
  bool requires_grad() const { return autograd_meta_ && autograd_meta_->requires_grad(); }

  // The tensor this one is a view of (null for a non-view). Autograd needs it when a view is
  // modified in place: the base's history must change too (torch's _base).
  const std::shared_ptr<TensorImpl>& view_base() const { return view_base_; }
  void set_view_base(std::shared_ptr<TensorImpl> base) { view_base_ = std::move(base); }

 private:
  void refresh();

  Storage storage_;
  DimVector sizes_;
  DimVector strides_;
  int64_t storage_offset_;
  int64_t numel_ = 0;
  DType dtype_;
  bool is_contiguous_ = true;
  std::unique_ptr<AutogradMetaInterface> autograd_meta_;
  std::shared_ptr<TensorImpl> view_base_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (core) ------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  IntArrayRef sizes() const { return checked().sizes(); }
  IntArrayRef strides() const { return checked().strides(); }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(checked().sizes().size()); }
  int64_t numel() const { return checked().numel(); }
  DType dtype() const { return checked().dtype(); }
  DType scalar_type() const { return dtype(); }
  Device device() const { return checked().device(); }
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_contiguous() const { return checked().is_contiguous(); }
  size_t element_size() const { return dtype_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  const Storage& storage() const { return checked().storage(); }
  int64_t storage_offset() const { return checked().storage_offset(); }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // True when both tensors view the same storage.
  bool shares_storage(const Tensor& other) const { return storage() == other.storage(); }
  uint64_t version() const { return storage()->version(); }
  // A view made by a view op (or make_view) of `base()`, which is never itself a view.
  bool is_view() const { return checked().view_base() != nullptr; }
  Tensor base() const { return Tensor(checked().view_base()); }

  void* data_ptr() const { return checked().data(); }
  // Typed pointer to the first element; throws if T does not match the dtype.
  template <class T>
  T* data_ptr() const {
    LOOM_CHECK(dtype_of<T> == dtype(), "data_ptr<", dtype_of<T>, ">() called on a ", dtype(), " tensor");
    return static_cast<T*>(checked().data());
  }

  // ---- views (ops/view_ops.h) -------------------------------------------------
  Tensor view(IntArrayRef sizes) const;  // one size may be -1; throws if strides forbid a view
  Tensor view_as(const Tensor& other) const { return view(other.sizes()); }
  Tensor reshape(IntArrayRef sizes) const;  // a view when possible, else a contiguous copy
  Tensor reshape_as(const Tensor& other) const { return reshape(other.sizes()); }
  Tensor as_strided(IntArrayRef sizes, IntArrayRef strides, std::optional<int64_t> storage_offset = {}) const;
  Tensor permute(IntArrayRef dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose (0-D and 1-D return themselves)
  Tensor slice(int64_t dim, std::optional<int64_t> start = {}, std::optional<int64_t> end = {},
               int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(IntArrayRef sizes) const;  // -1 keeps a size; new leading dims allowed
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, IntArrayRef sizes) const;
  Tensor contiguous() const;  // itself when already contiguous
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(IntArrayRef split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- conversion and copies (ops/copy_ops.h) ------------------------------------
  Tensor to(DType dtype) const;  // itself when the dtype already matches
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor clone() const;  // contiguous copy
  Tensor& copy_(const Tensor& src);  // broadcasts src to this, converting dtype
  Tensor& fill_(Scalar value);
  Tensor& zero_();
  Scalar item() const;  // the value of a one-element tensor
  template <class T>
  T item() const {
    return item().to<T>();
  }
  // All elements in row-major order, converted to T (tests and tools).
  template <class T>
  std::vector<T> to_vector() const;

  // ---- elementwise (ops/elementwise.h) -------------------------------------------
  Tensor add(const Tensor& other, Scalar alpha = 1) const;
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other, Scalar alpha = 1) const;
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu(std::string_view approximate = "none") const;
  Tensor silu() const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = {}) const;
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_not() const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;

  // In place: the result is converted to this tensor's dtype (an error when that would lose
  // the category, e.g. a float result into an int tensor, as in PyTorch).
  Tensor& add_(const Tensor& other, Scalar alpha = 1);
  Tensor& add_(Scalar other);
  Tensor& sub_(const Tensor& other, Scalar alpha = 1);
  Tensor& sub_(Scalar other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar other);
  Tensor& pow_(Scalar exponent);
  Tensor& neg_();
  Tensor& exp_();
  Tensor& log_();
  Tensor& sqrt_();
  Tensor& abs_();
  Tensor& tanh_();
  Tensor& sigmoid_();
  Tensor& relu_();
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = {});
  Tensor& masked_fill_(const Tensor& mask, Scalar value);

  // ---- reductions (ops/reduction.h); empty dims = all dims ---------------------------
  Tensor sum(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor mean(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor prod(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor amax(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor amin(IntArrayRef dims = {}, bool keepdim = false) const;
  Tensor max() const;  // of all elements
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = {}, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = {}, bool keepdim = false) const;
  Tensor var(IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(IntArrayRef dims, bool keepdim = false) const;
  Tensor norm(double p = 2.0, IntArrayRef dims = {}, bool keepdim = false) const;

  // ---- scans and sorting (ops/sort_ops.h) ----------------------------------------------
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = {}) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;  // values, indices
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  std::tuple<Tensor, Tensor> kthvalue(int64_t k, int64_t dim = -1, bool keepdim = false) const;
  Tensor median() const;
  std::tuple<Tensor, Tensor> median(int64_t dim, bool keepdim = false) const;

  // ---- linear algebra and nn (ops/linalg.h, ops/nn_ops.h) -------------------------------
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor bmm(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- indexing and shape (ops/shape_ops.h) --------------------------------------------
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor repeat(IntArrayRef repeats) const;
  Tensor flip(IntArrayRef dims) const;
  Tensor roll(IntArrayRef shifts, IntArrayRef dims = {}) const;

  // ---- autograd (autograd/tensor_autograd.cpp; a program that calls these links loom_autograd)
  // Whether ops on this tensor are recorded for backward: a leaf that asked for it, or the
  // result of a recorded op.
  bool requires_grad() const { return impl_ && impl_->requires_grad(); }
  // Marks a leaf (floating dtype) as needing its gradient; throws on a non-leaf.
  Tensor& requires_grad_(bool requires_grad = true);
  Tensor& set_requires_grad(bool requires_grad) { return requires_grad_(requires_grad); }
  // The accumulated gradient (undefined until a backward reaches this leaf).
  const Tensor& grad() const;
  Tensor& mutable_grad();  // to set or reset it (optimizers, zero_grad)
  // The node that computed this tensor (null for leaves and tensors outside autograd).
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;  // no grad_fn: created by the user, or by an op nobody records
  uint32_t output_nr() const;  // which output of grad_fn this is
  // The same data, cut out of the graph (never requires grad); shares storage and version.
  Tensor detach() const;
  Tensor& detach_();
  // Makes this handle (and every copy of it) refer to `data`'s storage, shape and dtype while
  // keeping its identity, requires_grad and grad (torch's `param.data = data`). Not recorded.
  void set_data(const Tensor& data) const { const_cast<TensorImpl&>(checked()).set_data(data.checked()); }
  // Backpropagates from this tensor: d(this)/d(leaf) accumulated into every leaf's grad().
  // gradient: d(loss)/d(this), required unless this has one element. The graph is freed
  // unless retain_graph; create_graph records the backward itself (for higher derivatives).
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = {}, bool create_graph = false) const;
  // A non-leaf keeps its gradient in grad() too (leaves always do).
  void retain_grad() const;
  bool retains_grad() const;
  // hook(grad) runs when this tensor's gradient is computed; a defined return value replaces
  // the gradient. Returns a handle for remove_hook.
  uint64_t register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void remove_hook(uint64_t handle) const;
  // Leaves only: hook(tensor) runs right after a backward has finished accumulating into
  // grad() — the moment the gradient is final (DDP starts the bucket's all-reduce there).
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

  // ---- compound assignment -------------------------------------------------------------
  Tensor& operator+=(const Tensor& other) { return add_(other); }
  Tensor& operator+=(Scalar other) { return add_(other); }
  Tensor& operator-=(const Tensor& other) { return sub_(other); }
  Tensor& operator-=(Scalar other) { return sub_(other); }
  Tensor& operator*=(const Tensor& other) { return mul_(other); }
  Tensor& operator*=(Scalar other) { return mul_(other); }
  Tensor& operator/=(const Tensor& other) { return div_(other); }
  Tensor& operator/=(Scalar other) { return div_(other); }

 private:
  const TensorImpl& checked() const {
    LOOM_CHECK(impl_ != nullptr, "operation on an undefined tensor");
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
};

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = to(kCPU).to(dtype_of<T>).contiguous();
  const T* p = host.data_ptr<T>();
  return std::vector<T>(p, p + host.numel());
}

// ---- arithmetic operators (ops/elementwise.cpp) ---------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);

// A new TensorImpl from the per-thread object pool (every op makes one).
template <class... Args>
std::shared_ptr<TensorImpl> make_tensor_impl(Args&&... args) {
  return std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>(), std::forward<Args>(args)...);
}

// ---- creation (core) -------------------------------------------------------------------
// An uninitialised contiguous tensor.
Tensor empty(IntArrayRef sizes, TensorOptions options = {});
// A tensor over existing memory, which must outlive it unless `deleter` takes ownership.
Tensor from_blob(void* data, IntArrayRef sizes, TensorOptions options = {},
                 std::function<void(void*)> deleter = {});
Tensor from_blob(void* data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options = {},
                 std::function<void(void*)> deleter = {});
// The same data and geometry in a new handle with no autograd state and no view link: what
// detach() returns, and how autograd keeps a tensor without pulling its history in.
Tensor alias(const Tensor& t);
// A view of `base`'s storage with the given geometry (no bounds check beyond the storage).
Tensor make_view(const Tensor& base, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);

// Prints like PyTorch: tensor([[1.0000, 2.0000], ...], dtype=...), eliding the middle of
// large tensors (ops/print.cpp).
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace loom
