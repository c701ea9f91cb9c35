/* CPU kernels: elementwise (being written). */
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"

namespace loom::cpu {

void register_elementwise_kernels() {}

}  // namespace loom::cpu
