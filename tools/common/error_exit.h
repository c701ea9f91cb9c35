/*
 * How Loom's command-line tools end on an error (STYLE.md, "Errors"): main catches the
 * exception, prints one line "TOOL: error: MESSAGE" to stderr and exits non-zero (2 for bad input,
 * 1 for a failure while working). One helper, so that every tool says it the same way.
 */
#pragma once

#include <exception>

namespace loom::tools {

// Prints "<newline><tool>: <label>: <e.what()>" to stderr and returns `status`, for main to
// return. `newline_first`: end an open progress line first.
int error_exit(const char* tool, const std::exception& e, int status, const char* label = "error",
               bool newline_first = false);

}  // namespace loom::tools
