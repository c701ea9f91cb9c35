/* CPU kernels: linalg (being written). */
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"

namespace loom::cpu {

void register_linalg_kernels() {}

}  // namespace loom::cpu
