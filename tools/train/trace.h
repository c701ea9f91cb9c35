/*
 * A Chrome / Perfetto trace of a training run (`train --trace FILE`): where the time of each step
 * goes (data loading, forward, backward, optimizer step, validation, checkpointing), drawn as
 * nested bars per thread, plus counters (loss, learning rate, throughput) as line tracks.
 *
 * The file is the Trace Event Format that chrome://tracing and ui.perfetto.dev open:
 *   {"traceEvents":[{"name":"forward","cat":"step","ph":"X","ts":123.4,"dur":56.7,"pid":1,"tid":1},
 *                   {"name":"loss","ph":"C","ts":...,"pid":1,"args":{"loss":2.3}}, ...],
 *    "displayTimeUnit":"ms"}
 * Spans are recorded as complete ("X") events when they end, so an unbalanced begin never leaves
 * a dangling "B" that the viewers draw to the end of the trace. Timestamps are steady_clock
 * microseconds since the Trace was made.
 *
 * Under mpirun every rank records its own Trace; rank 0 writes them as one file with a process
 * per rank (write_merged), their clocks aligned at a point all ranks passed together (mark_sync,
 * after a barrier). Communication appears twice: the caller's wait as a span on its thread, and
 * the whole flight, from post to completion, as an async slice ("b"/"e", its own track) that may
 * overlap the compute it ran beside.
 *
 * A Trace made without a path records nothing and each call is a branch on one bool, so the
 * trainer calls it unconditionally instead of wrapping every span in `if (tracing)`.
 * All members are thread-safe (one mutex): data-loader workers may record their own spans.
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace loom::train {

class Trace {
 public:
  // No-op mode: every call returns at once and write() writes nothing.
  Trace() = default;
  // Records events, to be written to `out` by write() (its directory must exist by then).
  explicit Trace(std::filesystem::path out);
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  bool enabled() const { return enabled_; }
  const std::filesystem::path& path() const { return path_; }

  // Opens a span on the calling thread; spans nest (a stack per thread).
  void begin(std::string name, std::string category = {});
  // Closes the innermost open span of the calling thread and records it as an "X" event.
  // Throws loom::Error if the thread has no open span (a begin/end mismatch is a bug to see).
  void end();

  // begin() on construction, end() on destruction: `Trace::Scope s(trace, "forward", "step");`
  class Scope {
   public:
    Scope(Trace& trace, std::string name, std::string category = {});
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Trace& trace_;
  };

  // A span on the calling thread that was timed elsewhere (a collective's wait, reported when it
  // ended), with one numeric argument when arg_key is not empty: {"bytes": 4096}.
  void span(std::string name, std::string category, std::chrono::steady_clock::time_point begin,
            std::chrono::steady_clock::time_point end, std::string arg_key = {}, double value = 0);

  // An async slice ("b" and "e" events with one id): something in flight from `begin` to `end`
  // beside the thread's own spans (a collective's flight), with one numeric argument.
  void async_span(std::string name, std::string category, std::chrono::steady_clock::time_point begin,
                  std::chrono::steady_clock::time_point end, std::string arg_key = {}, double value = 0);

  // Marks now as the point every rank of a job passed together (call it right after a barrier):
  // write_merged aligns the ranks' timelines there.
  void mark_sync();
  // This Trace's events as a JSON array, under process id `pid` named `process_name`, with
  // timestamps relative to the sync point. "[]" in no-op mode.
  std::string export_events(int pid, const std::string& process_name) const;
  // Writes the events of every rank, export_events() of each (rank 0's first), as one trace,
  // shifted so that no event is before 0. Throws loom::Error if it cannot be written.
  void write_merged(const std::vector<std::string>& ranks_events) const;

  // A counter sample ("C" event): one track per name in the viewers. Non-finite values are
  // dropped (JSON has no NaN; the viewer would reject the whole file).
  void counter(const std::string& name, double value);

  // Names the calling thread in the viewer ("M" thread_name event), e.g. "main", "loader 0".
  void set_thread_name(const std::string& name);

  // The number of recorded events (metadata included); 0 in no-op mode.
  size_t event_count() const;

  // Writes every event recorded so far to the path, atomically (temp file + rename), as one
  // JSON object. Spans still open are not written. May be called more than once (each write
  // replaces the file with the longer trace). No-op mode: does nothing. Throws loom::Error if
  // the file cannot be written.
  void write() const;

 private:
  struct Open {
    std::string name, category;
    double ts_us;
  };
  struct Event {
    char ph;  // 'X', 'C', 'M', or 'b'/'e' (async begin/end)
    std::string name, category;
    double ts_us = 0, dur_us = 0;
    int tid = 0;
    std::string arg_key;  // "C": the series name; "M": "name"; "X": its argument's, if any
    double value = 0;     // "C", "X"
    std::string text;     // "M": the thread or process name
    int64_t id = 0;       // "b"/"e": the slice's id
  };
  // Every event as Trace Event Format objects under `pid`, timestamps minus `shift_us`.
  std::vector<nlohmann::json> events_as_json(int pid, double shift_us) const;

  // An event of phase `ph` on the calling thread at `begin` (the mutex held).
  Event timed_event_locked(char ph, std::string name, std::string category,
                           std::chrono::steady_clock::time_point begin, std::string arg_key, double value);
  double now_us() const;
  double us_since_start(std::chrono::steady_clock::time_point t) const;
  int tid_locked();  // the calling thread's small id (1, 2, ...), assigned on first use

  bool enabled_ = false;
  std::filesystem::path path_;
  std::chrono::steady_clock::time_point start_{};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  double sync_us_ = 0;
  int64_t next_async_id_ = 1;
  std::unordered_map<std::thread::id, int> tids_;
  std::unordered_map<std::thread::id, std::vector<Open>> open_;
};

}  // namespace loom::train
