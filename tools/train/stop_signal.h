/*
 * A polite stop for a training run: SIGTERM (what a cluster scheduler sends before it kills a job
 * at the end of its time slot) and SIGINT (Ctrl-C) no longer end `train` mid-step. The handler
 * only records the signal; the training loop looks at requested() at every optimizer-step
 * boundary, saves a checkpoint there and returns, so `train --resume RUN_DIR` continues exactly
 * where it stopped and nothing computed since the last checkpoint is lost.
 *
 * A second signal of the same kind while the first is still pending restores the default
 * action and re-raises it: a user who presses Ctrl-C twice gets the immediate exit they expect.
 *
 * Under mpirun, every rank must see the request: send the signal to the ranks (a scheduler
 * signals every task), or to mpirun itself, which forwards SIGTERM and SIGINT to the ranks.
 * The ranks agree on stopping with one all-reduce per step (trainer.cpp), so a signal that
 * reached only some of them still stops all of them at the same step.
 */
#pragma once

namespace loom::train {

class StopSignals {
 public:
  // Installs the SIGTERM and SIGINT handlers (the previous ones are restored by the destructor).
  // One instance at a time; a second throws loom::Error.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // True once SIGTERM or SIGINT arrived (async-signal-safe flag, read without locking).
  bool requested() const;
  // The signal that asked to stop (SIGTERM or SIGINT), 0 if none; and its name ("SIGTERM").
  int signal() const;
  const char* signal_name() const;
};

}  // namespace loom::train
