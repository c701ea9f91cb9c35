/*
 * The Chrome trace writer (see trace.h). Events are kept in memory and serialised with
 * nlohmann::json at write(), which takes care of escaping names.
 */
#include "tools/train/trace.h"

#include <algorithm>
#include <cmath>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/serialize/atomic_file.h"

namespace loom::train {

Trace::Trace(std::filesystem::path out)
    : enabled_(true), path_(std::move(out)), start_(std::chrono::steady_clock::now()) {
  LOOM_CHECK(!path_.empty(), "trace: the output path is empty; pass --trace FILE or leave tracing off");
}

double Trace::now_us() const { return us_since_start(std::chrono::steady_clock::now()); }

double Trace::us_since_start(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - start_).count();
}

int Trace::tid_locked() {
  auto [it, inserted] = tids_.try_emplace(std::this_thread::get_id(), static_cast<int>(tids_.size()) + 1);
  return it->second;
}

void Trace::begin(std::string name, std::string category) {
  if (!enabled_) return;
  double ts = now_us();
  std::lock_guard lock(mutex_);
  tid_locked();
  open_[std::this_thread::get_id()].push_back({std::move(name), std::move(category), ts});
}

void Trace::end() {
  if (!enabled_) return;
  double ts = now_us();
  std::lock_guard lock(mutex_);
  auto& stack = open_[std::this_thread::get_id()];
  LOOM_CHECK(!stack.empty(), "trace: end() without a matching begin() on this thread");
  Open o = std::move(stack.back());
  stack.pop_back();
  Event e;
  e.ph = 'X';
  e.name = std::move(o.name);
  e.category = std::move(o.category);
  e.ts_us = o.ts_us;
  e.dur_us = ts - o.ts_us;
  e.tid = tid_locked();
  events_.push_back(std::move(e));
}

Trace::Scope::Scope(Trace& trace, std::string name, std::string category) : trace_(trace) {
  trace_.begin(std::move(name), std::move(category));
}

Trace::Scope::~Scope() {
  // end() only throws on a begin/end mismatch, which a Scope cannot cause by itself; never let
  // it escape a destructor (that would terminate while another exception is in flight).
  try {
    trace_.end();
  } catch (...) {
  }
}

Trace::Event Trace::timed_event_locked(char ph, std::string name, std::string category,
                                       std::chrono::steady_clock::time_point begin, std::string arg_key,
                                       double value) {
  Event e;
  e.ph = ph;
  e.name = std::move(name);
  e.category = std::move(category);
  e.ts_us = us_since_start(begin);
  e.arg_key = std::move(arg_key);
  e.value = value;
  e.tid = tid_locked();
  return e;
}

void Trace::span(std::string name, std::string category, std::chrono::steady_clock::time_point begin,
                 std::chrono::steady_clock::time_point end, std::string arg_key, double value) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  Event e = timed_event_locked('X', std::move(name), std::move(category), begin, std::move(arg_key), value);
  e.dur_us = us_since_start(end) - e.ts_us;
  events_.push_back(std::move(e));
}

void Trace::async_span(std::string name, std::string category, std::chrono::steady_clock::time_point begin,
                       std::chrono::steady_clock::time_point end, std::string arg_key, double value) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  Event b = timed_event_locked('b', std::move(name), std::move(category), begin, std::move(arg_key), value);
  b.id = next_async_id_++;
  Event e = b;
  e.ph = 'e';
  e.ts_us = us_since_start(end);
  e.arg_key.clear();
  events_.push_back(std::move(b));
  events_.push_back(std::move(e));
}

void Trace::mark_sync() {
  if (!enabled_) return;
  const double now = now_us();
  std::lock_guard lock(mutex_);
  sync_us_ = now;
}

void Trace::counter(const std::string& name, double value) {
  if (!enabled_ || !std::isfinite(value)) return;
  double ts = now_us();
  std::lock_guard lock(mutex_);
  Event e;
  e.ph = 'C';
  e.name = name;
  e.arg_key = name;
  e.value = value;
  e.ts_us = ts;
  e.tid = tid_locked();
  events_.push_back(std::move(e));
}

void Trace::set_thread_name(const std::string& name) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  Event e;
  e.ph = 'M';
  e.name = "thread_name";
  e.arg_key = "name";
  e.text = name;
  e.tid = tid_locked();
  events_.push_back(std::move(e));
}

size_t Trace::event_count() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

std::vector<nlohmann::json> Trace::events_as_json(int pid, double shift_us) const {
  std::vector<nlohmann::json> out;
  std::lock_guard lock(mutex_);
  for (const Event& e : events_) {
    nlohmann::json j = {{"name", e.name}, {"ph", std::string(1, e.ph)}, {"pid", pid}, {"tid", e.tid}};
    switch (e.ph) {
      case 'X':
      case 'b':
      case 'e':
        j["cat"] = e.category.empty() ? "train" : e.category;
        j["ts"] = e.ts_us - shift_us;
        if (e.ph == 'X') j["dur"] = e.dur_us;
        if (e.ph != 'X') j["id"] = e.id;
        if (!e.arg_key.empty()) j["args"] = {{e.arg_key, e.value}};
        break;
      case 'C':
        j["ts"] = e.ts_us - shift_us;
        j["args"] = {{e.arg_key, e.value}};
        break;
      default:  // 'M'
        j["args"] = {{e.arg_key, e.text}};
        break;
    }
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

nlohmann::json process_name_event(int pid, const std::string& name) {
  return {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}};
}

}  // namespace

void Trace::write() const {
  if (!enabled_) return;
  const int pid = static_cast<int>(::getpid());
  nlohmann::json events = nlohmann::json::array();
  events.push_back(process_name_event(pid, "train"));
  for (auto& e : events_as_json(pid, 0)) events.push_back(std::move(e));
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  nn::write_file_atomically(path_, doc.dump() + "\n");
}

std::string Trace::export_events(int pid, const std::string& process_name) const {
  if (!enabled_) return "[]";
  double sync = 0;
  {
    std::lock_guard lock(mutex_);
    sync = sync_us_;
  }
  nlohmann::json events = nlohmann::json::array();
  events.push_back(process_name_event(pid, process_name));
  // Sorted by process id in the viewers: rank 0 on top.
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
  for (auto& e : events_as_json(pid, sync)) events.push_back(std::move(e));
  return events.dump();
}

void Trace::write_merged(const std::vector<std::string>& ranks_events) const {
  if (!enabled_) return;
  nlohmann::json events = nlohmann::json::array();
  double earliest = 0;
  for (const std::string& text : ranks_events) {
    nlohmann::json rank = nlohmann::json::parse(text, nullptr, false);
    LOOM_CHECK(rank.is_array(), "trace: a rank's events are not a JSON array");
    for (auto& e : rank) {
      if (e.contains("ts")) earliest = std::min(earliest, e["ts"].get<double>());
      events.push_back(std::move(e));
    }
  }
  for (auto& e : events)
    if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - earliest;
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  nn::write_file_atomically(path_, doc.dump() + "\n");
}

}  // namespace loom::train
