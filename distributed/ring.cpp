/*
 * The textbook ring collectives (Patarasuk & Yuan, 2009; the algorithm behind NCCL's and
 * Horovod's all-reduce), written over ProcessGroup::send_async / recv_async so that they read
 * like the picture and can be checked against the backend's native collectives
 * (group.set_algorithm(Algorithm::Ring)).
 *
 * The ring. Every rank talks to two neighbours only: it receives from the one on its left and
 * sends to the one on its right, and all N links carry data at the same time.
 *
 *            r0 ──► r1 ──► r2
 *            ▲              │          next = (r + 1) mod N
 *            │              ▼          prev = (r - 1) mod N
 *            r5 ◄── r4 ◄── r3
 *
 * The chunks. The tensor is flattened to M elements and cut into N contiguous chunks:
 *
 *     chunk i = elements [i*q + min(i, m), (i+1)*q + min(i+1, m)),   q = M / N, m = M mod N,
 *
 * so the first m chunks have q+1 elements and the others q: any M works (M < N leaves some
 * chunks empty; their messages are zero bytes). All ranks compute the same split because M is the
 * same on all of them.
 *
 * All-reduce = reduce-scatter, then all-gather. Example: N = 3, rank r starts with chunks a_r b_r
 * c_r; "a01" is a0 + a1. A step is one send to the right and one receive from the left, made by
 * all ranks at once.
 *
 *   reduce-scatter, step s: rank r sends chunk (r - s) mod N and reduces the chunk (r - s - 1)
 *   mod N that arrives from the left into its own copy of it.
 *                   rank 0            rank 1            rank 2
 *     start         a0   b0   c0      a1   b1   c1      a2   b2   c2
 *     s = 0         a0   b0   c02     a01  b1   c1      a2   b12  c2      (rank r sent chunk r)
 *     s = 1         a0   b012 c02     a01  b1   c012    a012 b12  c2      (rank r sent chunk r-1)
 *   After N-1 steps rank r holds the full reduction of chunk (r + 1) mod N.
 *
 *   all-gather, step s: rank r sends the finished chunk (r + 1 - s) mod N and receives the
 *   finished chunk (r - s) mod N into place.
 *     s = 0         a012 b012 c02     a01  b012 c012    a012 b12  c012    (rank r sent chunk r+1)
 *     s = 1         a012 b012 c012    a012 b012 c012    a012 b012 c012    (rank r sent chunk r)
 *   After N-1 steps every rank holds every finished chunk.
 *
 * Traffic: each phase sends N-1 of the N chunks per rank, so a rank sends 2 (N-1)/N * S bytes of an
 * S-byte tensor (exactly: 2 S minus its chunks (r+1) and (r+2) mod N), which hardly grows with
 * N — the reason the ring is bandwidth-optimal. The cost is 2 (N-1) latency steps.
 * The bytes are counted by the backend's send_async in the group's CommStats.
 *
 * All three collectives are the two phases with a different starting chunk:
 *   reduce_phase(first):  step s sends chunk (first - s), reduces into chunk (first - s - 1);
 *                         ends owning the full reduction of chunk (first + 1) mod N.
 *   gather_phase(first):  step s sends chunk (first - s), receives chunk (first - s - 1) in place;
 *                         ends with every chunk, if chunk `first` was the one this rank owned.
 *   all_reduce:      reduce_phase(r), then gather_phase(r + 1)    (owns chunk r + 1)
 *   reduce_scatter:  reduce_phase(r - 1) on a copy of the input   (owns chunk r = output)
 *   all_gather:      its input copied into chunk r, then gather_phase(r)
 *
 * Reductions are applied chunk-wise with tensor ops (add_, maximum, minimum), so every dtype
 * those ops support works. Avg is Sum followed by a division by N of the owned chunk, before it
 * is passed around (floating dtypes only: an integer average would have to round).
 * The ring runs synchronously: the collective has finished when the function returns.
 */
#include "distributed/ring.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

// The ring's messages use a tag of their own, so that they are never matched with a user's
// point-to-point messages (tag 0 by default) between the same two ranks. Within the ring, MPI's
// and NCCL's per-(source, tag) ordering keeps the steps in order.
constexpr int kRingTag = 0x5249;  // "RI"; below 32767, the smallest MPI_TAG_UB MPI allows

