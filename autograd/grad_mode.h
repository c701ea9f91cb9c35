/*
 * Grad mode for users: NoGradGuard, InferenceMode and AutoGradMode (defined in core, because
 * the ops layer reads the mode), plus set_grad_enabled and no_grad(fn).
 */
#pragma once

#include <utility>

#include "core/grad_mode.h"

namespace loom {

inline void set_grad_enabled(bool enabled) { GradMode::set_enabled(enabled); }
inline bool is_grad_enabled() { return GradMode::is_enabled(); }

// Runs fn without recording: loom::no_grad([&] { w.sub_(w.grad() * lr); });
template <class Fn>
decltype(auto) no_grad(Fn&& fn) {
  NoGradGuard guard;
  return std::forward<Fn>(fn)();
}

}  // namespace loom
