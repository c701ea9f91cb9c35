/*
 * The MPI backend's collectives against values every rank can compute by itself.
 *
 * Rank r holds v(r, i) = r + 1 + (i mod 13) (int64 adds 2^40, to see all 64 bits travel), so
 *   Sum = N (1 + k) + N (N - 1) / 2,   Max = N + k,   Min = 1 + k,   Avg = Sum / N,   k = i mod 13,
 * for N ranks. Every value and every partial sum is an integer below 256, exact in every dtype
 * including bfloat16, so the comparisons are exact whatever order MPI adds in. Sizes 0, 1, 7
 * (not divisible by the world size), 1000 and 2^20 (large enough for MPI's rendezvous and
 * pipelined algorithms).
 */
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda.h"
#include "distributed/mpi/process_group_mpi.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using distributed::ProcessGroup;
using distributed::ReduceOp;
using distributed::WorkPtr;

const std::vector<int64_t> kSizes = {0, 1, 7, 1000, int64_t{1} << 20};
const std::vector<DType> kReduceDTypes = {kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16};
constexpr double kInt64Offset = 1099511627776.0;  // 2^40

double v(int rank, int64_t i, DType dtype) {
  return rank + 1 + static_cast<double>(i % 13) + (dtype == kInt64 ? kInt64Offset : 0.0);
}

// Rank `rank`'s values v(rank, first + i) for i < n.
Tensor values_of(int rank, int64_t n, DType dtype, int64_t first = 0) {
  std::vector<double> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = v(rank, first + i, dtype);
  return test::make(x, {n}, dtype);
}

// The reduction over ranks 0..n_ranks-1 of v(r, i).
double reduced(ReduceOp op, int n_ranks, int64_t i, DType dtype) {
  const double k = static_cast<double>(i % 13), offset = dtype == kInt64 ? kInt64Offset : 0.0;
  switch (op) {
    case ReduceOp::Sum:
      return n_ranks * (1 + k + offset) + n_ranks * (n_ranks - 1) / 2.0;
    case ReduceOp::Avg:
      return 1 + k + offset + (n_ranks - 1) / 2.0;
    case ReduceOp::Max:
      return n_ranks + k + offset;
    case ReduceOp::Min:
      return 1 + k + offset;
  }
  return 0;
}

std::vector<double> expected_reduction(ReduceOp op, int n_ranks, int64_t n, DType dtype, int64_t first = 0) {
  std::vector<double> e(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) e[static_cast<size_t>(i)] = reduced(op, n_ranks, first + i, dtype);
  return e;
}

std::vector<ReduceOp> ops_for(DType dtype) {
  if (is_floating(dtype)) return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};
  return {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};
}

TEST_CASE("world group: rank, size and description") {
  auto world = test::world();
  CHECK(world->backend_name() == "mpi");
  CHECK(world->size() >= 2);
  CHECK(world->rank() >= 0);
  CHECK(world->rank() < world->size());
  REQUIRE(static_cast<int>(world->world_ranks().size()) == world->size());
  for (int i = 0; i < world->size(); ++i) CHECK(world->world_ranks()[static_cast<size_t>(i)] == i);
  const std::string d = world->describe();
  CHECK(d.find("mpi group of " + std::to_string(world->size())) == 0);
  CHECK(d.find("rank " + std::to_string(world->rank())) != std::string::npos);
  // Every rank reports its rank: the gathered list is 0..N-1.
  Tensor mine = full({1}, world->rank(), kInt64);
  Tensor all = zeros({world->size()}, kInt64);
  world->all_gather(mine, all);
  std::vector<double> expected;
  for (int r = 0; r < world->size(); ++r) expected.push_back(r);
  test::check_close(all, expected);
}

