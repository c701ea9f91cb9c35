/*
 * tools/bench: the benchmark cases that Loom is measured by, each reporting one metric.
 * A case prepares its inputs once and returns a callable that runs the workload one time;
 * the harness (main.cpp) warms it up, times several samples of repeated calls, and reports
 * the median sample.
 */
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace loom::bench {

struct Workload {
  std::function<void()> run;  // one execution of the workload
  double amount = 0;          // units of work per execution (FLOPs, bytes, images)
};

// One reported number: a JSON line of its own.
struct Metric {
  std::string metric;  // e.g. "fwd_us_per_op"
  double value = 0;
  std::string unit;    // e.g. "us"
};

// How long to measure: `samples` timed samples of at least `min_time` seconds each.
struct TimingOptions {
  int samples = 7;
  double min_time = 0.25;
};

struct Timing {
  double seconds_per_call;  // median over samples
  int calls_per_sample;
  int samples;
};

// Warms `run` up, then times `samples` samples of repeated calls; returns the median sample.
Timing time_median(const std::function<void()>& run, const TimingOptions& options);

// A case is either a single workload (prepare: amount / seconds / scale is reported under
// `metric`) or a self-measuring case (measure: reports several metrics, each one line).
struct BenchCase {
  using Measure = std::function<std::vector<Metric>(const TimingOptions&)>;
  BenchCase() = default;
  BenchCase(std::string name, std::string metric, std::string unit, double scale, std::string description,
            std::function<Workload()> prepare)
      : name(std::move(name)),
        metric(std::move(metric)),
        unit(std::move(unit)),
        scale(scale),
        description(std::move(description)),
        prepare(std::move(prepare)) {}
  BenchCase(std::string name, std::string unit, std::string description, Measure measure)
      : name(std::move(name)), unit(std::move(unit)), description(std::move(description)), measure(std::move(measure)) {}

  std::string name;
  std::string metric;  // "gflops", "gbytes_per_s", "images_per_s"
  std::string unit;    // printed unit: amount per second is divided by `scale`
  double scale = 1;    // e.g. 1e9 for GFLOP/s
  std::string description;
  std::function<Workload()> prepare;
  Measure measure;  // instead of prepare
  std::string device = "cpu";  // `bench --device` runs the cases of one device
};

// Cases by layer (cases.cpp: ops, autograd_cases.cpp, data_cases.cpp ...).
std::vector<BenchCase> op_cases();
std::vector<BenchCase> autograd_cases();
std::vector<BenchCase> data_cases();
std::vector<BenchCase> nn_cases();
std::vector<BenchCase> quant_cases();    // quant_cases.cpp: INT8 inference
std::vector<BenchCase> distill_cases();  // distill_cases.cpp: knowledge distillation
std::vector<BenchCase> checkpoint_cases();  // checkpoint_cases.cpp: the pause a checkpoint causes
std::vector<BenchCase> cuda_cases();        // cuda_cases.cpp: `bench --device cuda`
std::vector<BenchCase> predict_cases();     // predict_cases.cpp: batch prediction (tools/predict)

const std::vector<BenchCase>& all_cases();

}  // namespace loom::bench
