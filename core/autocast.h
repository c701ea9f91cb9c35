/*
 * Autocast state: whether ops run in lower precision on this thread, per device type
 * (torch.autocast / torch.is_autocast_enabled). Like grad mode it lives in core because the
 * ops layer reads it on every call; the policy (which ops cast their inputs to what) is in
 * ops/autocast.h, and users normally take it through nn/amp/amp.h.
 *
 * The state is thread-local, as in torch: a data-loader or a second training thread is not
 * affected by an autocast region on another thread. When autocast is off for every device the
 * check an op pays is one load of a thread-local byte.
 */
#pragma once

#include <cstdint>
#include <optional>

#include "core/device.h"
#include "core/dtype.h"

namespace loom {

class AutocastMode {
 public:
  // Whether autocast is on for any device type: the fast path of every op.
  static bool any_enabled() { return enabled_mask_ != 0; }
  static bool is_enabled(DeviceType type) { return (enabled_mask_ >> bit(type)) & 1u; }
  static void set_enabled(DeviceType type, bool enabled);
  // The lower-precision dtype of a device type: bfloat16 for the CPU, float16 for CUDA until set.
  static DType dtype(DeviceType type) { return dtypes_[bit(type)]; }
  // Throws loom::Error unless dtype is float16 or bfloat16.
  static void set_dtype(DeviceType type, DType dtype);

  // The enabled bits of all device types at once, for guards that switch autocast off inside an
  // op and restore it afterwards (ops/autocast.h).
  static uint8_t enabled_mask() { return enabled_mask_; }
  static void set_enabled_mask(uint8_t mask) { enabled_mask_ = mask; }

 private:
  static constexpr unsigned bit(DeviceType type) { return static_cast<unsigned>(type); }
  static_assert(kNumDeviceTypes <= 8, "the enabled mask has one bit per device type");

  // constinit on the declarations tells the compiler that no dynamic initialisation is pending,
  // so reading them is a plain TLS load rather than a call through the TLS init wrapper.
  static constinit thread_local uint8_t enabled_mask_;
  static constinit thread_local DType dtypes_[kNumDeviceTypes];
};

inline bool autocast_enabled(DeviceType type) {
  return AutocastMode::is_enabled(type);
}
inline bool autocast_enabled(Device device) {
  return AutocastMode::is_enabled(device.type());
}
inline DType autocast_dtype(DeviceType type) {
  return AutocastMode::dtype(type);
}
inline DType autocast_dtype(Device device) {
  return AutocastMode::dtype(device.type());
}

// Turns autocast on (or off) for one device type for a scope and restores the previous enabled
// flag and dtype when the scope ends, by exception too (torch.autocast(device_type, dtype,
// enabled)). Guards nest: an inner guard with enabled = false runs a region in full precision.
//
//   {
//     loom::AutocastGuard autocast(loom::DeviceType::CPU);  // bfloat16
//     Tensor logits = model.forward(x);                      // matmuls and convs in bf16
//     loss = loom::cross_entropy(logits, y);                 // in float32
//   }
//   loss.backward();                                         // outside the region, as in torch
//
// dtype: float16 or bfloat16; left out, the device type's current autocast dtype (bfloat16 for
// the CPU, float16 for CUDA unless set). Throws loom::Error for any other dtype.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType type, std::optional<DType> dtype = std::nullopt, bool enabled = true);
  explicit AutocastGuard(Device device, std::optional<DType> dtype = std::nullopt, bool enabled = true)
      : AutocastGuard(device.type(), dtype, enabled) {}
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType type_;
  bool previous_enabled_;
  DType previous_dtype_;
};

// Autocast off for every device type in a scope, restored afterwards (torch excludes its
// autocast dispatch keys the same way). An op that has cast its inputs runs under it, so the
// ops it is built from are not cast a second time; the autograd engine runs backward under it,
// because torch runs backward outside autocast: gradients flow in the dtypes of the forward.
class AutocastExcludeGuard {
 public:
  AutocastExcludeGuard() : previous_(AutocastMode::enabled_mask()) { AutocastMode::set_enabled_mask(0); }
  ~AutocastExcludeGuard() { AutocastMode::set_enabled_mask(previous_); }
  AutocastExcludeGuard(const AutocastExcludeGuard&) = delete;
  AutocastExcludeGuard& operator=(const AutocastExcludeGuard&) = delete;

 private:
  uint8_t previous_;
};

}  // namespace loom
