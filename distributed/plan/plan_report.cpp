/* The planner's text output (see plan_report.h). */
#include "distributed/plan/plan_report.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace loom::distributed::plan {

std::string format_size(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 5) bytes /= 1024, ++unit;
  char buffer[32];
  if (unit == 0)
    std::snprintf(buffer, sizeof buffer, "%.0f B", bytes);
  else
    std::snprintf(buffer, sizeof buffer, std::fabs(bytes) < 10 ? "%.2f %s" : std::fabs(bytes) < 100 ? "%.1f %s" : "%.0f %s",
                  bytes, kUnits[unit]);
  return buffer;
}

double parse_size(const std::string& text) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    LOOM_FAIL("plan: cannot read a memory size from '", text, "'; write it as 80GB, 80GiB or 512MB");
  }
  std::string unit = text.substr(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"B", 1},           {"KB", 1e3},         {"MB", 1e6},
      {"GB", 1e9},      {"TB", 1e12},       {"KIB", 1024.0},     {"MIB", 1048576.0},
      {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name && value > 0) return value * scale;
  LOOM_FAIL("plan: cannot read a memory size from '", text, "'; write it as 80GB, 80GiB or 512MB");
}

std::string format_prediction(const ModelSpec& model, const Prediction& prediction) {
  const Layout& l = prediction.layout;
  std::ostringstream os;
  char line[512];
  os << "model: " << model.description << " (" << model.params() << " parameters)\n";
  os << "layout: " << l.describe() << ", batch " << l.batch << " (" << l.batch / (l.dp * l.microbatches)
     << " per micro-batch), " << l.gpus() << " GPUs\n";
  if (l.pp > 1) {
    std::snprintf(line, sizeof line, "pipeline: %s, bubble %.1f%% of the step, %lld micro-batches in flight on stage 0\n",
                  l.schedule == PipelineKind::GPipe ? "GPipe" : l.schedule == PipelineKind::ZeroBubbleH1 ? "ZB-H1" : "1F1B", 100 * prediction.bubble,
                  static_cast<long long>(prediction.peak_live_microbatches));
    os << line;
  }
  os << "per rank, by pipeline stage (memory at the peak of a step; bytes sent per step):\n";
  std::snprintf(line, sizeof line, "%-6s %-8s %12s %10s %10s %10s %10s %10s %10s | %10s %10s %10s %10s\n", "stage",
                "layers", "params", "weights", "grads", "optim", "activ", "buffers", "total", "dp comm", "tp comm",
                "pp comm", "sent");
  os << line;
  for (size_t s = 0; s < prediction.stages.size(); ++s) {
    const StagePrediction& st = prediction.stages[s];
    const MemoryBreakdown& m = st.memory;
    const CommBreakdown& c = st.comm;
    const std::string layers = std::to_string(st.first_unit) + "-" + std::to_string(st.end_unit - 1);
    std::snprintf(line, sizeof line, "%-6zu %-8s %12lld %10s %10s %10s %10s %10s %10s | %10s %10s %10s %10s\n", s,
                  layers.c_str(), static_cast<long long>(st.params), format_size(m.parameters).c_str(),
                  format_size(m.gradients).c_str(), format_size(m.optimizer_state).c_str(),
                  format_size(m.activations).c_str(), format_size(m.buffers).c_str(), format_size(m.total()).c_str(),
                  format_size(c.data_parallel).c_str(), format_size(c.tensor_parallel).c_str(),
                  format_size(c.pipeline).c_str(), format_size(c.total()).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "estimated step: %.3g s (compute / (1 - bubble) + traffic / bandwidth)\n",
                prediction.step_seconds);
  os << line;
  return os.str();
}

std::string format_ranking(const ModelSpec& model, const std::vector<Prediction>& ranked, int64_t gpus,
                           double memory_bytes, size_t top) {
  std::ostringstream os;
  os << "model: " << model.description << " (" << model.params() << " parameters)\n";
  os << ranked.size() << " layouts of " << gpus << " GPUs fit " << format_size(memory_bytes) << " per GPU";
  if (ranked.empty()) return os.str() + "\n";
  os << "; fastest first:\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-4s %-46s %10s %10s %8s %10s\n", "rank", "layout", "memory", "sent", "bubble",
                "step (s)");
  os << line;
  for (size_t i = 0; i < ranked.size() && i < top; ++i) {
    const Prediction& p = ranked[i];
    double sent = 0;
    for (const StagePrediction& st : p.stages) sent = std::max(sent, st.comm.total());
    std::snprintf(line, sizeof line, "%-4zu %-46s %10s %10s %7.1f%% %10.3g\n", i + 1, p.layout.describe().c_str(),
                  format_size(p.worst_stage().memory.total()).c_str(), format_size(sent).c_str(), 100 * p.bubble,
                  p.step_seconds);
    os << line;
  }
  return os.str();
}

}  // namespace loom::distributed::plan
