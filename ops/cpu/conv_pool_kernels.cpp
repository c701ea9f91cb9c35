/* CPU kernels: conv_pool (being written). */
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"

namespace loom::cpu {

void register_conv_pool_kernels() {}

}  // namespace loom::cpu
