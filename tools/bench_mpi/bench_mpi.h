/*
 * tools/bench_mpi: the benchmark cases of the distributed layer. They run on every rank of an
 * MPI job (`mpirun -np 2 build/tools/bench_mpi --json`), so a case is a collective program:
 * every rank runs the same cases in the same order, and rank 0 prints what they measured.
 *
 * Adding a case file: declare its `*_cases()` function below, list it in registry.cpp; the
 * sources of this folder are globbed by tools/CMakeLists.txt.
 */
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "distributed/process_group.h"
#include "tools/bench/bench.h"  // TimingOptions

namespace loom::bench_mpi {

using bench::TimingOptions;

// One reported number: one line (or JSON object) of its own; `extra` adds fields, in the order
// given, to the JSON object and to the human-readable line (e.g. {"algorithm": "ring"}).
struct Metric {
  std::string metric;  // e.g. "busbw"
  double value = 0;
  std::string unit;    // e.g. "GB/s"
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

struct DistributedCase {
  using Measure = std::function<std::vector<Metric>(distributed::ProcessGroup& world, const TimingOptions&)>;
  std::string name;
  std::string description;
  // Runs on every rank, collectively; the metrics of rank 0 are the ones printed.
  Measure measure;
};

// The time of one call of a collective workload, as the slowest rank saw it: warm-up, then
// `options.samples` samples, each started by a barrier and lasting at least `options.min_time`
// (the same number of calls on every rank); each sample's time is the maximum over the ranks,
// and the median sample is returned (seconds per call). Collective: every rank calls it.
double time_collective(distributed::ProcessGroup& world, const std::function<void()>& run,
                       const TimingOptions& options);

// Cases by file.
std::vector<DistributedCase> collective_cases();  // collective_cases.cpp: allreduce
std::vector<DistributedCase> ddp_cases();         // ddp_cases.cpp: ddp_mlp_train
std::vector<DistributedCase> pipeline_cases();    // pipeline_cases.cpp: pipeline_bubble
std::vector<DistributedCase> fsdp_cases();        // fsdp_cases.cpp: fsdp_prefetch

const std::vector<DistributedCase>& all_cases();

}  // namespace loom::bench_mpi
