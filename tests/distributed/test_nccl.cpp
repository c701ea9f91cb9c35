/*
 * The NCCL process group on CUDA tensors, checked against values every rank computes itself
 * (and read back through the CPU). Skipped, visibly, without NCCL or without a GPU.
 *
 * NCCL cannot put two ranks on one GPU. With fewer GPUs than ranks the test runs an NCCL group
 * of world size 1 on rank 0 and says so; the other ranks report themselves skipped.
 */
#include <doctest/doctest.h>

#include <iostream>
#include <memory>
#include <vector>

#include "core/cuda.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

#if LOOM_WITH_NCCL
#include "distributed/nccl/process_group_nccl.h"
#endif

namespace loom::test {
namespace {

using distributed::ProcessGroup;
using distributed::ReduceOp;

#if LOOM_WITH_NCCL
std::vector<double> values_of(const Tensor& t) { return t.to(kCPU).to(kFloat64).to_vector<double>(); }

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

// The NCCL group this rank takes part in, or nullptr (after printing why) when it cannot.
std::shared_ptr<ProcessGroup> nccl_group_or_skip() {
  ProcessGroup& mpi = *world();
  const int gpus = cuda::device_count();
  // Every rank must take part in new_group, whatever its GPU count: decide collectively.
  Tensor min_gpus = full({1}, gpus, TensorOptions(DType::Int64));
  mpi.all_reduce(min_gpus, ReduceOp::Min);
  const int64_t fewest = min_gpus.item<int64_t>();
  if (fewest == 0 && mpi.rank() != 0) {
    std::cout << "[skipped: no GPU] rank " << mpi.rank() << std::endl;
  }
  std::shared_ptr<ProcessGroup> members;
  if (fewest >= mpi.size()) {
    members = mpi.new_group([&] {
      std::vector<int> all(static_cast<size_t>(mpi.size()));
      for (int r = 0; r < mpi.size(); ++r) all[static_cast<size_t>(r)] = r;
      return all;
    }());
  } else {
    members = mpi.new_group({0});
    if (mpi.rank() == 0 && gpus > 0) {
      std::cout << "nccl: " << gpus << " GPU(s) for " << mpi.size() << " ranks: testing an NCCL group of world size 1"
                << std::endl;
    }
  }
  if (!members || gpus == 0) {
    if (mpi.rank() == 0 || !members) std::cout << "[skipped: no GPU] rank " << mpi.rank() << std::endl;
    return nullptr;
  }
  return distributed::make_nccl_group(*members);
}
#endif

}  // namespace

#if LOOM_WITH_NCCL
TEST_CASE("nccl: every collective on CUDA tensors matches the values each rank computes") {
  std::shared_ptr<ProcessGroup> group = nccl_group_or_skip();
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
    Tensor out = on_gpu(full({4}, r, TensorOptions(DType::Float32))), in = on_gpu(zeros({4}));
    auto recv = group->recv_async(in, (r + n - 1) % n);
    group->send(out, (r + 1) % n);
    recv->wait();
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
  std::shared_ptr<ProcessGroup> group = nccl_group_or_skip();
  if (!group) return;
  CHECK_THROWS_WITH_AS(group->all_reduce(ones({3})), doctest::Contains("takes CUDA tensors"), Error);
  CHECK_THROWS_WITH_AS(group->all_reduce(on_gpu(arange(4)), ReduceOp::Avg), doctest::Contains("floating-point"),
                       Error);
  CHECK_THROWS_WITH_AS(group->all_gather(on_gpu(ones({2})), on_gpu(ones({2 * group->size() + 1}))),
                       doctest::Contains("blocks"), Error);
}
#else
TEST_CASE("nccl: not built") {
  print_skipped("NCCL backend not built");
}
#endif

}  // namespace loom::test
