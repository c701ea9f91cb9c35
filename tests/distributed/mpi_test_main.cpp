/*
 * The main of the multi-process test suites: initialises MPI, runs doctest on every rank, then
 * fails on every rank if any rank failed.
 *
 * Output: rank 0 prints doctest's normal report. The other ranks capture theirs and print it
 * only when they had failures, each line prefixed with "[rank r] ", so that a failure seen by
 * one rank only is neither lost nor printed N times.
 */
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

#include "core/cuda.h"
#include "distributed/process_group.h"
#include "ops/ops.h"
#if LOOM_WITH_NCCL
#include "distributed/nccl/process_group_nccl.h"
#endif
#ifndef LOOM_NCCL_EMULATED
#define LOOM_NCCL_EMULATED 0
#endif
#include "tests/distributed/mpi_test_util.h"

namespace loom::test {
namespace {
std::shared_ptr<distributed::ProcessGroup> g_world;
}  // namespace

std::shared_ptr<distributed::ProcessGroup> world() {
  LOOM_CHECK(g_world != nullptr, "loom::test::world(): called before mpi_test_main initialised MPI");
  return g_world;
}

void print_skipped(const std::string& reason) {
  if (world()->rank() == 0) std::cout << "[skipped: " << reason << "]" << std::endl;
}

namespace {

struct NcclGroups {
  std::shared_ptr<distributed::ProcessGroup> bootstrap, nccl;
};

#if LOOM_WITH_NCCL
NcclGroups make_nccl_groups() {
  distributed::ProcessGroup& mpi = *world();
  const int gpus = cuda::device_count();
  // Every rank must take part in new_group, whatever its GPU count: decide collectively.
  Tensor min_gpus = full({1}, gpus, TensorOptions(DType::Int64));
  mpi.all_reduce(min_gpus, distributed::ReduceOp::Min);
  const int64_t fewest = min_gpus.item<int64_t>();
  const bool everyone = fewest >= mpi.size() || (LOOM_NCCL_EMULATED && fewest > 0);
  std::vector<int> members = {0};
  if (everyone) {
    members.resize(static_cast<size_t>(mpi.size()));
    for (int r = 0; r < mpi.size(); ++r) members[static_cast<size_t>(r)] = r;
  } else if (mpi.rank() == 0 && gpus > 0) {
    std::cout << "nccl: " << gpus << " GPU(s) for " << mpi.size()
              << " ranks: testing an NCCL group of world size 1" << std::endl;
  }
  std::shared_ptr<distributed::ProcessGroup> part = mpi.new_group(members);
  if (!part || gpus == 0) return {};
  return {part, distributed::make_nccl_group(*part)};
}
#endif

const NcclGroups& nccl_groups() {
#if LOOM_WITH_NCCL
  static const NcclGroups groups = make_nccl_groups();
#else
  static const NcclGroups groups;
#endif
  return groups;
}

}  // namespace

std::shared_ptr<distributed::ProcessGroup> nccl_world_or_skip() {
#if LOOM_WITH_NCCL
  const auto& group = nccl_groups().nccl;
  if (!group) std::cout << "[skipped: no GPU] rank " << world()->rank() << std::endl;
  return group;
#else
  print_skipped("NCCL backend not built");
  return nullptr;
#endif
}

std::vector<int64_t> gather_counts(distributed::ProcessGroup& group, int64_t value) {
  Tensor slots = zeros({group.size()}, kInt64);
  slots.data_ptr<int64_t>()[group.rank()] = value;
  // Every rank needs every other rank's value: the sum of one-hot slots.
  group.all_reduce(slots);
  return slots.to_vector<int64_t>();
}

double max_rel_diff(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected, double atol) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    std::vector<float> av = actual[i].to(kCPU).to_vector<float>(),
                       ev = expected[i].to(kCPU).to_vector<float>();
    REQUIRE(av.size() == ev.size());
    for (size_t k = 0; k < av.size(); ++k)
      worst = std::max(worst, std::abs(double(av[k]) - ev[k]) / (atol + std::abs(double(ev[k]))));
  }
  return worst;
}

double max_rel_diff(nn::Module& actual, nn::Module& expected, double atol) {
  return max_rel_diff(actual.parameters(), expected.parameters(), atol);
}

std::shared_ptr<distributed::ProcessGroup> nccl_bootstrap_group() {
  return nccl_groups().nccl ? nccl_groups().bootstrap : nullptr;
}

}  // namespace loom::test

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::distributed;
  std::shared_ptr<ProcessGroup> world;
  try {
    world = init_process_group(Backend::Mpi);
  } catch (const std::exception& e) {
    std::cerr << "mpi_test_main: " << e.what() << std::endl;
    return 1;
  }
  world->set_timeout(test::kTestTimeout);
  test::g_world = world;
  const int rank = world->rank();

  doctest::Context context;
  context.applyCommandLine(argc, argv);
  std::ostringstream captured;
  if (rank != 0) {
    context.setCout(&captured);
    context.setOption("no-colors", true);  // the captured text is printed with a prefix, maybe to a file
  }
  const int result = context.run();
  if (context.shouldExit()) return result;  // --help, --list-test-cases: the same on every rank

  if (rank != 0 && result != 0) {
    std::istringstream lines(captured.str());
    std::ostringstream prefixed;
    for (std::string line; std::getline(lines, line);) prefixed << "[rank " << rank << "] " << line << '\n';
    std::cout << prefixed.str() << std::flush;
  }

  // How many ranks failed. Waits for every rank to finish its tests; a test may have changed
  // the world's timeout, so it is set again.
  world->set_timeout(test::kTestTimeout);
  Tensor failed = full({1}, result != 0 ? 1 : 0, kInt32);
  try {
    world->all_reduce(failed);
  } catch (const std::exception& e) {
    // A rank died or is stuck in an earlier collective: no agreement is possible.
    abort_job(std::string("mpi_test_main: the final failure count did not complete: ") + e.what());
  }
  const int failed_ranks = failed.item<int>();
  if (rank == 0 && failed_ranks > 0)
    std::cout << "mpi_test_main: " << failed_ranks << " of " << world->size() << " ranks had failing tests"
              << std::endl;
  test::g_world.reset();
  return failed_ranks > 0 ? 1 : 0;
}
