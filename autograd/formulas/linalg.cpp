/* Gradients of the linalg ops. */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_linalg_formulas() {}

}  // namespace loom::autograd
