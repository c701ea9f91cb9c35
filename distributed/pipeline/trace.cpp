/* Pipeline traces (see trace.h). */
#include "distributed/pipeline/trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "ops/ops.h"

namespace loom::distributed::pipeline {
namespace {

using json = nlohmann::json;

json to_json(const TraceEvent& e) {
  return json{{"name", e.name}, {"compute", e.compute}, {"mb", e.microbatch},
              {"ts", e.start_us}, {"dur", e.duration_us}, {"bytes", e.bytes}};
}

TraceEvent from_json(const json& j) {
  return TraceEvent{j.at("name").get<std::string>(), j.at("compute").get<bool>(), j.at("mb").get<int64_t>(),
                    j.at("ts").get<double>(),         j.at("dur").get<double>(),    j.at("bytes").get<int64_t>()};
}

}  // namespace

std::vector<std::vector<TraceEvent>> gather_trace(ProcessGroup& group, const std::vector<TraceEvent>& mine, int root) {
  json list = json::array();
  for (const TraceEvent& e : mine) list.push_back(to_json(e));
  const std::string text = list.dump();
  // Every rank's byte count first (all-gather), then the bytes themselves to the root. Messages
  // travel on the group's device (NCCL sends CUDA tensors only) and are read on the host.
  const TensorOptions on_group = TensorOptions(kInt64).device(group.device());
  Tensor size = full({1}, static_cast<double>(text.size()), on_group);
  Tensor gathered = zeros({group.size()}, on_group);
  group.all_gather(size, gathered);  // waits for every rank's count
  const Tensor sizes = gathered.to(kCPU);
  std::vector<std::vector<TraceEvent>> all;
  if (group.rank() != root) {
    Tensor bytes = empty({static_cast<int64_t>(text.size())}, TensorOptions(kUInt8));
    std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
    group.send(bytes.to(group.device()), root);  // waits for the root to receive it
    return all;
  }
  for (int r = 0; r < group.size(); ++r) {
    std::string received = text;
    if (r != root) {
      Tensor incoming = empty({sizes.data_ptr<int64_t>()[r]}, on_group.dtype(kUInt8));
      group.recv(incoming, r);
      const Tensor bytes = incoming.to(kCPU);
      received.assign(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
    }
    std::vector<TraceEvent> events;
    for (const json& j : json::parse(received)) events.push_back(from_json(j));
    all.push_back(std::move(events));
  }
  return all;
}

std::string chrome_trace_json(const std::vector<std::vector<TraceEvent>>& per_rank) {
  json events = json::array();
  for (size_t r = 0; r < per_rank.size(); ++r) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "stage " + std::to_string(r)}}}});
    for (const TraceEvent& e : per_rank[r]) {
      json event{{"name", e.name}, {"cat", e.compute ? "compute" : "comm"}, {"ph", "X"}, {"pid", 0},
                 {"tid", r},       {"ts", e.start_us},                      {"dur", e.duration_us},
                 {"args", {{"microbatch", e.microbatch}}}};
      if (!e.compute) event["args"]["bytes"] = e.bytes;
      events.push_back(event);
    }
  }
  return json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

std::vector<double> measured_bubble(const std::vector<std::vector<TraceEvent>>& per_rank) {
  double begin = 0, end = 0;
  bool any = false;
  for (const auto& events : per_rank)
    for (const TraceEvent& e : events) {
      begin = any ? std::min(begin, e.start_us) : e.start_us;
      end = any ? std::max(end, e.start_us + e.duration_us) : e.start_us + e.duration_us;
      any = true;
    }
  LOOM_CHECK(any && end > begin, "measured_bubble: the trace has no events");
  std::vector<double> bubble;
  for (const auto& events : per_rank) {
    double busy = 0;
    for (const TraceEvent& e : events)
      if (e.compute) busy += e.duration_us;
    bubble.push_back(1.0 - busy / (end - begin));
  }
  return bubble;
}

}  // namespace loom::distributed::pipeline
