/*
 * tools/bench_mpi: runs the distributed benchmark cases on every rank of an MPI job; rank 0 prints
 * one line per metric, human-readable or JSON (--json: {"case", "device", "ranks", "threads",
 * "metric", "value", "unit", ...the case's extra fields}).
 *
 *   mpirun -np 2 build/tools/bench_mpi --json
 *   mpirun -np 2 build/tools/bench_mpi --case allreduce --threads 1
 *
 * All ranks run the same cases in the same order (a case is a collective program). A loom::Error
 * on one rank ends the whole job (abort_job): its peers may be waiting inside a collective.
 */
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ops/ops.h"
#include "tools/bench_mpi/bench_mpi.h"

int main(int argc, char** argv) {
  CLI::App app{"Loom distributed benchmarks (run under mpirun): one line per metric, from rank 0."};
  bool list = false, json = false;
  std::vector<std::string> selected;
  int threads = 1;
  int samples = 7;
  double min_time = 0.25;
  app.add_flag("--list", list, "List the cases and exit");
  app.add_option("--case", selected, "Run only these cases (repeatable; default: all)");
  app.add_option("--threads", threads, "Intra-op threads per rank")->capture_default_str();
  app.add_flag("--json", json, "Print one JSON object per line");
  app.add_option("--samples", samples, "Timed samples per measurement; the median is reported")->capture_default_str();
  app.add_option("--min-time", min_time, "Seconds per sample (at least)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto& cases = loom::bench_mpi::all_cases();
  if (list) {
    for (const auto& c : cases) std::printf("%-24s %s\n", c.name.c_str(), c.description.c_str());
    return 0;
  }
  try {
    for (const auto& name : selected) {
      bool known = std::any_of(cases.begin(), cases.end(), [&](const auto& c) { return c.name == name; });
      LOOM_CHECK(known, "bench_mpi: unknown case '", name, "' (see --list)");
    }
    LOOM_CHECK(samples >= 1 && min_time > 0 && threads >= 1,
               "bench_mpi: --samples and --threads must be >= 1 and --min-time > 0");
    auto world = loom::distributed::init_process_group(loom::distributed::Backend::Mpi);
    loom::set_num_threads(threads);
    loom::manual_seed(0);
    for (const auto& c : cases) {
      if (!selected.empty() && std::find(selected.begin(), selected.end(), c.name) == selected.end()) continue;
      std::vector<loom::bench_mpi::Metric> metrics = c.measure(*world, {samples, min_time});
      if (world->rank() != 0) continue;
      for (const auto& m : metrics) {
        if (json) {
          nlohmann::ordered_json j = {{"case", c.name},     {"device", "cpu"}, {"ranks", world->size()},
                                      {"threads", threads}, {"metric", m.metric}, {"value", m.value},
                                      {"unit", m.unit}};
          j.update(m.extra);
          std::cout << j.dump() << std::endl;
        } else {
          std::string extra;
          for (const auto& [key, value] : m.extra.items()) {
            char number[32];
            if (value.is_number_float()) std::snprintf(number, sizeof number, "%.4g", value.get<double>());
            extra += " " + key + "=" +
                     (value.is_string() ? value.get<std::string>() : value.is_number_float() ? number : value.dump());
          }
          std::printf("%-16s %10.3f %-6s %s%s (%d ranks x %d threads)\n", c.name.c_str(), m.value, m.unit.c_str(),
                      m.metric.c_str(), extra.c_str(), world->size(), threads);
          std::fflush(stdout);
        }
      }
    }
  } catch (const loom::Error& e) {
    loom::distributed::abort_job(std::string("bench_mpi: ") + e.what());
  }
  return 0;
}
