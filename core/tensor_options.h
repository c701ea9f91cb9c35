/*
 * TensorOptions: the dtype and device of a tensor to create. Converts implicitly from a
 * DType or a Device, so factories read like libtorch: loom::zeros({2, 3}, loom::kInt64),
 * loom::ones({4}, loom::Device::cuda()), loom::empty({8}, TensorOptions().dtype(kBFloat16)).
 */
#pragma once

#include "core/device.h"
#include "core/dtype.h"

namespace loom {

class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}     // NOLINT: implicit by design
  TensorOptions(Device device) : device_(device) {}  // NOLINT: implicit by design
  TensorOptions(DeviceType type) : device_(type) {}  // NOLINT: implicit by design

  TensorOptions dtype(DType d) const {
    TensorOptions o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(Device d) const {
    TensorOptions o = *this;
    o.device_ = d;
    return o;
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

 private:
  DType dtype_ = DType::Float32;
  Device device_ = kCPU;
};

}  // namespace loom
