/*
 * Which input coordinate a padded output coordinate reads, for every padding mode: one
 * definition for the CPU kernels, the CUDA kernels and pad's gradient, so that the backends
 * cannot disagree about an edge.
 */
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace loom {

// Padding modes as the kernels see them (ops/kernel_types.h's PadMode, as an int for the
// CUDA launchers' C interface).
inline constexpr int kPadConstant = 0, kPadReflect = 1, kPadReplicate = 2, kPadCircular = 3;

// The input coordinate that output coordinate j of a dim of `size` padded by `left` reads, or
// -1 for the constant fill. For [a b c d] padded by 2 on each side:
//   reflect   [c b | a b c d | c b]  mirrors about the edge elements without repeating them;
//   replicate [a a | a b c d | d d]  repeats the edge elements;
//   circular  [c d | a b c d | a b]  wraps around.
// The pads were checked first (ops/shape_ops.cpp padded_shape): reflect pads are smaller than
// the size, circular pads at most the size, and a replicated dim is not empty.
LOOM_HOST_DEVICE inline int64_t pad_source(int64_t j, int64_t left, int64_t size, int mode) {
  const int64_t i = j - left;
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case kPadReflect: return i < 0 ? -i : 2 * (size - 1) - i;
    case kPadReplicate: return i < 0 ? 0 : size - 1;
    case kPadCircular: return i < 0 ? i + size : i - size;
    default: return -1;
  }
}

}  // namespace loom
