/*
 * The kernel table: one slot per (op, device type) holding a kernel function pointer.
 * The ops layer owns the op enum (ops/op_list.def) and the typed view of this table
 * (ops/dispatch.h); core only stores untyped pointers so that backends can register kernels
 * without core knowing the ops. Registration is explicit (register_cpu_kernels(),
 * register_cuda_kernels()), never a static registrar that a linker could drop.
 */
#pragma once

#include <array>
#include <cstddef>

#include "core/device.h"
#include "core/error.h"

namespace loom {

class KernelTable {
 public:
  static constexpr size_t kMaxOps = 256;
  using RawKernel = void (*)();

  void set(size_t op, DeviceType device, RawKernel kernel) {
    LOOM_CHECK(op < kMaxOps, "KernelTable: op id ", op, " exceeds capacity ", kMaxOps);
    slots_[op][static_cast<size_t>(device)] = kernel;
  }
  RawKernel get(size_t op, DeviceType device) const { return slots_[op][static_cast<size_t>(device)]; }

 private:
  std::array<std::array<RawKernel, kNumDeviceTypes>, kMaxOps> slots_{};
};

KernelTable& kernel_table();

}  // namespace loom