TEST_CASE("init_process_group: one MPI world per process; NCCL only when built") {
  auto world = test::world();
  CHECK(distributed::init_process_group(distributed::Backend::Mpi) == world);
  CHECK(std::dynamic_pointer_cast<distributed::ProcessGroupMpi>(world) != nullptr);
#if !LOOM_WITH_NCCL
  CHECK_THROWS_WITH_AS(distributed::init_process_group(distributed::Backend::Nccl),
                       doctest::Contains("the NCCL backend is not built"), Error);
  CHECK(distributed::init_process_group(distributed::Backend::Auto) == world);
#endif
}

TEST_CASE("all_reduce: every dtype, size and op") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  for (DType dtype : kReduceDTypes)
    for (int64_t size : kSizes)
      for (ReduceOp op : ops_for(dtype)) {
        CAPTURE(dtype);
        CAPTURE(size);
        CAPTURE(reduce_op_name(op));
        Tensor t = values_of(r, size, dtype);
        world->all_reduce(t, op);
        CHECK(t.dtype() == dtype);
        test::check_close(t, expected_reduction(op, n, size, dtype));
      }
}

TEST_CASE("all_reduce: 8-bit integers, bool and a 3-D shape") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  for (DType dtype : {kInt8, kUInt8})
    for (ReduceOp op : ops_for(dtype)) {
      CAPTURE(dtype);
      CAPTURE(reduce_op_name(op));
      Tensor t = values_of(r, 7, dtype);
      world->all_reduce(t, op);
      test::check_close(t, expected_reduction(op, n, 7, dtype));
    }
  // bool: rank r holds (i == r) at position i; Sum and Max are "any", Min is "all".
  std::vector<double> one_hot(static_cast<size_t>(n + 1), 0.0);
  one_hot[static_cast<size_t>(r)] = 1;
  std::vector<double> any(static_cast<size_t>(n + 1), 1.0);
  any[static_cast<size_t>(n)] = 0;  // no rank sets the last one
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    Tensor b = test::make(one_hot, kBool);
    world->all_reduce(b, op);
    test::check_close(b, any);
  }
  Tensor all_set = test::make(std::vector<double>(static_cast<size_t>(n + 1), 1.0), kBool);
  Tensor some_set = test::make(one_hot, kBool);
  all_set.data_ptr<bool>()[0] = r != 1;  // rank 1 clears position 0: "all" becomes false there
  world->all_reduce(all_set, ReduceOp::Min);
  world->all_reduce(some_set, ReduceOp::Min);
  std::vector<double> all_expected(static_cast<size_t>(n + 1), 1.0);
  all_expected[0] = 0;
  test::check_close(all_set, all_expected);
  test::check_close(some_set, std::vector<double>(static_cast<size_t>(n + 1), 0.0));
  // Shapes other than 1-D: all_reduce works on the storage, the shape is kept.
  Tensor m = values_of(r, 24, kFloat32).view({2, 3, 4});
  world->all_reduce(m);
  CHECK(m.sizes() == IntArrayRef({2, 3, 4}));
  test::check_close(m, expected_reduction(ReduceOp::Sum, n, 24, kFloat32));
}

TEST_CASE("broadcast: from every root") {
  auto world = test::world();
  const int r = world->rank();
  for (int root = 0; root < world->size(); ++root)
    for (int64_t size : kSizes)
      for (DType dtype : {kFloat32, kInt64, kBFloat16}) {
        CAPTURE(root);
        CAPTURE(size);
        CAPTURE(dtype);
        Tensor t = values_of(r, size, dtype);
        world->broadcast(t, root);
        test::check_close(t, test::values(values_of(root, size, dtype)));
      }
}

TEST_CASE("reduce: the root gets the reduction, the others keep their tensors") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  const int root = n - 1;
  for (DType dtype : {kFloat32, kFloat64, kInt64, kFloat16})
    for (int64_t size : {int64_t{0}, int64_t{7}, int64_t{1000}})
      for (ReduceOp op : ops_for(dtype)) {
        CAPTURE(dtype);
        CAPTURE(size);
        CAPTURE(reduce_op_name(op));
        Tensor t = values_of(r, size, dtype);
        world->reduce(t, root, op);
        if (r == root)
          test::check_close(t, expected_reduction(op, n, size, dtype));
        else
          test::check_close(t, test::values(values_of(r, size, dtype)));
      }
}

