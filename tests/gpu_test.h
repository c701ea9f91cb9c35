/*
 * GPU tests skip visibly when no GPU is present: LOOM_REQUIRE_GPU() prints the marker that
 * CTest's SKIP_REGULAR_EXPRESSION turns into "Skipped" (see tests/CMakeLists.txt).
 */
#pragma once

#include <iostream>

#include "core/cuda.h"

#define LOOM_REQUIRE_GPU()                                                         \
  do {                                                                             \
    if (!::loom::cuda::is_available()) {                                           \
      std::cout << "[skipped: no GPU] " << __FILE__ << ":" << __LINE__ << std::endl; \
      return;                                                                      \
    }                                                                              \
  } while (0)
