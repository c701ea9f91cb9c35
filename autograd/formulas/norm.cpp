/* Gradients of the norm ops. */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_norm_formulas() {}

}  // namespace loom::autograd
