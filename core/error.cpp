/* Formatting of loom::Error: "file:line: message", with the file path shortened to the repo. */
#include "core/error.h"

#include <cstring>

namespace loom::detail {

void throw_error(const char* file, int line, const std::string& message) {
  // Keep the path from the layer folder on ("ops/ops.cpp"), not the build machine's prefix.
  const char* shown = file;
  for (const char* layer : {"/core/", "/ops/", "/autograd/", "/nn/", "/distributed/", "/data/", "/quant/",
                            "/tools/", "/tests/", "/examples/"}) {
    if (const char* p = std::strstr(file, layer)) {
      shown = p + 1;
      break;
    }
  }
  throw Error(concat(message, " (", shown, ":", line, ")"));
}

}  // namespace loom::detail
