/*
 * tools/bench: runs Loom's benchmark cases and prints one line per case, human-readable or
 * JSON (--json: {"case", "device", "threads", "metric", "value", "unit", ...}).
 * Each case is warmed up, then timed in `--samples` samples of at least `--min-time` seconds
 * each; the value reported is the median sample (the machine is shared and noisy).
 *
 *   bench --list
 *   bench --case matmul_f32_1024 --threads 2 --json
 *   bench --device cuda --json        (the GPU cases; a clear error without a GPU)
 *   bench --threads-sweep 1,2,4,8,16  (every case at each thread count, one after the other)
 */
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/cuda.h"
#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"
#include "tools/bench/bench.h"

namespace {

// Runs one case at `threads` intra-op threads and prints its line(s).
void run_case(const loom::bench::BenchCase& c, int threads, const loom::bench::TimingOptions& options,
              bool json) {
  // Which vector code Loom's own loops ran (a portable build picks it at run time).
  const std::string isa = loom::cpu::vector_isa_description();
  if (c.measure) {  // a self-measuring case: one line per metric
    for (const auto& m : c.measure(options)) {
      if (json) {
        nlohmann::json j = {{"case", c.name},     {"device", c.device}, {"threads", threads},
                            {"metric", m.metric}, {"value", m.value},   {"unit", m.unit},
                            {"isa", isa}};
        std::cout << j.dump() << std::endl;
      } else {
        std::printf("%-28s %10.3f %-9s %s (%d threads)\n", c.name.c_str(), m.value, m.unit.c_str(),
                    m.metric.c_str(), threads);
        std::fflush(stdout);
      }
    }
    return;
  }
  loom::bench::Workload w = c.prepare();
  loom::bench::Timing m = loom::bench::time_median(w.run, options);
  double value = w.amount / m.seconds_per_call / c.scale;
  if (json) {
    nlohmann::json j = {{"case", c.name},
                        {"device", c.device},
                        {"threads", threads},
                        {"metric", c.metric},
                        {"value", value},
                        {"unit", c.unit},
                        {"median_s", m.seconds_per_call},
                        {"samples", m.samples},
                        {"calls_per_sample", m.calls_per_sample},
                        {"isa", isa}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf("%-28s %10.1f %-9s (median of %d samples, %.3f ms per call, %d threads)\n", c.name.c_str(),
                value, c.unit.c_str(), m.samples, m.seconds_per_call * 1e3, threads);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Loom benchmarks: one line (or JSON object) per case, the median of several timed samples."};
  bool list = false, json = false;
  std::vector<std::string> selected;
  int threads = loom::get_num_threads();
  std::vector<int> sweep;
  int samples = 7;
  double min_time = 0.25;
  std::string device = "cpu";
  app.add_flag("--list", list, "List the cases and exit");
  app.add_option("--device", device, "Run the cases of this device: cpu or cuda")->capture_default_str();
  app.add_option("--case", selected, "Run only these cases (repeatable; default: all)");
  app.add_option("--threads", threads, "Intra-op threads (default: number of cores)")->capture_default_str();
  app.add_option("--threads-sweep", sweep, "Run every case at each of these thread counts (e.g. 1,2,4,8,16)")
      ->delimiter(',')
      ->excludes("--threads");
  app.add_flag("--json", json, "Print one JSON object per line");
  app.add_option("--samples", samples, "Timed samples per case; the median is reported")->capture_default_str();
  app.add_option("--min-time", min_time, "Seconds per sample (at least)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    const auto& cases = loom::bench::all_cases();
    if (list) {
      for (const auto& c : cases)
        std::printf("%-28s %-4s %s (%s)\n", c.name.c_str(), c.device.c_str(), c.description.c_str(), c.unit.c_str());
      return 0;
    }
    for (const auto& name : selected) {
      bool known = std::any_of(cases.begin(), cases.end(), [&](const auto& c) { return c.name == name; });
      LOOM_CHECK(known, "bench: unknown case '", name, "' (see --list)");
    }
    for (int t : sweep) LOOM_CHECK(t >= 1, "bench: --threads-sweep takes thread counts >= 1, got ", t);
    LOOM_CHECK(samples >= 1 && min_time > 0, "bench: --samples must be >= 1 and --min-time > 0");
    LOOM_CHECK(device == "cpu" || device == "cuda", "bench: --device must be cpu or cuda, got '", device, "'");
    LOOM_CHECK(device != "cuda" || loom::cuda::is_available(), "bench: --device cuda needs a GPU and a Loom built with CUDA (",
               LOOM_WITH_CUDA ? "this build has the CUDA backend but no GPU is available" : "this build has no CUDA backend",
               ")");
    if (sweep.empty()) sweep = {threads};
    bool failed = false;
    loom::manual_seed(0);
    for (const auto& c : cases) {
      const bool named = std::find(selected.begin(), selected.end(), c.name) != selected.end();
      if (selected.empty() ? c.device != device : !named) continue;
      // Each case at every thread count before the next case, so that a sweep reads case by case.
      for (int t : sweep) {
        loom::set_num_threads(t);
        try {
          run_case(c, t, {samples, min_time}, json);
        } catch (const loom::Error& e) {  // the other cases still run; the exit status says one failed
          std::fprintf(stderr, "bench: case %s at %d threads failed: %s\n", c.name.c_str(), t, e.what());
          failed = true;
        }
      }
    }
    if (failed) return 1;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
