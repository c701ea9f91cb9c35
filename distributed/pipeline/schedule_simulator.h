/*
 * Checking and simulating a pipeline schedule (schedule.h) without running it: the lists of all
 * ranks are played together in virtual time, the way the ranks would run them, to find out
 * whether they finish (no deadlock, every message received by the receive that expects it), how
 * long the step takes, how much of it each rank is idle (the bubble) and how many micro-batches
 * of activations each holds. The pictures and the formulas in schedule.h come from here, and the
 * tests hold the builders to them for many (p, m, v).
 *
 * Two models of a send: Rendezvous (a send completes only together with its receive: MPI's
 * behaviour for large messages, and the strict test of GPipe and 1F1B) and Eager (a send is
 * posted and never waits: what PipelineStageRunner does, and what interleaved 1F1B needs).
 * check_pairwise_order is the static half: it compares the message order on both sides of every
 * link, which is what deadlock freedom rests on (schedule.h).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/pipeline/schedule.h"

namespace loom::distributed::pipeline {

// How simulate() treats a send.
//   Rendezvous: a send and its receive complete together, when both ranks have reached them
//     (MPI's behaviour for large messages; the strict model: a schedule that passes it also
//     passes under Eager).
//   Eager: a send completes at once (the message is buffered); a receive waits for it.
enum class CommModel { Rendezvous, Eager };

struct SimulationOptions {
  int64_t forward_cost = 1;   // tF: time units of one forward of one micro-batch on one stage
  int64_t backward_cost = 2;  // backward ~ 2 x forward (gradients for inputs and for weights)
  CommModel comm = CommModel::Rendezvous;
  // Zero-bubble's halves of a backward: tB (BackwardInput) and tW (BackwardWeight). For a
  // matmul each is one matmul like the forward's, so tF = tB = tW; the defaults keep
  // tB + tW = backward_cost, so that split and unsplit schedules are compared at equal work.
  int64_t input_backward_cost = 1;
  int64_t weight_backward_cost = 1;
};

// One action as it ran: start and end time. Messages take no time of their own; a send or
// receive that had to wait for its peer has end > start (blocked).
struct TimedAction {
  Action action;
  int64_t start;
  int64_t end;
};

// Where a rank stopped in a deadlock: its position in its list and the action it waits on.
struct BlockedRank {
  int rank;
  int64_t index;
  Action action;
};

struct SimulationResult {
  // True when the schedule cannot run to its end: some rank waits forever (deadlock), or, under
  // Eager, a receive meets another message than it expects or a sent message is never received.
  bool deadlocked = false;
  // The ranks that had not finished when the simulation stopped, with the action each stopped at.
  std::vector<BlockedRank> blocked;
  // What went wrong, "" when nothing did: "deadlock: rank 0 blocked at #3 send act 1 -> rank 1;
  // rank 1 blocked at #3 send grad 0 -> rank 0", "; message mismatch: ...", "... never received".
  std::string deadlock_report;
  // Makespan: the time at which the last rank finished (up to the deadlock, if any).
  int64_t total_time = 0;
  // Per rank: time spent computing, idle time (total_time - busy) and idle / total_time.
  std::vector<int64_t> busy_time;
  std::vector<int64_t> idle_time;
  std::vector<double> bubble_fraction;
  // Per rank: the largest number of micro-batches whose forward is done and backward is not,
  // i.e. how many micro-batches of activations the stage holds at once (from the list's order;
  // it does not depend on the timing). Interleaved, a rank counts each chunk's micro-batches.
  std::vector<int64_t> peak_live_activations;
  // Per rank: the same count up to the micro-batch's weight gradient instead (Backward does both
  // halves, so it differs only for zero-bubble, whose W comes later). PipelineStageRunner keeps a
  // micro-batch's graph until its W, so this is what it holds.
  std::vector<int64_t> peak_live_until_weight_grad;
  // Per rank: the actions that completed, with their times.
  std::vector<std::vector<TimedAction>> timeline;
};

// Runs all ranks' lists together with blocking point-to-point semantics (options.comm) and the
// given compute costs, and reports deadlock, time, idle time and activation memory. A deadlock
// (or a receive that meets a different message than it expects under Eager) is a result, not an
// error. Throws loom::Error for a malformed schedule: a peer outside [0, ranks) or equal to the
// rank itself, a compute action with a peer, a negative micro-batch, or costs < 1.
// BackwardWeight actions take their cost and exchange no messages.
SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options = {});

// For every pair of ranks (a, b): the messages between them — both directions, in the order each
// side performs them — must pair up: the k-th message on a is the counterpart of the k-th on b
// (send <-> recv, same kind — activation or gradient — same micro-batch and same model-stage
// boundary, which tells apart the chunks of an interleaved schedule). In particular the
// sends from a to b are exactly b's receives from a, in order. Checking the two directions
// together also catches two ranks that both send first, which blocks under rendezvous. Returns
// one line per mismatching pair ("rank 0 <-> rank 1: message #2 is send act 2 -> rank 1 on rank
// 0 but recv act 1 <- rank 0 on rank 1"); empty when every pair matches. On a chain of stages,
// an empty result means simulate() under Rendezvous cannot deadlock (schedule.h). Throws
// loom::Error for a malformed schedule, as simulate().
std::vector<std::string> check_pairwise_order(const Schedule& schedule);

// The simulated time-step grid, one line per rank, one cell per time unit: "F3" for each unit
// of a forward of micro-batch 3, "B3" for a backward (or its input half), "W3" for a weight half,
// "." idle (cells padded to one width);
// interleaved, with the chunk's letter (compute_label): "F3a", "B3b".
std::string format_timeline(const SimulationResult& result);

}  // namespace loom::distributed::pipeline
