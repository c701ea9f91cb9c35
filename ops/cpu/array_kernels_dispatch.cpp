/* array_kernels(): the copy of array_kernels.cpp that vector_isa() chooses. */
#include "ops/cpu/array_kernels.h"
#include "ops/cpu/vector_isa.h"

namespace loom::cpu {

template <class A>
const ArrayKernels<A>& array_kernels() {
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  const VectorIsa isa = vector_isa();
  if (isa == VectorIsa::Avx512) return avx512::array_kernels_table<A>();
  if (isa == VectorIsa::Avx2) return avx2::array_kernels_table<A>();
#endif
  return compiled::array_kernels_table<A>();
}

template const ArrayKernels<float>& array_kernels<float>();
template const ArrayKernels<double>& array_kernels<double>();

}  // namespace loom::cpu
