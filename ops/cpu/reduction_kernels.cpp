/* CPU kernels: reduction (being written). */
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"

namespace loom::cpu {

void register_reduction_kernels() {}

}  // namespace loom::cpu
