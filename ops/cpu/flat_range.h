/*
 * Runs elementwise work over many tensors as one parallel range: the CPU side of the
 * multi-tensor optimizer ops (optim_kernels.cpp) and nn::clip_grad_value_.
 *
 * An optimizer step or a gradient-norm pass touches every parameter of a model, and a model
 * has many small tensors (biases, LayerNorm weights) next to a few large ones. Waking the
 * OpenMP pool once per tensor would cost more than the work on the small ones, so the
 * tensors' elements are laid end to end in one index space, cut into fixed blocks, and the
 * blocks are handed to a single loom::parallel_for.
 *
 * The cut points depend only on the tensors' sizes, never on the thread count, and each
 * tensor starts on a multiple of kFlatAlign: an element is processed by the same instruction
 * sequence (vector body or scalar tail) whatever the number of threads, so results are
 * bitwise identical with 1 or N threads. Reductions stay deterministic by summing per block
 * and then over blocks in order.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"

namespace loom::cpu {

// Elements per block: large enough that a block outweighs the cost of scheduling it, and a
// multiple of kFlatAlign so block boundaries fall on aligned offsets inside every tensor.
inline constexpr int64_t kFlatBlock = 32768;
inline constexpr int64_t kFlatAlign = 64;

// The tensors' element counts laid end to end, each padded up to kFlatAlign.
class FlatRange {
 public:
  explicit FlatRange(const std::vector<int64_t>& numels) : numels_(numels), offsets_(numels.size() + 1, 0) {
    for (size_t i = 0; i < numels.size(); ++i)
      offsets_[i + 1] = offsets_[i] + (numels[i] + kFlatAlign - 1) / kFlatAlign * kFlatAlign;
  }

  int64_t num_blocks() const { return (offsets_.back() + kFlatBlock - 1) / kFlatBlock; }

  // Calls f(item, begin, end) for every piece of an item's elements [begin, end) that lies in
  // blocks [block_begin, block_end), in order.
  template <class F>
  void visit_blocks(int64_t block_begin, int64_t block_end, const F& f) const {
    const int64_t lo = block_begin * kFlatBlock;
    const int64_t hi = std::min(block_end * kFlatBlock, offsets_.back());
    // The first item whose padded range ends after lo.
    size_t i = static_cast<size_t>(std::upper_bound(offsets_.begin() + 1, offsets_.end(), lo) -
                                   offsets_.begin() - 1);
    for (; i < numels_.size() && offsets_[i] < hi; ++i) {
      const int64_t begin = std::max(lo, offsets_[i]) - offsets_[i];
      const int64_t end = std::min(hi - offsets_[i], numels_[i]);
      if (begin < end) f(i, begin, end);
    }
  }

  // Calls f(item, begin, end) over all elements of all items, in parallel across blocks: one
  // parallel region for the whole set.
  template <class F>
  void parallel_visit(const F& f) const {
    parallel_for(0, num_blocks(), 1, [&](int64_t b, int64_t e) { visit_blocks(b, e, f); });
  }

 private:
  std::vector<int64_t> numels_;
  std::vector<int64_t> offsets_;
};

}  // namespace loom::cpu