TEST_CASE("all_gather: rank s's block of the output is rank s's input") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  for (DType dtype : {kFloat32, kInt64, kBFloat16, kFloat16, kUInt8})
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
      CAPTURE(dtype);
      CAPTURE(rows);
      Tensor input = values_of(r, rows * 3, dtype).view({rows, 3});
      Tensor output = zeros({n * rows, 3}, dtype);
      world->all_gather(input, output);
      std::vector<double> expected;
      for (int s = 0; s < n; ++s)
        for (double x : test::values(values_of(s, rows * 3, dtype))) expected.push_back(x);
      test::check_close(output, expected);
    }
  // In place: the input is this rank's block of the output (torch's all_gather_into_tensor idiom).
  Tensor output = zeros({n * 5}, kFloat64);
  Tensor block = output.narrow(0, r * 5, 5);
  block.copy_(values_of(r, 5, kFloat64));
  world->all_gather(block, output);
  std::vector<double> expected;
  for (int s = 0; s < n; ++s)
    for (double x : test::values(values_of(s, 5, kFloat64))) expected.push_back(x);
  test::check_close(output, expected);
  // 1<<20 elements per rank.
  Tensor big = values_of(r, int64_t{1} << 20, kFloat32);
  Tensor gathered = empty({n * (int64_t{1} << 20)}, kFloat32);
  world->all_gather(big, gathered);
  for (int s = 0; s < n; ++s)
    test::check_close(gathered.narrow(0, s * (int64_t{1} << 20), int64_t{1} << 20),
                      test::values(values_of(s, int64_t{1} << 20, kFloat32)));
}

TEST_CASE("reduce_scatter: rank r gets the reduction of block r") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  for (DType dtype : {kFloat32, kFloat64, kInt64, kBFloat16, kFloat16})
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}})
      for (ReduceOp op : ops_for(dtype)) {
        CAPTURE(dtype);
        CAPTURE(rows);
        CAPTURE(reduce_op_name(op));
        Tensor input = values_of(r, n * rows * 2, dtype).view({n * rows, 2});
        Tensor output = zeros({rows, 2}, dtype);
        world->reduce_scatter(input, output, op);
        test::check_close(output, expected_reduction(op, n, rows * 2, dtype, /*first=*/r * rows * 2));
      }
  const int64_t big = int64_t{1} << 20;
  Tensor input = values_of(r, n * big, kFloat32);
  Tensor output = empty({big}, kFloat32);
  world->reduce_scatter(input, output, ReduceOp::Sum);
  test::check_close(output, expected_reduction(ReduceOp::Sum, n, big, kFloat32, r * big));
}

TEST_CASE("scatter and gather") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
    CAPTURE(rows);
    // scatter from root 0: rank s receives rows [s * rows, (s+1) * rows) of the root's input.
    Tensor input = r == 0 ? arange(0, n * rows * 2, 1, kFloat32).view({n * rows, 2}) : Tensor();
    Tensor output = full({rows, 2}, -1, kFloat32);
    world->scatter(input, output, /*root=*/0);
    test::check_close(output, test::values(arange(r * rows * 2, (r + 1) * rows * 2, 1, kFloat64)));

    // gather to the last rank: the root's output holds every rank's input in rank order.
    const int root = n - 1;
    Tensor mine = values_of(r, rows, kInt64);
    Tensor gathered = r == root ? zeros({n * rows}, kInt64) : Tensor();
    world->gather(mine, gathered, root);
    if (r == root) {
      std::vector<double> expected;
      for (int s = 0; s < n; ++s)
        for (double x : test::values(values_of(s, rows, kInt64))) expected.push_back(x);
      test::check_close(gathered, expected);
    }
  }
}

