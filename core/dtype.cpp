/* Type promotion (PyTorch's table, restricted to Loom's dtypes). */
#include "core/dtype.h"

namespace loom {

namespace {
// Rank inside a category: the larger rank wins.
int float_rank(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16:
      return 1;
    case DType::Float32:
      return 2;
    default:
      return 3;  // Float64
  }
}
int int_rank(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
      return 1;
    case DType::Int32:
      return 2;
    default:
      return 3;  // Int64
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    int ra = float_rank(a), rb = float_rank(b);
    if (ra == 1 && rb == 1) return DType::Float32;  // float16 with bfloat16
    return ra > rb ? a : b;
  }
  int ra = int_rank(a), rb = int_rank(b);
  if (ra == 1 && rb == 1) return DType::Int32;  // uint8 with int8: PyTorch's int16, widened
  return ra > rb ? a : b;
}

}  // namespace loom
