/*
 * report.html for a training run: one self-contained page (inline CSS and SVG, no JavaScript,
 * nothing fetched from the network) that a user opens after `train` finishes, or mails to a
 * colleague. It shows the configuration and the curves that answer "did it learn, and how
 * fast": training loss (raw and smoothed) vs step, validation loss and accuracy vs epoch,
 * throughput vs step, learning rate vs step.
 *
 * Inputs (written by the trainer, and by tools/quantize):
 *   RUN_DIR/config.json        one JSON object: the resolved options
 *   RUN_DIR/metrics.jsonl      one JSON object per line, "kind" = "train" or "val"
 *   RUN_DIR/quantization.json  optional: float vs INT8 accuracy, size, latency, per-layer scales
 * The charts are hand-written SVG with "nice" axis ticks (steps of 1, 2 or 5 times a power of
 * ten), so this file has no dependency beyond nlohmann::json.
 */
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace loom::train {

// Written by tools/quantize into the run directory of the model it quantized: the results table
// and the per-layer scales, which write_report adds as a "Quantization" section.
inline constexpr const char* kQuantizationFile = "quantization.json";

// Reads RUN_DIR/config.json and RUN_DIR/metrics.jsonl (and RUN_DIR/quantization.json, when
// tools/quantize wrote one) and writes RUN_DIR/report.html
// atomically (temporary file + rename). Tolerates runs without validation lines, series of a
// single point, and non-finite values (NaN is written as null by JSON writers): those points
// are left out of the charts and the page says how many were. A truncated last line (a run
// killed mid-write) is skipped and reported on the page.
// Throws loom::Error naming the file (and the line, for metrics.jsonl) when a file is missing,
// is not valid JSON, or lacks a required field.
void write_report(const std::filesystem::path& run_dir);

// An axis range rounded out to "nice" tick values: ticks are lo, lo + step, ..., hi, with
// step = 1, 2 or 5 times a power of ten, chosen so that there are about `target` intervals.
// A degenerate range (lo == hi) is widened around the value. `min_step` keeps the step from
// going below it (1 for counts such as epochs: no tick at epoch 1.5). Exposed for the tests.
struct NiceAxis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;
};
NiceAxis nice_axis(double lo, double hi, int target = 5, double min_step = 0);

// Formats a tick value with just enough decimals for `step` ("0.25", "1e-05", "12000").
std::string format_tick(double value, double step);

// HTML-escapes & < > " ' (for text and attribute values).
std::string html_escape(const std::string& text);

}  // namespace loom::train
