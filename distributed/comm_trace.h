/*
 * Tracing every communication of a process: each operation of every ProcessGroup (all-reduce,
 * all-gather, reduce-scatter, broadcast, reduce, scatter, gather, all-to-all, send, recv, barrier),
 * whoever calls it (DDP's buckets, ZeRO's and FSDP's gathers and reduce-scatters, tensor
 * parallelism's all-reduces, the pipeline's sends and receives), reported to one sink when the
 * caller's wait() on it returns:
 *
 *   posted ───────── in flight ───────── done
 *                        wait_begin ──── done      (the part the caller sat waiting for)
 *
 * The wait is what communication cost the caller; the rest of the flight overlapped whatever the
 * caller did meanwhile (DDP's backward, FSDP's previous layer). A trace that draws both shows
 * the overlap (train --trace).
 *
 * The sink is process-wide, so every group, including those made later by new_group, reports to
 * it with no wiring. It is called on the thread that waited; it must be thread-safe. Without a
 * sink, an operation costs one relaxed atomic load more. Operations waited on by nobody (a
 * Work dropped unwaited) are not reported, nor are the ring algorithms' own sends and receives
 * (their collective is).
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace loom::distributed {

class ProcessGroup;

struct CommEvent {
  std::string operation;  // "all_reduce", "all_gather", ..., "send", "recv", "barrier"
  std::string group;      // ProcessGroup::label(): "data", "tensor", "pipeline", "world", ...
  int group_size = 0;
  int peer = -1;          // send/recv: the other rank (in the group); the root of a rooted one
  int64_t bytes = 0;      // the payload: CommStats' payload_bytes of this call
  std::chrono::steady_clock::time_point posted{}, wait_begin{}, done{};
};

using CommSink = std::function<void(const CommEvent&)>;

// Installs the process-wide sink (an empty function removes it). Not while operations are in
// flight: install it before the first collective, remove it after the last wait.
void set_comm_sink(CommSink sink);
bool comm_sink_installed();

namespace detail {
// Calls the sink, if one is installed (ProcessGroup's Work wrappers).
void report_comm_event(const CommEvent& event);
}  // namespace detail

}  // namespace loom::distributed
