/*
 * CUDA device queries. Safe to call in any build: without the CUDA backend, or on a machine
 * without a driver or GPU, is_available() is false and device_count() is 0. Asking for CUDA
 * memory in those cases throws a loom::Error that says why.
 */
#pragma once

#include <string>

namespace loom::cuda {

// True when Loom was built with CUDA and at least one GPU can be used.
bool is_available();
int device_count();

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;          // compute capability
  size_t total_memory = 0;           // bytes
  int multiprocessor_count = 0;
};
// Throws loom::Error when the device does not exist.
DeviceProperties get_device_properties(int device);

// Blocks until all work queued on the current device has finished.
void synchronize();

}  // namespace loom::cuda
