/*
 * The NCCL process group on CUDA tensors, checked against values every rank computes itself
 * (and read back through the CPU). Skipped, visibly, without NCCL or without a GPU.
 *
 * NCCL cannot put two ranks on one GPU. With fewer GPUs than ranks the test runs an NCCL group
 * of world size 1 on rank 0 and says so; the other ranks report themselves skipped. In the
 * emulated-CUDA build every rank has its own emulated GPU and NCCL is the stand-in over MPI
 * (distributed/nccl/emulated/nccl.h), whose own contract the last test case checks.
 */
#include <doctest/doctest.h>

#include <iostream>
#include <memory>
#include <vector>

#include "core/cuda.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

#ifndef LOOM_NCCL_EMULATED
#define LOOM_NCCL_EMULATED 0
#endif
#if LOOM_NCCL_EMULATED
#include <nccl.h>  // the stand-in's

#include <cstring>
#include <string>
#endif

namespace loom::test {
namespace {

using distributed::ProcessGroup;
using distributed::ReduceOp;

#if LOOM_WITH_NCCL
std::vector<double> values_of(const Tensor& t) { return t.to(kCPU).to(kFloat64).to_vector<double>(); }

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
#endif

}  // namespace

#if LOOM_WITH_NCCL
TEST_CASE("nccl: every collective on CUDA tensors matches the values each rank computes") {
  std::shared_ptr<ProcessGroup> group = nccl_world_or_skip();
  if (!group) return;
  const int n = group->size(), r = group->rank();

  // all_reduce: rank r holds r + 1 + i.
  std::vector<double> sum(10), expected_max(10), expected_min(10);
  for (int i = 0; i < 10; ++i) {
    sum[static_cast<size_t>(i)] = n * (n + 1) / 2.0 + n * i;
    expected_max[static_cast<size_t>(i)] = n + i;
    expected_min[static_cast<size_t>(i)] = 1 + i;
  }
  Tensor mine = arange(10).to(kFloat32) + (r + 1);
  for (auto [op, expected] : {std::pair{ReduceOp::Sum, sum}, std::pair{ReduceOp::Max, expected_max},
                              std::pair{ReduceOp::Min, expected_min}}) {
    Tensor t = on_gpu(mine);
    group->all_reduce(t, op);
    CHECK(values_of(t) == expected);
  }
  Tensor avg = on_gpu(mine.to(kFloat64));
  group->all_reduce(avg, ReduceOp::Avg);
  for (size_t i = 0; i < 10; ++i) CHECK(values_of(avg)[i] == doctest::Approx(sum[i] / n));

  // broadcast from the last rank, reduce to rank 0, async forms in flight together.
  Tensor b = on_gpu(full({5}, r, TensorOptions(DType::Int64)));
  group->broadcast(b, n - 1);
  CHECK(values_of(b) == std::vector<double>(5, n - 1));
  Tensor a1 = on_gpu(mine), a2 = on_gpu(mine * 2.0);
  auto w1 = group->all_reduce_async(a1), w2 = group->all_reduce_async(a2);
  w2->wait();
  w1->wait();
  CHECK(values_of(a2)[0] == 2 * sum[0]);
  CHECK(values_of(a1)[9] == sum[9]);

  // all_gather / reduce_scatter / all_to_all on flat [n * k] tensors.
  Tensor piece = on_gpu(full({3}, r, TensorOptions(DType::Float32)));
  Tensor gathered = on_gpu(zeros({3 * n}));
  group->all_gather(piece, gathered);
  std::vector<double> want;
  for (int q = 0; q < n; ++q) want.insert(want.end(), 3, q);
  CHECK(values_of(gathered) == want);
  Tensor scattered = on_gpu(zeros({3}));
  group->reduce_scatter(on_gpu(ones({3 * n})), scattered);
  CHECK(values_of(scattered) == std::vector<double>(3, n));
  Tensor blocks = on_gpu(arange(n).to(kFloat32) + 100.0 * r), exchanged = on_gpu(zeros({n}));
  group->all_to_all(blocks, exchanged);  // block q of rank p goes to rank q: rank r gets r + 100 p
  for (int p = 0; p < n; ++p) CHECK(values_of(exchanged)[static_cast<size_t>(p)] == r + 100.0 * p);

  // scatter / gather through the root, point-to-point around the ring, a barrier.
  Tensor root_data = on_gpu(arange(2 * n).to(kFloat32)), part = on_gpu(zeros({2}));
  group->scatter(root_data, part, 0);
  CHECK(values_of(part) == std::vector<double>{2.0 * r, 2.0 * r + 1});
  Tensor collected = on_gpu(zeros({2 * n}));
  group->gather(part, collected, 0);
  if (r == 0) CHECK(values_of(collected) == values_of(root_data));
  if (n > 1) {
    // A send on an NCCL stream waits for its peer's receive (and a receive for its peer's send),
    // so around a ring every rank receiving first would deadlock, with real NCCL as with the
    // emulated one: even ranks send first, odd ranks receive first (n is even, or 1).
    Tensor out = on_gpu(full({4}, r, TensorOptions(DType::Float32))), in = on_gpu(zeros({4}));
    if (r % 2 == 0) {
      group->send(out, (r + 1) % n);
      group->recv(in, (r + n - 1) % n);
    } else {
      group->recv(in, (r + n - 1) % n);
      group->send(out, (r + 1) % n);
    }
    CHECK(values_of(in) == std::vector<double>(4, (r + n - 1) % n));
  }
  group->barrier();

  // A sub-group of the even ranks, ranks in the order given.
  std::vector<int> evens;
  for (int q = 0; q < n; q += 2) evens.push_back(q);
  std::shared_ptr<ProcessGroup> sub = group->new_group(evens);
  CHECK((sub != nullptr) == (r % 2 == 0));
  if (sub) {
    Tensor s = on_gpu(ones({2}));
    sub->all_reduce(s);
    CHECK(values_of(s) == std::vector<double>(2, static_cast<double>(evens.size())));
  }
}

TEST_CASE("nccl: bad input names the problem") {
  std::shared_ptr<ProcessGroup> group = nccl_world_or_skip();
  if (!group) return;
  CHECK_THROWS_WITH_AS(group->all_reduce(ones({3})), doctest::Contains("takes CUDA tensors"), Error);
  CHECK_THROWS_WITH_AS(group->all_reduce(on_gpu(arange(4)), ReduceOp::Avg), doctest::Contains("floating-point"),
                       Error);
  CHECK_THROWS_WITH_AS(group->all_gather(on_gpu(ones({2})), on_gpu(ones({2 * group->size() + 1}))),
                       doctest::Contains("blocks"), Error);
}
#endif

#if LOOM_NCCL_EMULATED
// The stand-in's own contract (distributed/nccl/emulated/nccl.h), called directly.
TEST_CASE("emulated nccl: group semantics, 16-bit reductions, split, and NCCL's errors") {
  std::shared_ptr<ProcessGroup> mpi = world();
  const int n = mpi->size(), r = mpi->rank();
  ncclUniqueId id;
  if (r == 0) REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  Tensor id_bytes = zeros({static_cast<int64_t>(sizeof(id))}, TensorOptions(DType::UInt8));
  if (r == 0) std::memcpy(id_bytes.data_ptr(), &id, sizeof(id));
  mpi->broadcast(id_bytes, 0);  // every rank holds rank 0's id after it
  std::memcpy(&id, id_bytes.data_ptr(), sizeof(id));
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, n, id, r) == ncclSuccess);

  // Inside a group every rank may send before it receives: the group is issued as a whole.
  Tensor out = on_gpu(full({3}, r, TensorOptions(DType::Float32))), in = on_gpu(zeros({3}));
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclGroupStart() == ncclSuccess);  // nested: only the outermost End issues
  CHECK(ncclSend(out.data_ptr(), 3, ncclFloat32, (r + 1) % n, comm, nullptr) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  CHECK(values_of(in) == std::vector<double>(3, 0.0));  // nothing issued yet
  CHECK(ncclRecv(in.data_ptr(), 3, ncclFloat32, (r + n - 1) % n, comm, nullptr) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  CHECK(values_of(in) == std::vector<double>(3, (r + n - 1) % n));

  // float16 and bfloat16 reduce through float, rounding after each step; Avg divides the sum.
  for (auto [dtype, nccl_type] : {std::pair{DType::Float16, ncclFloat16}, std::pair{DType::BFloat16, ncclBfloat16}}) {
    Tensor t = on_gpu(full({4}, 0.5 * (r + 1), TensorOptions(dtype)));
    REQUIRE(ncclAllReduce(t.data_ptr(), t.data_ptr(), 4, nccl_type, ncclSum, comm, nullptr) == ncclSuccess);
    CHECK(values_of(t) == std::vector<double>(4, 0.25 * n * (n + 1)));
    REQUIRE(ncclAllReduce(t.data_ptr(), t.data_ptr(), 4, nccl_type, ncclAvg, comm, nullptr) == ncclSuccess);
    CHECK(values_of(t) == std::vector<double>(4, 0.25 * n * (n + 1)));
  }

  // Split: NCCL_SPLIT_NOCOLOR opts out; the key orders the new ranks (here reversed).
  ncclComm_t odd = nullptr;
  REQUIRE(ncclCommSplit(comm, r % 2 == 1 ? 0 : NCCL_SPLIT_NOCOLOR, n - r, &odd, nullptr) == ncclSuccess);
  CHECK((odd != nullptr) == (r % 2 == 1));
  if (odd) {
    int rank = -1, count = 0;
    REQUIRE(ncclCommUserRank(odd, &rank) == ncclSuccess);
    REQUIRE(ncclCommCount(odd, &count) == ncclSuccess);
    CHECK(count == n / 2);
    CHECK(rank == (n - 1 - r) / 2);
    CHECK(ncclCommDestroy(odd) == ncclSuccess);
  }

  // Errors come back from the call, with ncclGetLastError naming the argument.
  std::vector<float> host(3);
  CHECK(ncclAllReduce(host.data(), host.data(), 3, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(comm)).find("is not device memory") != std::string::npos);
  CHECK(ncclSend(out.data_ptr(), 3, ncclFloat32, n, comm, nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(comm)).find("peer " + std::to_string(n)) != std::string::npos);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  // A group with a failed call issues nothing and reports the failure again at its End.
  REQUIRE(ncclGroupStart() == ncclSuccess);
  CHECK(ncclAllReduce(out.data_ptr(), out.data_ptr(), 3, ncclFloat32, static_cast<ncclRedOp_t>(9), comm, nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);
  CHECK(values_of(out) == std::vector<double>(3, r));
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}
#endif

#if !LOOM_WITH_NCCL
TEST_CASE("nccl: not built") {
  print_skipped("NCCL backend not built");
}
#endif

}  // namespace loom::test
