/*
 * The recorder that the ops layer calls (ops/autograd_hook.h) to build the graph. Installed
 * together with the formula table by install_autograd(), which everything that can make a
 * tensor require grad calls first.
 */
#pragma once

#include "core/tensor.h"

namespace loom::autograd {

void install_autograd();

// A view whose base was written in place after the view's history was recorded: its history
// becomes "as_strided of the base as it is now" (torch regenerates views' grad_fn likewise).
void refresh_view_history(const Tensor& view);



}  // namespace loom::autograd