int mod(int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

// The N chunks of a flat tensor of M elements: the first M mod N chunks have one element more
// (see the split in the file comment). Views, not copies: the ring works in place.
class Chunks {
 public:
  Chunks(const Tensor& flat, int n) : flat_(flat), n_(n), q_(flat.numel() / n), m_(flat.numel() % n) {}
  int64_t offset(int i) const { return i * q_ + std::min<int64_t>(i, m_); }
  int64_t length(int i) const { return q_ + (i < m_ ? 1 : 0); }
  int64_t max_length() const { return q_ + (m_ > 0 ? 1 : 0); }
  Tensor operator[](int i) const { return flat_.narrow(0, offset(i), length(i)); }
  int count() const { return n_; }

 private:
  Tensor flat_;
  int n_;
  int64_t q_, m_;
};

// dst = dst (op) src, in place in the chunk view. Avg reduces as Sum; the division by N comes
// once, on the chunk a rank owns when the reduce-scatter phase ends.
void reduce_into(Tensor& dst, const Tensor& src, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: dst.add_(src); break;
    case ReduceOp::Max: dst.copy_(maximum(dst, src)); break;
    case ReduceOp::Min: dst.copy_(minimum(dst, src)); break;
  }
}

void check_op_dtype(const char* name, const Tensor& t, ReduceOp op, const ProcessGroup& group) {
  LOOM_CHECK(op != ReduceOp::Avg || t.is_floating_point(), name, ": ReduceOp::Avg needs a floating dtype, got ",
             t.dtype(), " (", group.describe(), ")");
}

void check_tensor(const char* name, const char* what, const Tensor& t, const ProcessGroup& group) {
  LOOM_CHECK(t.defined(), name, ": ", what, " is undefined (", group.describe(), ")");
  LOOM_CHECK(t.is_contiguous(), name, ": ", what, " of shape ", t.sizes(), " must be contiguous (", group.describe(),
             ")");
}

// One step of the ring: receive `incoming` from the left neighbour while `outgoing` goes to the
// right one. Every rank is a receiver and a sender at once. With MPI the receive is posted first:
// a transport that completes a large send only once the matching receive exists (rendezvous)
// would otherwise leave all N ranks in their sends. NCCL runs a group's operations in order on
// one stream, where a receive waits for its sender and a send for its receiver: if every rank
// received first, every rank would wait for its left neighbour. There, even ranks send first and
// odd ranks receive first, which breaks the cycle (a ring of N > 1 has an odd rank).
void exchange(ProcessGroup& group, const Tensor& outgoing, const Tensor& incoming) {
  const int n = group.size(), r = group.rank();
  const bool send_first = group.backend_name() == "nccl" && r % 2 == 0;
  WorkPtr send, recv;
  if (send_first) send = group.send_async(outgoing, mod(r + 1, n), kRingTag);
  recv = group.recv_async(incoming, mod(r - 1, n), kRingTag);
  if (!send_first) send = group.send_async(outgoing, mod(r + 1, n), kRingTag);
  // Waits until the transport is done reading `outgoing` (for MPI: the send buffer may be reused):
  // later steps reduce into or overwrite chunks that were sent, and a buffer must not change
  // while it is still being sent.
  send->wait();
  // Waits for the left neighbour's chunk: the caller reduces it, or the next step forwards it.
  recv->wait();
}

// Reduce-scatter phase over the chunks (in place): step s sends chunk (first - s) and reduces the
// chunk (first - s - 1) that arrives from the left. Ends with chunk (first + 1) mod N holding the
// reduction over all ranks.
void reduce_phase(ProcessGroup& group, const Chunks& chunks, int first, ReduceOp op) {
  const int n = chunks.count();
  if (n == 1) return;  // a ring of one: the chunk is already the reduction
  // One receive buffer (the largest chunk, S / N) for every step: a received chunk must not land in the data directly,
  // since it is combined with what this rank already has.
  Tensor incoming_buffer = empty({chunks.max_length()}, chunks[0].options());
  for (int s = 0; s < n - 1; ++s) {
    Tensor outgoing = chunks[mod(first - s, n)];
    Tensor target = chunks[mod(first - s - 1, n)];
    Tensor incoming = incoming_buffer.narrow(0, 0, target.numel());
    exchange(group, outgoing, incoming);
    reduce_into(target, incoming, op);
  }
}

