/* Device names: parsing and printing ("cpu", "cuda:0"). */
#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace loom {

Device::Device(std::string_view spec) : type_(DeviceType::CPU), index_(0) {
  if (spec == "cpu") return;
  if (spec.starts_with("cuda")) {
    type_ = DeviceType::CUDA;
    std::string_view rest = spec.substr(4);
    if (rest.empty()) return;
    if (rest.front() == ':') {
      rest.remove_prefix(1);
      auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index_);
      if (ec == std::errc() && ptr == rest.data() + rest.size() && !rest.empty() && index_ >= 0) return;
    }
  }
  LOOM_FAIL("invalid device '", spec, "': expected 'cpu', 'cuda' or 'cuda:N'");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

}  // namespace loom
