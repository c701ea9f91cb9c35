/* Copies, casts, fills and item() (see copy_ops.h). */
#include "ops/copy_ops.h"

#include "ops/autograd_hook.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

const Tensor& copy_(const Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_", "destination");
  check_defined(src, "copy_", "source");
  check_writable(dst, "copy_");
  // Recorded before the data changes, so that a refused in-place write (a leaf that requires
  // grad) leaves dst as it was. to(), clone() and contiguous() are recorded here too.
  if (should_record(dst, src)) record_copy_(dst, src);
  AutoGradMode below_autograd(false);
  Tensor source = src.sizes() == dst.sizes() ? src : expand(src, dst.sizes());
  if (dst.numel() == 0) return dst;
  // a.narrow(0, 1, n).copy_(a.narrow(0, 0, n)) reads all of the source before writing, as NumPy
  // does; a kernel copying in place would read what it already wrote, differently on each backend.
  source = unaliased(source, dst);
  // A copy that involves a GPU runs on the CUDA backend (it handles both directions).
  Device device = dst.is_cuda() ? dst.device() : src.device();
  get_kernel<Op::copy>(device)(dst, source);
  dst.storage()->bump_version();
  return dst;
}

const Tensor& fill_(const Tensor& dst, Scalar value) {
  check_defined(dst, "fill_");
  LOOM_CHECK(!(is_integral(dst.dtype(), true) && value.is_floating() && dst.dtype() != DType::Bool &&
               value.to_double() != static_cast<double>(value.to_int())),
             "fill_: value ", value, " cannot be stored in a ", dst.dtype(), " tensor without losing its fraction");
  if (should_record(dst)) {  // the new value is a constant: dst's history ends here
    Tensor constant = empty({}, dst.options().device(kCPU));
    get_kernel<Op::fill>(kCPU)(constant, value);
    record_copy_(dst, constant);
  }
  if (dst.numel() > 0) get_kernel<Op::fill>(dst.device())(dst, value);
  dst.storage()->bump_version();
  return dst;
}

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous");
  if (x.is_contiguous()) return x;
  Tensor out = empty(x.sizes(), x.options());
  copy_(out, x);
  return out;
}

Tensor clone(const Tensor& x) {
  check_defined(x, "clone");
  Tensor out = empty(x.sizes(), x.options());
  copy_(out, x);
  return out;
}

Tensor to(const Tensor& x, DType dtype) {
  check_defined(x, "to");
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.sizes(), x.options().dtype(dtype));
  copy_(out, x);
  return out;
}

Tensor to(const Tensor& x, Device device) {
  check_defined(x, "to");
  if (x.device() == device) return x;
  Tensor out = empty(x.sizes(), x.options().device(device));
  copy_(out, x);
  return out;
}

// ---- Tensor methods ------------------------------------------------------------------------
Tensor Tensor::contiguous() const { return loom::contiguous(*this); }
Tensor Tensor::clone() const { return loom::clone(*this); }
Tensor Tensor::to(DType dtype) const { return loom::to(*this, dtype); }
Tensor Tensor::to(Device device) const { return loom::to(*this, device); }
Tensor Tensor::to(Device device, DType dtype) const { return loom::to(loom::to(*this, device), dtype); }
Tensor& Tensor::copy_(const Tensor& src) {
  loom::copy_(*this, src);
  return *this;
}
Tensor& Tensor::fill_(Scalar value) {
  loom::fill_(*this, value);
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0); }

Scalar Tensor::item() const {
  LOOM_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", sizes());
  Tensor host = loom::to(*this, kCPU);
  return visit_dtype(dtype(), [&](auto tag) -> Scalar {
    using T = typename decltype(tag)::type;
    return Scalar(*static_cast<const T*>(host.data_ptr()));
  });
}

}  // namespace loom
