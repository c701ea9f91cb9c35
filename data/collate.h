/*
 * Collation: a list of examples becomes one Batch of contiguous tensors [B, ...], as
 * PyTorch's default_collate stacks them. The loader collates in its workers, into memory from
 * `alloc` (page-locked memory when the batch goes to a GPU, see device_transfer.h).
 */
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/dataset.h"

namespace loom::data {

struct Batch {
  Tensor data;                   // [B, ...] stacked example.data
  Tensor target;                 // [B, ...] stacked example.target (undefined when the examples have none)
  std::vector<int64_t> indices;  // the dataset index of each row
  int64_t epoch = 0;
  int64_t index = 0;  // the batch's position in its epoch
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

// Memory for a batch tensor (default: loom::empty on the CPU).
using BatchAllocator = std::function<Tensor(IntArrayRef sizes, DType dtype)>;

// Stacks the examples. Every example must have data (and target) of one shape and dtype, or
// all of them none; otherwise throws loom::Error naming the first example that differs.
Batch collate(const std::vector<Example>& examples, const BatchAllocator& alloc = {});

}  // namespace loom::data
