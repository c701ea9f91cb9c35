/*
 * Eigen for the CPU kernels that compute on rows as arrays: the include (with the warning
 * GCC raises inside its own intrinsics) and the maps that view a row of n values as an array.
 */
#pragma once

// GCC 12 reports its own _mm512_undefined_* intrinsics (inlined from Eigen's AVX-512 packet
// math) as -Wuninitialized; the pragma covers the intrinsic headers, first included here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

namespace loom::cpu {

template <class A>
using ArrayMap = Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>;
template <class A>
using ConstArrayMap = Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>;

}  // namespace loom::cpu
