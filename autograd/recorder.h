/*
 * The recorder that the ops layer calls (ops/autograd_hook.h) to build the graph. Installed
 * together with the formula table by install_autograd(), which everything that can make a
 * tensor require grad calls first.
 */
#pragma once

namespace loom::autograd {

void install_autograd();

}  // namespace loom::autograd
