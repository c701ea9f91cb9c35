/* The progress `train` prints while it trains (see progress.h). */
#include "tools/train/progress.h"

#include <cstdio>

#include "tools/common/format.h"

namespace loom::train {

std::string redrawn_progress_line(const ProgressLine& l) {
  // Where the epoch is, how long it has left, how it goes.
  char line[256];
  std::snprintf(line, sizeof line, "\repoch %lld/%lld %s %3.0f%% ETA %s loss %.3f %s %s lr %.1e\033[K",
                static_cast<long long>(l.epoch + 1), static_cast<long long>(l.epochs),
                tools::progress_bar(l.progress).c_str(), 100 * l.progress,
                tools::format_duration(l.eta).c_str(), l.loss, tools::format_rate(l.rate).c_str(),
                l.unit.c_str(), l.lr);
  return line;
}

std::string plain_progress_line(const ProgressLine& l, double elapsed_s) {
  char line[256];
  std::snprintf(line, sizeof line, "epoch %lld/%lld step %lld (%3.0f%%) loss %.4f %s %s lr %.2e %s\n",
                static_cast<long long>(l.epoch + 1), static_cast<long long>(l.epochs),
                static_cast<long long>(l.step), 100 * l.progress, l.loss, tools::format_rate(l.rate).c_str(),
                l.unit.c_str(), l.lr, tools::format_duration(elapsed_s).c_str());
  return line;
}

double Progress::epoch_eta(Clock::time_point now, int64_t batch_index, int64_t batches_per_epoch) const {
  const double epoch_s = std::chrono::duration<double>(now - epoch_start_).count();
  const double done = static_cast<double>(batch_index + 1 - first_batch_);
  return epoch_s / done * static_cast<double>(batches_per_epoch - batch_index - 1);
}

}  // namespace loom::train
