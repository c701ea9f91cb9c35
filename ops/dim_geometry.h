/*
 * A contiguous tensor seen as [outer, size, inner] around one dim: the layout that the kernels
 * working along one dim (softmax, cat, padding, batch norm's channels, per-channel
 * quantisation) walk on every backend (ops/cpu, ops/cuda), defined once. The sizes form is
 * LOOM_HOST_DEVICE so that device code can split a shape it holds the same way.
 */
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/tensor.h"

namespace loom {

struct DimGeometry {
  int64_t outer = 1, size = 1, inner = 1;
};

// sizes[0, ndim) around `dim` (0 <= dim < ndim): outer = the product of the sizes before it,
// inner = the product of those after it.
LOOM_HOST_DEVICE inline DimGeometry geometry_around(const int64_t* sizes, int64_t ndim, int64_t dim) {
  DimGeometry g;
  for (int64_t d = 0; d < ndim; ++d) {
    if (d < dim)
      g.outer *= sizes[d];
    else if (d == dim)
      g.size = sizes[d];
    else
      g.inner *= sizes[d];
  }
  return g;
}

inline DimGeometry geometry_around(const Tensor& t, int64_t dim) {
  return geometry_around(t.sizes().data(), t.dim(), dim);
}

}  // namespace loom