TEST_CASE("all_to_all: block s of rank r's input lands in block r of rank s's output") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  for (DType dtype : {kFloat32, kInt64, kBFloat16})
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
      CAPTURE(dtype);
      CAPTURE(rows);
      // input[j] = 100 r + j (mod 97 keeps bfloat16 exact): block s goes to rank s.
      auto value = [&](int rank, int64_t j) { return 100.0 * rank + static_cast<double>(j % 97); };
      std::vector<double> in(static_cast<size_t>(n * rows));
      for (int64_t j = 0; j < n * rows; ++j) in[static_cast<size_t>(j)] = value(r, j);
      Tensor input = test::make(in, {n * rows}, dtype);
      Tensor output = zeros({n * rows}, dtype);
      world->all_to_all(input, output);
      std::vector<double> expected;
      for (int s = 0; s < n; ++s)
        for (int64_t i = 0; i < rows; ++i) expected.push_back(value(s, r * rows + i));
      test::check_close(output, expected);
    }
}

TEST_CASE("send and recv: a ring of messages, tags, and the byte count") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (int64_t size : kSizes) {
    CAPTURE(size);
    world->reset_stats();
    // Everyone sends to the right and receives from the left at once: the sends must not
    // block the queue (with blocking sends of 4 MiB this would deadlock).
    Tensor out = values_of(r, size, kFloat32), in = zeros({size}, kFloat32);
    WorkPtr s = world->send_async(out, next, /*tag=*/3);
    WorkPtr q = world->recv_async(in, prev, /*tag=*/3);
    q->wait();
    s->wait();
    CHECK(s->is_completed());
    CHECK(q->is_completed());
    test::check_close(in, test::values(values_of(prev, size, kFloat32)));
    CHECK(world->stats().bytes_sent == static_cast<uint64_t>(size * 4));
    CHECK(world->stats().messages_sent == 1);
  }
  // Tags select the message: rank 0 sends tag 1 then tag 2; rank 1 receives tag 2 first.
  if (r == 0) {
    WorkPtr a = world->send_async(full({3}, 1.0, kFloat64), 1, /*tag=*/1);
    WorkPtr b = world->send_async(full({3}, 2.0, kFloat64), 1, /*tag=*/2);
    a->wait();
    b->wait();
  } else if (r == 1) {
    Tensor second = zeros({3}, kFloat64), first = zeros({3}, kFloat64);
    world->recv(second, 0, /*tag=*/2);
    world->recv(first, 0, /*tag=*/1);
    test::check_close(second, {2, 2, 2});
    test::check_close(first, {1, 1, 1});
  }
  world->barrier();  // the pairs above are done before the next test's messages
}

TEST_CASE("recv: a message of the wrong length is an error, and the group still works") {
  auto world = test::world();
  const int r = world->rank();
  if (r == 0) {
    world->send(full({3}, 1.0, kFloat32), 1, 7);
    world->send(full({5}, 1.0, kFloat32), 1, 8);
  } else if (r == 1) {
    Tensor longer = zeros({5}, kFloat32), shorter = zeros({3}, kFloat32);
    CHECK_THROWS_WITH_AS(world->recv(longer, 0, 7), doctest::Contains("the message had 3"), Error);
    CHECK_THROWS_WITH_AS(world->recv(shorter, 0, 8), doctest::Contains("recv from rank 0 (tag 8) failed"),
                         Error);
  }
  Tensor t = full({2}, 1.0, kFloat32);
  world->all_reduce(t);
  test::check_close(t, {double(world->size()), double(world->size())});
}

