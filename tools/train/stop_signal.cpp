#include "tools/train/stop_signal.h"

#include <atomic>
#include <csignal>

#include "core/error.h"

namespace loom::train {
namespace {

// Written by the handler, read by the training loop: lock-free atomics are async-signal-safe.
std::atomic<int> g_pending{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous_term, g_previous_int;

void on_stop_signal(int sig) {
  int expected = 0;
  if (g_pending.compare_exchange_strong(expected, sig)) return;
  // A second signal while the first is pending: the user wants out now.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

StopSignals::StopSignals() {
  LOOM_CHECK(!g_installed.exchange(true), "StopSignals: another instance is already installed");
  g_pending = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read() or write() of the data loader or the checkpoint writer that the signal
  // interrupts resumes instead of failing with EINTR.
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
  g_installed = false;
}

bool StopSignals::requested() const { return g_pending.load() != 0; }

int StopSignals::signal() const { return g_pending.load(); }

const char* StopSignals::signal_name() const {
  switch (g_pending.load()) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "no signal";
  }
}

}  // namespace loom::train
