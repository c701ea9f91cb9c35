/* The run directory of `train` (see run_dir.h). */
#include "tools/train/run_dir.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/train/fail.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Options that do not change what is trained: a directory holding a run that differs only in
// these is "a run of the same config".
json comparable(json config) {
  for (const char* key : {"out", "workers", "log-every", "checkpoint-every", "checkpoint-async", "threads", "trace",
                          "epochs", "collective-timeout",
                          "on-checkpoint-error", "loader-timeout"})
    config.erase(key);
  return config;
}

// Removes what Loom writes into a run directory, and nothing else.
void clear_run_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name == kConfigFile || name == kMetricsFile || name == "report.html" || name == "latest" ||
        name.rfind("step-", 0) == 0 || name.rfind(".tmp-step-", 0) == 0)
      fs::remove_all(entry.path());
  }
}
}  // namespace

void prepare_fresh_dir(const TrainOptions& o) {
  fs::path dir = o.out;
  if (fs::exists(dir) && !fs::is_directory(dir)) fail("--out " + o.out + " is a file, not a directory");
  if (!fs::exists(dir) || fs::is_empty(dir)) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      fail("--out " + o.out + ": cannot create the run directory (" + ec.message() +
           "); check the path and its permissions");
    return;
  }
  if (!o.force) {
    fs::path config = dir / kConfigFile;
    if (!fs::exists(config))
      fail("--out " + o.out +
           " is not empty and holds no train run; choose an empty directory or pass --force");
    std::ifstream in(config);
    json old = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (old.is_discarded() || comparable(old) != comparable(to_json(o)))
      fail("--out " + o.out + " holds a run with other options; use another directory, --resume " + o.out +
           " to continue it, or --force to replace it");
  }
  clear_run_files(dir);
}


fs::path pipeline_trace_path(const std::string& trace) {
  return trace + ".pipeline.json";
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) fail("cannot write " + path.string() + ": check the disk and permissions");
  }
  fs::rename(tmp, path);
}

void truncate_metrics(const fs::path& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", int64_t{0}) <= step) kept += line + "\n";
  }
  write_text_atomically(path, kept);
}

}  // namespace loom::train
