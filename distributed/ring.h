/*
 * The textbook ring collectives, written over ProcessGroup::send/recv so that they can be read
 * next to the picture and checked against the backend's native ones (Algorithm::Ring).
 *
 * N ranks stand in a ring; rank r sends to r+1 and receives from r-1. The tensor is cut into N
 * chunks.
 *   reduce-scatter: N-1 steps; in step s rank r sends chunk (r - s) mod N and adds what it
 *                   receives into chunk (r - s - 1) mod N. Afterwards rank r holds the full
 *                   reduction of chunk (r + 1) mod N.
 *   all-gather:     N-1 steps passing the finished chunks around the ring.
 *   all-reduce:     reduce-scatter, then all-gather: each rank sends 2 (N-1) chunks of size
 *                   S / N, i.e. 2 (N-1)/N * S bytes, independent of N for large N — the reason
 *                   the ring is bandwidth-optimal (Patarasuk & Yuan, 2009).
 * Each rank's sent bytes are counted in the group's CommStats.
 */
#pragma once

#include "distributed/process_group.h"

namespace loom::distributed {

// In place on `tensor` (any shape; contiguous). Chunks need not divide evenly.
void ring_all_reduce(ProcessGroup& group, const Tensor& tensor, ReduceOp op);
// input [n, *] -> output [size * n, *]
void ring_all_gather(ProcessGroup& group, const Tensor& input, const Tensor& output);
// input [size * n, *] -> output [n, *]
void ring_reduce_scatter(ProcessGroup& group, const Tensor& input, const Tensor& output, ReduceOp op);

}  // namespace loom::distributed
