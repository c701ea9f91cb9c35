/*
 * The run directory of `train` (trainer.h shows its files): preparing a fresh one, and writing
 * its text files atomically. Rank 0 alone calls these.
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tools/train/options.h"

namespace loom::train {

inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kMetricsFile = "metrics.jsonl";

// Makes --out an empty run directory: creates it, or clears the files of an earlier run of the
// same options there (all of them with --force). Throws loom::Error for a file, an unwritable
// path, or a directory holding something else.
void prepare_fresh_dir(const TrainOptions& o);
// Writes `text` to a temporary file and renames it over `path`. Throws loom::Error.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);
// Drops the metrics lines of steps after `step`: a resumed run writes them again.
void truncate_metrics(const std::filesystem::path& path, int64_t step);
// --pp's per-rank pipeline trace goes next to the --trace file (whose events are rank 0's).
std::filesystem::path pipeline_trace_path(const std::string& trace);

}  // namespace loom::train
