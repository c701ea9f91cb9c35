/*
 * Pipeline-parallel schedules as data: for p stages (stage s on rank s) and m micro-batches,
 * the list of actions each rank performs, in order — compute (forward / backward of one
 * micro-batch) and the blocking point-to-point messages around it. The list can be printed,
 * simulated and checked here, and an executor runs it with a plain loop:
 *
 *   for (const Action& a : schedule[rank]) switch (a.type) {
 *     case RecvActivation: group.recv(input[a.microbatch], a.peer);   break;
 *     case Forward:        output[a.microbatch] = stage.forward(input[a.microbatch]); break;
 *     case SendActivation: group.send(output[a.microbatch], a.peer);  break;
 *     case RecvGrad:       group.recv(grad_out[a.microbatch], a.peer); break;
 *     case Backward:       grad_in[a.microbatch] = backward(...);     break;
 *     case SendGrad:       group.send(grad_in[a.microbatch], a.peer); break;
 *   }
 *
 * Around every compute action: a forward on stage s > 0 first receives its input activation
 * from s-1, and a forward on stage s < p-1 then sends its output to s+1; a backward on stage
 * s < p-1 first receives the gradient of its output from s+1, and one on s > 0 then sends the
 * gradient of its input to s-1. The first stage reads the data, the last computes the loss.
 *
 * The two schedules, drawn by format_timeline for p = 4, m = 8 with forward and backward both
 * one time unit (Fi / Bi: forward / backward of micro-batch i; ".": idle):
 *
 * GPipe (Huang et al., 2019): all forwards, then all backwards.
 *   stage 0: F0 F1 F2 F3 F4 F5 F6 F7 .  .  .  .  .  .  B7 B6 B5 B4 B3 B2 B1 B0
 *   stage 1: .  F0 F1 F2 F3 F4 F5 F6 F7 .  .  .  .  B7 B6 B5 B4 B3 B2 B1 B0 .
 *   stage 2: .  .  F0 F1 F2 F3 F4 F5 F6 F7 .  .  B7 B6 B5 B4 B3 B2 B1 B0 .  .
 *   stage 3: .  .  .  F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0 .  .  .
 *
 * 1F1B (PipeDream-flush, Narayanan et al., 2021; Megatron-LM): stage s runs a warm-up of
 * p - s - 1 forwards, then alternates one forward and one backward, then cools down with the
 * remaining backwards.
 *   stage 0: F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 B4 .  B5 .  B6 .  B7
 *   stage 1: .  F0 F1 F2 .  .  B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .  B6 .  B7 .
 *   stage 2: .  .  F0 F1 .  B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .  B7 .  .
 *   stage 3: .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .  .  .
 *
 * Bubble. Both take the same time: every stage idles while the pipeline fills (p-1 forwards)
 * and drains (p-1 backwards), so with forward time tf and backward time tb the step takes
 * (m + p - 1)(tf + tb) and each stage is idle (p - 1)(tf + tb) of it: the bubble fraction is
 * (p - 1) / (m + p - 1), small only when m >> p. (The simulator reproduces this exactly.)
 *
 * Memory. A stage keeps the activations of a micro-batch from its forward until its backward.
 * GPipe runs all m forwards before any backward, so every stage holds m micro-batches of
 * activations at its peak. 1F1B starts backwards as soon as the first gradient comes back:
 * stage s never holds more than p - s (at most p) micro-batches, whatever m is, so m can grow
 * to shrink the bubble without growing the activation memory. For p = 4, m = 8 above: GPipe
 * peaks at 8 micro-batches on every stage, 1F1B at 4, 3, 2, 1 on stages 0 .. 3 (the first stage,
 * which waits longest for its first gradient, holds the most).
 *
 * Deadlock freedom. With blocking send/recv a message completes only when both sides reach it
 * (MPI may send small messages eagerly, but large ones wait for the matching receive: the
 * "rendezvous" model, which simulate() uses by default). Stages form a chain, so a blocked rank
 * waits on a neighbour, and following the waits along the chain must end at two neighbours
 * waiting on each other, each at its next message of their link. If both sides of every link do
 * the link's messages in the same order, those are the two halves of one message, which then
 * completes: no deadlock. So the order on each link is all that matters, and it is built to
 * agree: between two compute actions a rank does the activation messages of that gap before the
 * gradient messages, on both sides of every link (stage s+1 receives the activation of its next
 * forward before it sends the gradient of the backward it just did, while stage s sends that
 * activation before it waits for that gradient; the naive order, send the gradient first,
 * deadlocks: both ranks send, neither receives). check_pairwise_order() verifies the agreement
 * for every pair and simulate() runs the whole schedule; the tests do both for many (p, m).
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::distributed::pipeline {

// Compute actions (Forward, Backward) and the blocking messages around them.
enum class ActionType { Forward, Backward, SendActivation, RecvActivation, SendGrad, RecvGrad };

// One step of one rank. `stage` is the model stage the action belongs to (the rank's own stage:
// stage s runs on rank s); `peer` is the other rank of a send/recv, -1 for compute actions. An
// executor may use the micro-batch as the message tag.
struct Action {
  ActionType type;
  int64_t microbatch;
  int64_t stage;
  int peer;

  bool is_compute() const { return type == ActionType::Forward || type == ActionType::Backward; }
  bool is_send() const { return type == ActionType::SendActivation || type == ActionType::SendGrad; }
  bool is_recv() const { return type == ActionType::RecvActivation || type == ActionType::RecvGrad; }

  // "F3", "B3", "send act 3 -> rank 2", "recv act 3 <- rank 0", "send grad 3 -> rank 0",
  // "recv grad 3 <- rank 2".
  std::string to_string() const;

  bool operator==(const Action&) const = default;
};

// schedule[r]: the actions of rank r, in the order it performs them.
using Schedule = std::vector<std::vector<Action>>;

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B };
// "GPipe", "1F1B", "interleaved 1F1B".
const char* schedule_kind_name(ScheduleKind kind);

// The schedule of `kind` for `stages` = p ranks and `microbatches` = m micro-batches: p lists.
//   GPipe: stage s does F0 .. F(m-1), then B(m-1) .. B0. Backwards go in reverse order, as in the
//     GPipe paper's figure and torchgpipe: the last stage goes on with the micro-batch whose
//     forward it has just finished, whose activations are the most recently touched (warm in
//     cache). The order changes neither the step time nor the peak memory (m).
//   1F1B: stage s does w = min(p - s - 1, m) warm-up forwards, then m - w pairs (forward i + w,
//     backward i), then the w remaining backwards; backwards go in micro-batch order. When
//     m < p the stages near the front have no steady state (w = m): they run all m forwards and
//     then all m backwards, like GPipe, and the peak memory is m instead of p - s.
//   Interleaved 1F1B (chunks = v model chunks per rank; the stretch of 1F1B in Narayanan et al.,
//     2021): the model is cut into p·v stages, rank r holding stages r, r + p, ...; each compute
//     action's `stage` is that model stage. Forwards go through groups of p micro-batches chunk
//     by chunk, backwards through the chunks in reverse; rank r warms up with
//     2(p - r - 1) + (v - 1)p forwards (all m·v when m == p). The bubble shrinks to
//     (p - 1) / (v·m + p - 1) of the step in the simulator's units (forward and backward of a
//     chunk cost 1/v of a whole stage's), at the price of v times as many messages. m must be a
//     multiple of p. With v = 1 it is 1F1B.
// Throws loom::Error if stages < 1, microbatches < 1, chunks != 1 for GPipe or 1F1B, or (for
// interleaved) chunks < 1, chunks > 1 on one rank, or m not a multiple of p.
Schedule make_schedule(ScheduleKind kind, int64_t stages, int64_t microbatches, int64_t chunks = 1);

// The compute actions of each rank, one line per stage: "stage 0: F0 F1 B0 F2 B1 B2\n...". In an
// interleaved schedule each label ends with its chunk's letter: "F3a" is micro-batch 3 through
// the rank's first chunk, "F3b" through its second.
std::string format_schedule(const Schedule& schedule);
// That label of one compute action on a schedule of `ranks` ranks.
std::string compute_label(const Action& a, int64_t ranks, bool interleaved);

// How simulate() treats a send.
//   Rendezvous: a send and its receive complete together, when both ranks have reached them
//     (MPI's behaviour for large messages; the strict model: a schedule that passes it also
//     passes under Eager).
//   Eager: a send completes at once (the message is buffered); a receive waits for it.
enum class CommModel { Rendezvous, Eager };

struct SimulationOptions {
  int64_t forward_cost = 1;   // time units of one forward of one micro-batch on one stage
  int64_t backward_cost = 2;  // backward ~ 2 x forward (gradients for inputs and for weights)
  CommModel comm = CommModel::Rendezvous;
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
  // it does not depend on the timing).
  std::vector<int64_t> peak_live_activations;
  // Per rank: the actions that completed, with their times.
  std::vector<std::vector<TimedAction>> timeline;
};

// Runs all ranks' lists together with blocking point-to-point semantics (options.comm) and the
// given compute costs, and reports deadlock, time, idle time and activation memory. A deadlock
// (or a receive that meets a different message than it expects under Eager) is a result, not an
// error. Throws loom::Error for a malformed schedule: a peer outside [0, ranks) or equal to the
// rank itself, a compute action with a peer, a negative micro-batch, or costs < 1.
SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options = {});

// For every pair of ranks (a, b): the messages between them — both directions, in the order each
// side performs them — must pair up: the k-th message on a is the counterpart of the k-th on b
// (send <-> recv, same kind — activation or gradient — and same micro-batch). In particular the
// sends from a to b are exactly b's receives from a, in order. Checking the two directions
// together also catches two ranks that both send first, which blocks under rendezvous. Returns
// one line per mismatching pair ("rank 0 <-> rank 1: message #2 is send act 2 -> rank 1 on rank
// 0 but recv act 1 <- rank 0 on rank 1"); empty when every pair matches. On a chain of stages,
// an empty result means simulate() under Rendezvous cannot deadlock (schedule.h). Throws
// loom::Error for a malformed schedule, as simulate().
std::vector<std::string> check_pairwise_order(const Schedule& schedule);

// The simulated time-step grid, one line per rank, one cell per time unit: "F3" for each unit
// of a forward of micro-batch 3, "B3" for a backward, "." idle (cells padded to one width).
std::string format_timeline(const SimulationResult& result);

}  // namespace loom::distributed::pipeline
