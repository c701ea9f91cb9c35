/* Gradients of the views ops. */
#include "autograd/formulas/formulas.h"

namespace loom::autograd {

void register_view_formulas() {}

}  // namespace loom::autograd
