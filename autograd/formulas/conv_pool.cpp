/* Gradients of the conv_pool ops. */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_conv_pool_formulas() {}

}  // namespace loom::autograd
