/*
 * tools/bench: the benchmark cases that Loom is measured by, each reporting one metric.
 * A case prepares its inputs once and returns a callable that runs the workload one time;
 * the harness (main.cpp) warms it up, times several samples of repeated calls, and reports
 * the median sample.
 */
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loom::bench {

struct Workload {
  std::function<void()> run;  // one execution of the workload
  double amount = 0;          // units of work per execution (FLOPs, bytes, images)
};

struct BenchCase {
  std::string name;
  std::string metric;  // "gflops", "gbytes_per_s", "images_per_s"
  std::string unit;    // printed unit: amount per second is divided by `scale`
  double scale = 1;    // e.g. 1e9 for GFLOP/s
  std::string description;
  std::function<Workload()> prepare;
};

const std::vector<BenchCase>& all_cases();

}  // namespace loom::bench
