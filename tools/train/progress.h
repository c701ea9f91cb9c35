/*
 * The progress `train` prints while it trains: the throughput and loss since the last metrics
 * line, and the progress line (redrawn in place on a terminal, plain lines otherwise).
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace loom::train {

// What one progress line shows.
struct ProgressLine {
  int64_t epoch = 0, epochs = 0, step = 0;  // epoch from 0
  double lr = 0;
  std::string unit;     // "samples/s" or "tokens/s"
  double progress = 0;  // of the epoch, in [0, 1]
  double rate = 0, loss = 0;
  double eta = 0;  // seconds left in the epoch
};

// "\repoch 1/3 [====>    ] 45% ETA 0:12 loss 1.234 1.5k samples/s lr 5.0e-02": one line
// redrawn in place.
std::string redrawn_progress_line(const ProgressLine& line);
// "epoch 1/3 step 40 ( 45%) loss 1.2345 1.5k samples/s lr 5.00e-02 0:12\n".
std::string plain_progress_line(const ProgressLine& line, double elapsed_s);

// The counters behind the lines: what happened since the last metrics line, and in the epoch.
struct Progress {
  using Clock = std::chrono::steady_clock;
  int64_t items_since = 0, steps_since = 0;  // examples (or tokens) and steps since the last line
  double loss_since = 0;                     // the sum of those steps' losses

  void restart(Clock::time_point now) {
    last_log_ = now;
    last_redraw_ = now - std::chrono::seconds(1);
  }
  void start_epoch(Clock::time_point now, int64_t first_batch) {
    epoch_start_ = now;
    first_batch_ = first_batch;
  }
  bool redraw_due(Clock::time_point now) const { return now - last_redraw_ > std::chrono::milliseconds(100); }
  void redrawn(Clock::time_point now) { last_redraw_ = now; }
  // Items per second since the last metrics line.
  double rate(Clock::time_point now) const {
    const double dt = std::chrono::duration<double>(now - last_log_).count();
    return dt > 0 ? static_cast<double>(items_since) / dt : 0.0;
  }
  // This epoch's remaining batches at the pace of its batches so far.
  double epoch_eta(Clock::time_point now, int64_t batch_index, int64_t batches_per_epoch) const;
  void logged(Clock::time_point now) {
    items_since = steps_since = 0;
    loss_since = 0;
    last_log_ = now;
  }
  // Leaves a pause (the validation) out of the next throughput.
  void pause_ended(Clock::time_point now) { last_log_ = now; }

 private:
  Clock::time_point last_log_, last_redraw_, epoch_start_;
  int64_t first_batch_ = 0;  // > 0 in an epoch resumed mid-way
};

}  // namespace loom::train
