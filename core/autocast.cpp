/* Per-thread autocast state and its guard (see autocast.h). New threads start with autocast off. */
#include "core/autocast.h"

#include "core/error.h"

namespace loom {

constinit thread_local uint8_t AutocastMode::enabled_mask_ = 0;
// Indexed by DeviceType: the CPU's bf16 kernels (oneDNN) are its fast path and bf16 keeps f32's
// range; on CUDA float16 is torch's default, with the GradScaler guarding its range.
constinit thread_local DType AutocastMode::dtypes_[kNumDeviceTypes] = {DType::BFloat16, DType::Float16};

void AutocastMode::set_enabled(DeviceType type, bool enabled) {
  const uint8_t b = static_cast<uint8_t>(1u << bit(type));
  enabled_mask_ = static_cast<uint8_t>(enabled ? enabled_mask_ | b : enabled_mask_ & ~b);
}

void AutocastMode::set_dtype(DeviceType type, DType dtype) {
  LOOM_CHECK(dtype == DType::BFloat16 || dtype == DType::Float16,
             "autocast: the lower-precision dtype must be bfloat16 or float16, got ", dtype, " for ",
             type == DeviceType::CPU ? "cpu" : "cuda");
  dtypes_[bit(type)] = dtype;
}

AutocastGuard::AutocastGuard(DeviceType type, std::optional<DType> dtype, bool enabled)
    : type_(type),
      previous_enabled_(AutocastMode::is_enabled(type)),
      previous_dtype_(AutocastMode::dtype(type)) {
  // Validated before anything changes, so a throwing constructor leaves the state untouched.
  if (dtype) AutocastMode::set_dtype(type, *dtype);
  AutocastMode::set_enabled(type, enabled);
}

AutocastGuard::~AutocastGuard() {
  AutocastMode::set_enabled(type_, previous_enabled_);
  AutocastMode::set_dtype(type_, previous_dtype_);  // was valid when saved: cannot throw
}

}  // namespace loom