TEST_CASE("barrier: no rank leaves before the last one arrives") {
  auto world = test::world();
  using Clock = std::chrono::steady_clock;
  world->barrier();  // a common start
  const auto start = Clock::now();
  if (world->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  world->barrier();  // waits for rank 0, which arrives 300 ms late
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  CHECK(waited_ms >= 250);
}

TEST_CASE("async: many operations in flight, waited for in any order") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int j = 0; j < 8; ++j) {
    tensors.push_back(values_of(r, 1000 + j, kFloat32));
    works.push_back(world->all_reduce_async(tensors.back(), j % 2 ? ReduceOp::Max : ReduceOp::Sum));
  }
  Tensor gathered = zeros({n * 10}, kInt64);
  Tensor mine = values_of(r, 10, kInt64);
  works.push_back(world->all_gather_async(mine, gathered));
  Tensor ring_in = zeros({100}, kFloat64);
  works.push_back(world->recv_async(ring_in, (r + n - 1) % n, 5));
  works.push_back(world->send_async(values_of(r, 100, kFloat64), (r + 1) % n, 5));
  works.push_back(world->barrier_async());
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();  // the last first
  for (const WorkPtr& w : works) CHECK(w->is_completed());
  for (int j = 0; j < 8; ++j)
    test::check_close(tensors[static_cast<size_t>(j)],
                      expected_reduction(j % 2 ? ReduceOp::Max : ReduceOp::Sum, n, 1000 + j, kFloat32));
  std::vector<double> expected;
  for (int s = 0; s < n; ++s)
    for (double x : test::values(values_of(s, 10, kInt64))) expected.push_back(x);
  test::check_close(gathered, expected);
  test::check_close(ring_in, test::values(values_of((r + n - 1) % n, 100, kFloat64)));
}

TEST_CASE("async: the caller computes while the communication thread all-reduces") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  Tensor big = values_of(r, int64_t{1} << 20, kFloat32);
  WorkPtr work = world->all_reduce_async(big);
  // Work on other data meanwhile (what DDP's backward does): it must not disturb the reduction.
  Tensor other = ones({256, 256}, kFloat32).matmul(ones({256, 256}, kFloat32));
  work->wait();
  CHECK(work->is_completed());
  test::check_close(other.sum(), {256.0 * 256 * 256});
  test::check_close(big, expected_reduction(ReduceOp::Sum, n, int64_t{1} << 20, kFloat32));
}

TEST_CASE("new_group: the even ranks") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  std::vector<int> evens;
  for (int i = 0; i < n; i += 2) evens.push_back(i);
  auto group = world->new_group(evens);
  if (r % 2 == 1) {
    CHECK(group == nullptr);
  } else {
    REQUIRE(group != nullptr);
    const int m = static_cast<int>(evens.size());
    CHECK(group->size() == m);
    CHECK(group->rank() == r / 2);
    CHECK(group->world_ranks() == evens);
    CHECK(group->timeout() == world->timeout());
    Tensor t = full({7}, r, kFloat64);
    group->all_reduce(t);  // 0 + 2 + 4 + ...
    test::check_close(t, std::vector<double>(7, m * (m - 1.0)));
    Tensor b = full({2}, r, kInt64);
    group->broadcast(b, m - 1);  // group rank m-1 = world rank 2(m-1)
    test::check_close(b, {2.0 * (m - 1), 2.0 * (m - 1)});
  }
  world->barrier();  // the odd ranks wait for the even ones to finish with their group
}

TEST_CASE("new_group: members in reverse order, and a rank outside the group") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  auto group = world->new_group({1, 0});
  if (r >= 2) {
    CHECK(group == nullptr);
  } else {
    REQUIRE(group != nullptr);
    CHECK(group->size() == 2);
    CHECK(group->rank() == 1 - r);  // world rank 1 is member 0
    CHECK(group->world_ranks() == std::vector<int>{1, 0});
    CHECK(group->describe().find("mpi group of 2 (world ranks 1,0)") == 0);
    Tensor t = full({3}, 10.0 + r, kFloat32);
    group->broadcast(t, /*root=*/0);  // member 0 = world rank 1
    test::check_close(t, {11, 11, 11});
    // Point-to-point in group ranks: member 0 (world 1) sends to member 1 (world 0).
    Tensor msg = full({4}, 5.0 + r, kFloat32);
    if (group->rank() == 0)
      group->send(msg, 1);
    else
      group->recv(msg, 0);
    test::check_close(msg, std::vector<double>(4, 6.0));
    // A group of a group: the sub-group's own rank numbering is used.
    auto single = group->new_group({1});
    if (group->rank() == 1) {
      REQUIRE(single != nullptr);
      CHECK(single->size() == 1);
      CHECK(single->world_ranks() == std::vector<int>{0});
      Tensor x = full({2}, 3.0, kFloat32);
      single->all_reduce(x);
      test::check_close(x, {3, 3});
    } else {
      CHECK(single == nullptr);
    }
  }
  // The world still works, and groups made and dropped in a loop free their communicators.
  for (int i = 0; i < 20; ++i) {
    auto g = world->new_group({0, n - 1});
    if (g) g->barrier();
  }
  Tensor t = full({1}, 1.0, kFloat32);
  world->all_reduce(t);
  test::check_close(t, {double(n)});
}

