/* The casts of the autocast policy (see autocast.h). */
#include "ops/autocast.h"

#include "ops/copy_ops.h"

namespace loom {

Tensor autocast_lower(const Tensor& x) {
  if (!x.defined() || !autocast_enabled(x.device())) return x;
  const DType t = x.dtype();
  // float64 is left alone (torch's rule): code that asked for double precision keeps it.
  if (t != kFloat32 && t != kFloat16 && t != kBFloat16) return x;
  return to(x, autocast_dtype(x.device()));
}

Tensor autocast_fp32(const Tensor& x) {
  if (!x.defined() || !autocast_enabled(x.device())) return x;
  const DType t = x.dtype();
  return t == kFloat16 || t == kBFloat16 ? to(x, kFloat32) : x;
}

}  // namespace loom
