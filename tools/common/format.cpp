/* How the tools write numbers for people (see format.h). */
#include "tools/common/format.h"

#include <algorithm>
#include <cstdio>

namespace loom::tools {

std::string format_bytes(int64_t bytes) {
  char buf[32];
  if (bytes >= int64_t{1} << 20)
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / (1 << 10));
  return buf;
}

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

std::string format_rate(double rate) {
  char buf[32];
  if (rate >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", rate / 1e6);
  else if (rate >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", rate / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", rate);
  return buf;
}

std::string progress_bar(double fraction, int width) {
  const int filled = std::clamp(static_cast<int>(fraction * width), 0, width);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
  return "[" + bar + "]";
}

}  // namespace loom::tools
