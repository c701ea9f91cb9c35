/*
 * A contiguous tensor seen as [outer, size, inner] around one dim: the layout the softmax
 * kernels of every backend (ops/cpu, ops/cuda) walk, defined once.
 */
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom {

struct DimGeometry {
  int64_t outer = 1, size = 1, inner = 1;
};

inline DimGeometry geometry_around(const Tensor& t, int64_t dim) {
  DimGeometry g;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim)
      g.outer *= t.sizes()[d];
    else if (d == dim)
      g.size = t.sizes()[d];
    else
      g.inner *= t.sizes()[d];
  }
  return g;
}

}  // namespace loom
