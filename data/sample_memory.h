/*
 * Memory for per-sample tensors (an image read from a chunk, the output of a crop or of
 * Normalize): a few hundred bytes to a few kilobytes, allocated and freed several times per
 * sample on every worker.
 *
 * They come from a small per-thread cache of 64-byte-aligned blocks, not from Loom's CPU
 * caching allocator: that allocator serialises on one lock, which two workers hit about ten
 * times per sample each (measured: two workers were slower than one). A block freed on
 * another thread (a cached sample dropped by the consumer) joins that thread's cache, or goes
 * back to malloc when the cache is full. Batches, large and few, still come from the caching
 * allocator.
 */
#pragma once

#include "core/tensor.h"

namespace loom::data {

// An uninitialised contiguous CPU tensor for one sample, 64-byte aligned.
Tensor sample_tensor(IntArrayRef sizes, DType dtype);

}  // namespace loom::data
