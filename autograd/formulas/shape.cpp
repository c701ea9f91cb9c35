/* Gradients of the shape ops. */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_shape_formulas() {}

}  // namespace loom::autograd
