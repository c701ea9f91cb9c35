/* Gradients of the nn ops. */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_nn_formulas() {}

}  // namespace loom::autograd
