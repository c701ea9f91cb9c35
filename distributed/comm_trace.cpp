#include "distributed/comm_trace.h"

#include <atomic>
#include <memory>

namespace loom::distributed {
namespace {

std::shared_ptr<const CommSink>& sink_slot() {
  static std::shared_ptr<const CommSink> sink;
  return sink;
}
std::atomic<bool> installed{false};

}  // namespace

void set_comm_sink(CommSink sink) {
  if (sink) {
    sink_slot() = std::make_shared<const CommSink>(std::move(sink));
    installed.store(true, std::memory_order_release);
  } else {
    installed.store(false, std::memory_order_release);
    sink_slot().reset();
  }
}

bool comm_sink_installed() { return installed.load(std::memory_order_acquire); }

namespace detail {

void report_comm_event(const CommEvent& event) {
  if (!comm_sink_installed()) return;
  if (const auto& sink = sink_slot()) (*sink)(event);
}

}  // namespace detail
}  // namespace loom::distributed
