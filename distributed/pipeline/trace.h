/*
 * What a pipeline step looked like, as a Chrome / Perfetto trace (the JSON trace-event format:
 * open chrome://tracing or ui.perfetto.dev and load the file). One track per rank; one box per
 * forward or backward of a micro-batch and per send or receive, with its bytes. Opened, it is
 * the pipeline diagram of the textbooks, measured: the gaps are the bubble.
 *
 * Times are microseconds from the step's start on each rank (ranks start the step after a barrier,
 * so the tracks line up to within the barrier's skew).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace loom::distributed::pipeline {

struct TraceEvent {
  std::string name;  // "F3", "B3", "send act 3", "recv grad 3"
  bool compute = false;
  int64_t microbatch = 0;
  double start_us = 0, duration_us = 0;
  int64_t bytes = 0;  // messages: the payload
};

// Every rank's events, gathered on `root` (the others get an empty list). Collective.
std::vector<std::vector<TraceEvent>> gather_trace(ProcessGroup& group, const std::vector<TraceEvent>& mine, int root = 0);

// The trace-event JSON of all ranks' events (pid 0, tid = rank, named "stage r").
std::string chrome_trace_json(const std::vector<std::vector<TraceEvent>>& per_rank);

// Idle fraction of each rank: 1 - (its compute time) / (the step's span over all ranks).
std::vector<double> measured_bubble(const std::vector<std::vector<TraceEvent>>& per_rank);

}  // namespace loom::distributed::pipeline