// All-gather phase over the chunks (in place): step s sends chunk (first - s), which this rank
// finished (step 0: its own; later: the one received in the step before), and receives the
// finished chunk (first - s - 1) straight into place.
void gather_phase(ProcessGroup& group, const Chunks& chunks, int first) {
  const int n = chunks.count();
  for (int s = 0; s < n - 1; ++s) exchange(group, chunks[mod(first - s, n)], chunks[mod(first - s - 1, n)]);
}

}  // namespace

void ring_all_reduce(ProcessGroup& group, const Tensor& tensor, ReduceOp op) {
  check_tensor("ring_all_reduce", "tensor", tensor, group);
  check_op_dtype("ring_all_reduce", tensor, op, group);
  const int n = group.size(), r = group.rank();
  // Every rank holds the same M, so every rank returns here, and no rank waits on another.
  if (tensor.numel() == 0) return;
  Chunks chunks(tensor.view({-1}), n);
  reduce_phase(group, chunks, r, op);  // rank r now owns the reduced chunk r + 1
  Tensor owned = chunks[mod(r + 1, n)];
  if (op == ReduceOp::Avg) owned.div_(n);  // Avg = Sum / N, once per element, before it travels
  gather_phase(group, chunks, r + 1);
}

void ring_all_gather(ProcessGroup& group, const Tensor& input, const Tensor& output) {
  check_tensor("ring_all_gather", "input", input, group);
  check_tensor("ring_all_gather", "output", output, group);
  const int n = group.size(), r = group.rank();
  LOOM_CHECK(input.dtype() == output.dtype(), "ring_all_gather: input dtype ", input.dtype(), " != output dtype ",
             output.dtype(), " (", group.describe(), ")");
  bool shapes_ok = input.dim() >= 1 && output.dim() == input.dim() && output.size(0) == n * input.size(0);
  for (int64_t d = 1; shapes_ok && d < input.dim(); ++d) shapes_ok = output.size(d) == input.size(d);
  LOOM_CHECK(shapes_ok, "ring_all_gather: expected input [n, *] and output [", n, " * n, *], got input ",
             input.sizes(), " and output ", output.sizes(), " (", group.describe(), ")");
  if (input.numel() == 0) return;  // every rank has the same shapes, so all skip the ring together
  // Block i of the output (dim 0 concatenation) is chunk i of the flat output: all chunks have
  // the size of one input, so the split of the file comment cuts exactly at the blocks.
  Chunks chunks(output.view({-1}), n);
  chunks[r].copy_(input.view({-1}));
  gather_phase(group, chunks, r);
}

void ring_reduce_scatter(ProcessGroup& group, const Tensor& input, const Tensor& output, ReduceOp op) {
  check_tensor("ring_reduce_scatter", "input", input, group);
  check_tensor("ring_reduce_scatter", "output", output, group);
  check_op_dtype("ring_reduce_scatter", input, op, group);
  const int n = group.size(), r = group.rank();
  LOOM_CHECK(input.dtype() == output.dtype(), "ring_reduce_scatter: input dtype ", input.dtype(),
             " != output dtype ", output.dtype(), " (", group.describe(), ")");
  bool shapes_ok = output.dim() >= 1 && input.dim() == output.dim() && input.size(0) == n * output.size(0);
  for (int64_t d = 1; shapes_ok && d < output.dim(); ++d) shapes_ok = input.size(d) == output.size(d);
  LOOM_CHECK(shapes_ok, "ring_reduce_scatter: expected input [", n, " * n, *] and output [n, *], got input ",
             input.sizes(), " and output ", output.sizes(), " (", group.describe(), ")");
  if (output.numel() == 0) return;  // every rank has the same shapes, so all skip the ring together
  // The input is the caller's and stays unchanged: the partial sums are formed in a copy (S bytes
  // more; a copy of only the chunks in flight would save memory at the cost of the simple picture).
  Tensor work = input.clone();
  Chunks chunks(work.view({-1}), n);
  // Starting one chunk earlier than all_reduce makes rank r end up owning chunk r, block r.
  reduce_phase(group, chunks, r - 1, op);
  Tensor owned = chunks[r];
  if (op == ReduceOp::Avg) owned.div_(n);  // Avg = Sum / N
  output.view({-1}).copy_(owned);
}

}  // namespace loom::distributed
