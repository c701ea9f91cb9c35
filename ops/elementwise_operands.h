/*
 * The operands of the elementwise ops (ops/elementwise.cpp): a tensor or a number, the dtype
 * they compute in (PyTorch's result_type), the shape they broadcast to, and the kernel input
 * each becomes. Internal to ops/.
 */
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>

#include "core/tensor.h"

namespace loom::elementwise {

// An operand of a binary op: a tensor, or a number that promotes like a Python scalar.
struct Operand {
  const Tensor* tensor = nullptr;
  Scalar scalar;
  explicit Operand(const Tensor& t) : tensor(&t) {}
  explicit Operand(Scalar s) : scalar(s) {}
};

// PyTorch's ResultTypeState: dimensioned tensors, 0-dim tensors and numbers are promoted
// separately; a lower-priority group only matters when it is of a higher category
// (bool < integral < floating). So float16[3] + float32 0-dim stays float16, int32[3] + 5
// stays int32, but int32[3] + 0.5 is float32 (the default dtype for a Python float).
class ResultType {
 public:
  void add(const Tensor& t) { merge(t.dim() > 0 ? dim_ : zero_dim_, t.dtype()); }
  void add(Scalar s) { merge(number_, s.default_dtype()); }
  void add(const Operand& o) { o.tensor ? add(*o.tensor) : add(o.scalar); }
  DType get() const { return combine(dim_, combine(zero_dim_, number_)).value_or(DType::Float32); }

 private:
  static void merge(std::optional<DType>& slot, DType t) { slot = slot ? promote_types(*slot, t) : t; }
  // combine_categories: `lower` (a lower-priority group) only wins a higher category.
  static std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher) return lower;
    if (!lower || is_floating(*higher)) return higher;
    if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
    return higher;
  }

  std::optional<DType> dim_, zero_dim_, number_;
};

// The promoted dtype of a binary op's operands (ResultType over both).
DType result_type(const Operand& a, const Operand& b);
// PyTorch's canCast: no floating -> integral, no non-bool -> bool. Throws loom::Error naming `op`.
void check_can_cast(DType result, DType self, std::string_view op);

void check_operand(const Operand& o, std::string_view op);
// PyTorch's CPU scalars: a 0-dim CPU tensor may be an operand of an elementwise op whose other
// tensors are on a GPU (cuda_x * torch::tensor(0.5)). It keeps a 0-dim tensor's place in type
// promotion, and its value is read on the host.
bool is_cpu_scalar(const Tensor& t);
// The device of the tensors (null entries skipped) that are not CPU scalars, which must agree;
// the CPU when every tensor is a CPU scalar. Throws loom::Error naming `op` and both devices.
Device common_device(std::initializer_list<const Tensor*> tensors, std::string_view op);
// The device of the tensor operands: common_device of the two.
Device device_of(const Operand& a, const Operand& b, std::string_view op);
DimVector broadcast_shape(const Operand& a, const Operand& b, std::string_view op);
// A number as a 0-dim tensor of `dtype` on `device`.
Tensor scalar_tensor_of(Scalar s, DType dtype, Device device);
// The operand as a kernel input: converted to `dtype` (only if it differs) and expanded to
// `shape` (stride 0 along broadcast dims).
Tensor kernel_input(const Operand& o, DType dtype, IntArrayRef shape, Device device);

}  // namespace loom::elementwise
