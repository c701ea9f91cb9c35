/*
 * The emulator's device memory (runtime.cpp): allocations live in their own mappings that are
 * inaccessible (PROT_NONE) except while device work runs, which holds a DeviceAccess. Host code
 * that dereferences a device pointer therefore faults, and the fault handler names the
 * allocation; a kernel that is handed a host pointer is refused at launch.
 */
#pragma once

#include <cstddef>

namespace loom_emu {

// Held by every kernel launch and copy: serialises device work (streams run their work when it
// is enqueued) and makes device memory readable and writable for its duration.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// Whether [p, p + n) lies inside one live device allocation.
bool is_device_range(const void* p, size_t n);

}  // namespace loom_emu
