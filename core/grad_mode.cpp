/* Per-thread grad mode state (see grad_mode.h). New threads start with recording on. */
#include "core/grad_mode.h"

namespace loom {

thread_local bool GradMode::enabled_ = true;
thread_local bool GradMode::inference_ = false;

}  // namespace loom
