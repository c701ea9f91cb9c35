/*
 * Where a tensor lives: the CPU or CUDA device N. The CUDA kernels come with the CUDA
 * backend; the plumbing (parsing, printing, comparing) is here so that every layer can
 * name a device.
 */
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace loom {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

class Device {
 public:
  constexpr Device(DeviceType type = DeviceType::CPU, int index = 0) : type_(type), index_(index) {}
  // "cpu", "cuda", "cuda:1"; throws loom::Error on anything else.
  explicit Device(std::string_view spec);

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) { return a.type_ == b.type_ && a.index_ == b.index_; }

 private:
  DeviceType type_;
  int index_;
};

inline constexpr Device kCPU = Device::cpu();

inline std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

}  // namespace loom
