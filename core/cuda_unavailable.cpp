/* Device queries for a build without the CUDA backend: there are no devices. */
#include "core/cuda.h"
#include "core/error.h"

namespace loom::cuda {

bool is_available() { return false; }
int device_count() { return 0; }
DeviceProperties get_device_properties(int device) {
  LOOM_FAIL("cuda: no device ", device, ": Loom was built without the CUDA backend (LOOM_WITH_CUDA=OFF)");
}
void synchronize() {}

}  // namespace loom::cuda
