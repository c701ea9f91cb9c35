/* The process-wide kernel table. */
#include "core/dispatch.h"

namespace loom {

KernelTable& kernel_table() {
  static KernelTable table;
  return table;
}

}  // namespace loom
