/*
 * tools/bench: runs Loom's benchmark cases and prints one line per case, human-readable or
 * JSON (--json: {"case", "device", "threads", "metric", "value", "unit", ...}).
 * Each case is warmed up, then timed in `--samples` samples of at least `--min-time` seconds
 * each; the value reported is the median sample (the machine is shared and noisy).
 *
 *   bench --list
 *   bench --case matmul_f32_1024 --threads 2 --json
 */
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ops/ops.h"
#include "tools/bench/bench.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Measurement {
  double seconds_per_call;  // median over samples
  int calls_per_sample;
  int samples;
};

Measurement measure(const std::function<void()>& run, int samples, double min_time) {
  // Warm-up: caches, primitive creation, allocator, page faults.
  auto start = Clock::now();
  int calls = 0;
  do {
    run();
    ++calls;
  } while (std::chrono::duration<double>(Clock::now() - start).count() < min_time / 2);
  double per_call = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  int per_sample = std::max(1, static_cast<int>(min_time / per_call));

  std::vector<double> times;
  for (int s = 0; s < samples; ++s) {
    auto t0 = Clock::now();
    for (int i = 0; i < per_sample; ++i) run();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / per_sample);
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], per_sample, samples};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Loom benchmarks: one line (or JSON object) per case, the median of several timed samples."};
  bool list = false, json = false;
  std::vector<std::string> selected;
  int threads = loom::get_num_threads();
  int samples = 7;
  double min_time = 0.25;
  app.add_flag("--list", list, "List the cases and exit");
  app.add_option("--case", selected, "Run only these cases (repeatable; default: all)");
  app.add_option("--threads", threads, "Intra-op threads (default: number of cores)")->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object per line");
  app.add_option("--samples", samples, "Timed samples per case; the median is reported")->capture_default_str();
  app.add_option("--min-time", min_time, "Seconds per sample (at least)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    const auto& cases = loom::bench::all_cases();
    if (list) {
      for (const auto& c : cases) std::printf("%-28s %s (%s)\n", c.name.c_str(), c.description.c_str(), c.unit.c_str());
      return 0;
    }
    for (const auto& name : selected) {
      bool known = std::any_of(cases.begin(), cases.end(), [&](const auto& c) { return c.name == name; });
      LOOM_CHECK(known, "bench: unknown case '", name, "' (see --list)");
    }
    LOOM_CHECK(samples >= 1 && min_time > 0, "bench: --samples must be >= 1 and --min-time > 0");
    loom::set_num_threads(threads);
    loom::manual_seed(0);
    for (const auto& c : cases) {
      if (!selected.empty() && std::find(selected.begin(), selected.end(), c.name) == selected.end()) continue;
      loom::bench::Workload w = c.prepare();
      Measurement m = measure(w.run, samples, min_time);
      double value = w.amount / m.seconds_per_call / c.scale;
      if (json) {
        nlohmann::json j = {{"case", c.name},   {"device", "cpu"},  {"threads", threads},
                            {"metric", c.metric}, {"value", value},   {"unit", c.unit},
                            {"median_s", m.seconds_per_call}, {"samples", m.samples},
                            {"calls_per_sample", m.calls_per_sample}};
        std::cout << j.dump() << std::endl;
      } else {
        std::printf("%-28s %10.1f %-9s (median of %d samples, %.3f ms per call, %d threads)\n", c.name.c_str(),
                    value, c.unit.c_str(), m.samples, m.seconds_per_call * 1e3, threads);
        std::fflush(stdout);
      }
    }
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
