/*
 * The operands of the elementwise ops (see elementwise_operands.h): PyTorch's type promotion
 * and NumPy broadcasting, and their conversion into kernel inputs.
 */
#include "ops/elementwise_operands.h"

#include <optional>

#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom::elementwise {

DType result_type(const Operand& a, const Operand& b) {
  if (a.tensor && b.tensor && a.tensor->dtype() == b.tensor->dtype()) return a.tensor->dtype();
  ResultType r;
  r.add(a);
  r.add(b);
  return r.get();
}

// PyTorch's canCast: no floating -> integral, no non-bool -> bool.
void check_can_cast(DType result, DType self, std::string_view op) {
  bool ok = !(is_floating(result) && is_integral(self)) && !(result != DType::Bool && self == DType::Bool);
  LOOM_CHECK(ok, op, ": result type ", result, " can't be cast to the desired output type ", self);
}

void check_operand(const Operand& o, std::string_view op) {
  if (o.tensor) check_defined(*o.tensor, op);
}

bool is_cpu_scalar(const Tensor& t) { return t.dim() == 0 && t.is_cpu(); }

Device common_device(std::initializer_list<const Tensor*> tensors, std::string_view op) {
  const Tensor* first = nullptr;  // the first tensor that is not a CPU scalar
  for (const Tensor* t : tensors) {
    if (!t || is_cpu_scalar(*t)) continue;
    if (first) check_same_device(*first, *t, op);
    else first = t;
  }
  return first ? first->device() : kCPU;
}

Device device_of(const Operand& a, const Operand& b, std::string_view op) {
  return common_device({a.tensor, b.tensor}, op);
}

DimVector broadcast_shape(const Operand& a, const Operand& b, std::string_view op) {
  if (!a.tensor) return DimVector(b.tensor->sizes());
  if (!b.tensor || a.tensor->sizes() == b.tensor->sizes()) return DimVector(a.tensor->sizes());
  return broadcast_shapes(a.tensor->sizes(), b.tensor->sizes(), op);
}

// A number as a 0-dim tensor of `dtype` on `device`.
Tensor scalar_tensor_of(Scalar s, DType dtype, Device device) {
  if (!device.is_cpu()) {
    // Filled by a kernel that takes the value as an argument: no host-to-device copy for the
    // host to wait for, and a CUDA graph can capture it.
    Tensor t = empty({}, TensorOptions(dtype).device(device));
    t.fill_(s);
    return t;
  }
  Tensor t = empty({}, TensorOptions(dtype));
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    *static_cast<T*>(t.data_ptr()) = s.to<T>();
  });
  return t;
}

// The operand as a kernel input: converted to `dtype` (only if it differs) and expanded to
// `shape` (stride 0 along broadcast dims).
Tensor kernel_input(const Operand& o, DType dtype, IntArrayRef shape, Device device) {
  if (!o.tensor) {  // a number: one element seen through all-zero strides
    Tensor t = scalar_tensor_of(o.scalar, dtype, device);
    return shape.empty() ? t : make_view(t, shape, DimVector(shape.size(), 0), 0);
  }
  // A CPU scalar joining tensors on another device: its value is read here, on the host, and
  // filled on the device by a kernel, as a number's is (no copy for the host to wait for).
  if (o.tensor->device() != device) return kernel_input(Operand(o.tensor->item()), dtype, shape, device);
  Tensor t = o.tensor->dtype() == dtype ? *o.tensor : to(*o.tensor, dtype);
  if (t.sizes() == shape) return t;
  // A 0-dim operand (often a recorded number) is one element seen through all-zero strides.
  return t.dim() == 0 ? make_view(t, shape, DimVector(shape.size(), 0), t.storage_offset()) : expand(t, shape);
}

}  // namespace loom::elementwise
