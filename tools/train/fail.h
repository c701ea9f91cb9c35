/* train's one way to reject input or a state it cannot go on from: a loom::Error with `message`. */
#pragma once

#include <string>

#include "core/error.h"

namespace loom::train {

[[noreturn]] inline void fail(const std::string& message) {
  throw Error(message);
}

}  // namespace loom::train
