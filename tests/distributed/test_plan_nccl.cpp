/*
 * The communication counters (process_group.h's algorithm model, what the planner's bytes are
 * checked against) on the NCCL process group: the same operations count the same bytes as on
 * MPI (test_plan.cpp checks those), because both backends are counted by ProcessGroup itself.
 * Runs in the emulated-CUDA build (every rank an emulated GPU); skipped, visibly, without NCCL
 * or a GPU per rank. A file of its own: a skipped case marks the whole CTest test skipped.
 */
#include <doctest/doctest.h>

#include <iostream>
#include <memory>

#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

namespace loom::test {

#if LOOM_WITH_NCCL
TEST_CASE("plan: NCCL counts every operation by the algorithm model, as MPI does") {
  std::shared_ptr<distributed::ProcessGroup> nccl = nccl_world_or_skip();
  if (!nccl) return;
  auto mpi = world();
  if (nccl->size() != mpi->size()) {  // a real machine with fewer GPUs than ranks: rank 0 alone
    std::cout << "[skipped: fewer GPUs than ranks]" << std::endl;
    return;
  }
  const auto n = static_cast<int64_t>(nccl->size());
  const Device gpu = nccl->device();
  for (auto group : {nccl, mpi}) {
    const Device where = group == nccl ? gpu : Device(kCPU);
    group->reset_stats();
    group->all_reduce(ones({10}).to(where));
    group->all_gather(ones({2, 3}).to(where), zeros({2 * n, 3}).to(where));
    group->reduce_scatter(ones({n, 5}).to(where), zeros({1, 5}).to(where));
    group->broadcast(ones({4}).to(where), 0);
    // A ring of sends (n is even): an NCCL send waits for its peer's receive, so even ranks send
    // first and odd ranks receive first.
    const int r = group->rank(), peer = (r + 1) % group->size(), from = (r + group->size() - 1) % group->size();
    Tensor in = zeros({7}).to(where), out = ones({7}).to(where);
    if (r % 2 == 0) {
      group->send(out, peer);
      group->recv(in, from);
    } else {
      group->recv(in, from);
      group->send(out, peer);
    }
  }
  const distributed::CommStats a = nccl->stats(), b = mpi->stats();
  CHECK(a.all_reduce.modeled_bytes_sent == static_cast<uint64_t>(2 * (n - 1) * 40 / n));
  CHECK(a.all_reduce.modeled_bytes_sent == b.all_reduce.modeled_bytes_sent);
  CHECK(a.all_gather.modeled_bytes_sent == static_cast<uint64_t>((n - 1) * 24));
  CHECK(a.reduce_scatter.modeled_bytes_sent == static_cast<uint64_t>((n - 1) * 20));
  CHECK(a.broadcast.modeled_bytes_sent == b.broadcast.modeled_bytes_sent);
  CHECK(a.send.modeled_bytes_sent == 28);
  CHECK(a.recv.calls == 1);
  CHECK(a.modeled_bytes_sent() == b.modeled_bytes_sent());
}
#else
TEST_CASE("plan: NCCL counters need NCCL") { std::cout << "[skipped: no NCCL]" << std::endl; }
#endif

}  // namespace loom::test
