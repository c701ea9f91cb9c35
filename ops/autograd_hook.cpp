/* The installed autograd recorder (see autograd_hook.h). */
#include "ops/autograd_hook.h"

#include <atomic>

namespace loom {

namespace {
std::atomic<const GradRecorder*> installed{nullptr};
}

void set_grad_recorder(const GradRecorder* recorder) { installed.store(recorder, std::memory_order_release); }

const GradRecorder* grad_recorder() {
  const GradRecorder* r = installed.load(std::memory_order_acquire);
  // Unreachable without autograd: only autograd makes tensors require grad, and it installs
  // the recorder first.
  LOOM_CHECK(r != nullptr, "autograd: an op needs recording but the autograd layer is not installed");
  return r;
}

}  // namespace loom
