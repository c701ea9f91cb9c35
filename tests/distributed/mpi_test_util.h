/*
 * What the multi-process test suites (tests/distributed/test_<topic>.cpp) share: the world
 * group, made by their main (mpi_test_main.cpp) before any test runs.
 *
 * Every TEST_CASE runs on every rank, so it must be collective: all ranks call the same
 * collectives in the same order. Prefer CHECK to REQUIRE between collectives: a REQUIRE that
 * fails on one rank leaves the test case there, and the other ranks then wait in the next
 * collective until the world's timeout (kTestTimeout) turns the hang into a failure.
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace loom::test {

// Set on the world group by the main, and again before its final check: one collective
// waiting longer than this fails instead of hanging until CTest's 180 s limit.
inline constexpr std::chrono::milliseconds kTestTimeout{60000};

// The world group of the MPI backend (all ranks of the mpirun job), shared by all tests.
std::shared_ptr<distributed::ProcessGroup> world();

// Prints "[skipped: <reason>]" on rank 0, the marker that makes CTest report the test as
// skipped (reason: letters, digits, spaces and '/'). Every rank should then skip the test.
void print_skipped(const std::string& reason);

// The NCCL group of every rank (LOOM_WITH_NCCL builds), made on first use, which is collective:
// every rank must call it in the same test case. NCCL needs one GPU per rank. Emulated GPUs
// belong to their process, so every rank has one; real ones are shared by the ranks of a
// machine: with fewer than the ranks, the group is rank 0 alone (world size 1, said on rank 0).
// nullptr, after "[skipped: no GPU]", on a rank that has no GPU or is left out.
std::shared_ptr<distributed::ProcessGroup> nccl_world_or_skip();

// The MPI group the NCCL group above was made from (the same members and ranks), after
// nccl_world_or_skip() returned one; nullptr otherwise.
std::shared_ptr<distributed::ProcessGroup> nccl_bootstrap_group();

// Every rank's `value`, on every rank of `group`: slot r holds rank r's (an all-reduce of
// one-hot slots, so a collective every rank calls at this point).
std::vector<int64_t> gather_counts(distributed::ProcessGroup& group, int64_t value);

// max |a - e| / (atol + |e|) over two lists of tensors, element by element (either may live on
// the GPU); the Module form compares their parameters.
double max_rel_diff(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected, double atol);
double max_rel_diff(nn::Module& actual, nn::Module& expected, double atol);

}  // namespace loom::test