TEST_CASE("errors: bad arguments throw at once, name the operation, and leave the group usable") {
  auto world = test::world();
  const int n = world->size(), r = world->rank();
  Tensor good = zeros({4}, kFloat32);
  CHECK_THROWS_WITH_AS(world->all_reduce(Tensor()), doctest::Contains("all_reduce: the tensor is undefined"),
                       Error);
  CHECK_THROWS_WITH_AS(world->all_reduce(zeros({3, 4}).t()), doctest::Contains("is not contiguous"), Error);
  CHECK_THROWS_WITH_AS(world->all_reduce(zeros({3}, kInt32), ReduceOp::Avg),
                       doctest::Contains("Avg needs a floating dtype"), Error);
  CHECK_THROWS_WITH_AS(world->broadcast(good, n),
                       doctest::Contains(("root " + std::to_string(n) + " is not a rank").c_str()), Error);
  CHECK_THROWS_WITH_AS(world->reduce(good, -1), doctest::Contains("reduce: root -1"), Error);
  CHECK_THROWS_WITH_AS(world->all_gather(good, zeros({4 * n}, kFloat64)),
                       doctest::Contains("input is float32 but output is float64"), Error);
  CHECK_THROWS_WITH_AS(world->all_gather(good, zeros({4 * n + 1})),
                       doctest::Contains("all_gather: output must be"), Error);
  CHECK_THROWS_WITH_AS(world->reduce_scatter(zeros({4 * n, 2}), zeros({4, 3})),
                       doctest::Contains("reduce_scatter: input must be"), Error);
  CHECK_THROWS_WITH_AS(world->all_to_all(zeros({n + 1}), zeros({n + 1})),
                       doctest::Contains("all_to_all: input"), Error);
  // The input of scatter matters on the root only, so only the root can see that it is wrong
  // (the other ranks do not call it: they would wait for the root's scatter).
  if (r == 0)
    CHECK_THROWS_WITH_AS(world->scatter(zeros({n}), zeros({2}), 0),
                         doctest::Contains("scatter: input must be"), Error);
  CHECK_THROWS_WITH_AS(world->send(good, r), doctest::Contains("cannot send to itself"), Error);
  CHECK_THROWS_WITH_AS(world->recv(good, r), doctest::Contains("cannot receive from itself"), Error);
  CHECK_THROWS_WITH_AS(world->send(good, (r + 1) % n, -1), doctest::Contains("tag -1"), Error);
  CHECK_THROWS_WITH_AS(world->new_group({0, 0}), doctest::Contains("appears twice"), Error);
  CHECK_THROWS_WITH_AS(world->new_group({n}), doctest::Contains("is not a rank"), Error);
  // CUDA tensors belong to the nccl backend (checked where a GPU exists).
  if (cuda::is_available())
    CHECK_THROWS_WITH_AS(world->all_reduce(ones({3}).to(Device::cuda(0))),
                         doctest::Contains("works on CPU tensors"), Error);
  // Messages name the group and the rank.
  CHECK_THROWS_WITH_AS(world->all_reduce(Tensor()), doctest::Contains(world->describe().c_str()), Error);
  // Nothing was queued by the calls above: the next collectives match on every rank.
  Tensor t = full({5}, 1.0 + r, kFloat32);
  world->all_reduce(t);
  test::check_close(t, std::vector<double>(5, n * (n + 1) / 2.0));
}

}  // namespace
}  // namespace loom
