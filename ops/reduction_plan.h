/*
 * How the reduction kernels of every backend (ops/cpu, ops/cuda) walk their input: the kept
 * dims in the input's order (row-major index = output index) and the reduced dims with stride-0
 * dims first, then by decreasing stride, so that the innermost is the densest; size-1 dims
 * dropped and contiguous neighbours merged. Defined once so that both backends visit the
 * reduced elements in the same order.
 */
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {

// A group of dims of the input, innermost last, with element strides. No dims = one element.
struct DimGroup {
  DimVector sizes, strides;
};

struct ReductionPlan {
  DimGroup kept, reduced;
};

// Merges neighbouring dims (outer i, inner i + 1) that are contiguous with each other.
inline DimGroup coalesce_dims(const DimGroup& g) {
  DimGroup merged;
  for (size_t i = 0; i < g.sizes.size(); ++i) {
    if (!merged.sizes.empty() && merged.strides.back() == g.strides[i] * g.sizes[i]) {
      merged.sizes.back() *= g.sizes[i];
      merged.strides.back() = g.strides[i];
    } else {
      merged.sizes.push_back(g.sizes[i]);
      merged.strides.push_back(g.strides[i]);
    }
  }
  return merged;
}

// dims: sorted, unique, non-negative.
inline ReductionPlan plan_reduction(const Tensor& in, IntArrayRef dims) {
  ReductionPlan p;
  std::vector<std::pair<int64_t, int64_t>> reduced;  // (stride, size)
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t size = in.sizes()[d], stride = in.strides()[d];
    if (size == 1) continue;
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      reduced.emplace_back(stride, size);
    } else {
      p.kept.sizes.push_back(size);
      p.kept.strides.push_back(stride);
    }
  }
  // Stable, so that equal strides keep the input order (the row-major order of the reduced
  // index, which max/min report for their single dim).
  std::stable_sort(reduced.begin(), reduced.end(), [](const auto& a, const auto& b) {
    if ((a.first == 0) != (b.first == 0)) return a.first == 0;
    return a.first > b.first;
  });
  for (const auto& [stride, size] : reduced) {
    p.reduced.sizes.push_back(size);
    p.reduced.strides.push_back(stride);
  }
  p.kept = coalesce_dims(p.kept);
  p.reduced = coalesce_dims(p.reduced);
  return p;
}

}  // namespace loom
