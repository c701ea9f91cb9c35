/*
 * How the CPU kernels size their parallel chunks: a chunk should hold enough work to pay for
 * waking the pool (core/parallel.h's kParallelGrain elements of simple work), so a loop over
 * items that each cost `work_per_item` steps takes chunks of that many steps' worth of items.
 */
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/parallel.h"

namespace loom::cpu {

// Items per parallel chunk so that a chunk holds about `chunk_work` elementary steps (at least
// one item). Ops whose items are costlier or cheaper than simple elementwise work pass their
// own chunk_work.
inline int64_t grain_for(int64_t work_per_item, int64_t chunk_work = kParallelGrain) {
  return std::max<int64_t>(1, chunk_work / std::max<int64_t>(work_per_item, 1));
}

}  // namespace loom::cpu
