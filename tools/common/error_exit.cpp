/* How Loom's tools end on an error (see error_exit.h). */
#include "tools/common/error_exit.h"

#include <cstdio>

namespace loom::tools {

int error_exit(const char* tool, const std::exception& e, int status, const char* label, bool newline_first) {
  std::fprintf(stderr, "%s%s: %s: %s\n", newline_first ? "\n" : "", tool, label, e.what());
  return status;
}

}  // namespace loom::tools
