/*
 * Pipeline-parallel schedules as data. For p ranks and m micro-batches a schedule is, per rank,
 * the list of actions the rank performs, in order: compute (the forward or the backward of one
 * micro-batch through one model stage) and the point-to-point messages around it. GPipe, 1F1B,
 * interleaved 1F1B and zero-bubble ZB-H1 are all built here as such lists, so that one plain loop runs any of them
 * (PipelineStageRunner::train_step, pipeline.cpp), and so that they can be printed here and
 * checked and simulated without any process (schedule_simulator.h):
 *
 *   for (const Action& a : schedule[rank]) switch (a.type) {  // x[a]: x of (a.stage, a.microbatch)
 *     case RecvActivation: input[a] = recv(a.peer);                         break;
 *     case Forward:        output[a] = chunk[a.stage / p].forward(input[a]); break;
 *     case SendActivation: send(output[a], a.peer);                         break;
 *     case RecvGrad:       grad_out[a] = recv(a.peer);                      break;
 *     case Backward:       grad_in[a] = backward(output[a], grad_out[a]);   break;
 *     case SendGrad:       send(grad_in[a], a.peer);                        break;
 *     case BackwardInput:  grad_in[a] = input_grad(output[a], grad_out[a]); break;  // ZB-H1: B
 *     case BackwardWeight: accumulate_weight_grads(output[a], grad_out[a]); break;  // ZB-H1: W
 *   }
 *
 * Model stages. The model is cut into p·v stages, v "chunks" per rank: stage g runs on rank
 * g mod p. GPipe and 1F1B have v = 1, so stage s is rank s and the ranks form a chain; with
 * v > 1 a micro-batch goes round the ranks v times. Around every compute action of stage g: a
 * forward with g > 0 first receives its input activation from stage g-1, and one with g < p·v-1
 * then sends its output to g+1; a backward with g < p·v-1 first receives the gradient of its
 * output from g+1, and one with g > 0 then sends the gradient of its input to g-1. Stage 0 reads
 * the data, the last stage computes the loss.
 *
 * The schedules, drawn by format_timeline for p = 4, m = 8 with every forward and backward
 * one time unit (Fi / Bi: forward / backward of micro-batch i; ".": idle; one row per rank):
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
 * Interleaved 1F1B (Narayanan et al., 2021, sec. 2.2; Megatron-LM), v = 2: rank r holds model
 * stages r ("a") and r + 4 ("b"), each half of a GPipe/1F1B stage, so each box above is split
 * into two here. Forwards take groups of p micro-batches through chunk a, then the same group
 * through chunk b; backwards go through the chunks in reverse. Drawn with posted sends (under
 * blocking ones it deadlocks, see below), in two halves:
 *   time units 0 .. 18
 *   stage 0: F0a F1a F2a F3a F0b F1b F2b F3b F4a F5a F6a B0b F7a B1b .   .   F4b B2b F5b
 *   stage 1: .   F0a F1a F2a F3a F0b F1b F2b F3b F4a B0b F5a B1b F6a B2b F7a B3b F4b B0a
 *   stage 2: .   .   F0a F1a F2a F3a F0b F1b F2b B0b F3b B1b F4a B2b F5a B3b F6a B0a F7a
 *   stage 3: .   .   .   F0a F1a F2a F3a F0b B0b F1b B1b F2b B2b F3b B3b F4a B0a F5a B1a
 *   time units 19 .. 37
 *   stage 0: B3b F6b B0a F7b B1a B2a B3a .   B4b .   B5b .   B6b .   B7b B4a B5a B6a B7a
 *   stage 1: F5b B1a F6b B2a F7b B3a .   B4b .   B5b .   B6b .   B7b B4a B5a B6a B7a .
 *   stage 2: B1a F4b B2a F5b B3a F6b B4b F7b B5b .   B6b .   B7b B4a B5a B6a B7a .   .
 *   stage 3: F6a B2a F7a B3a F4b B4b F5b B5b F6b B6b F7b B7b B4a B5a B6a B7a .   .   .
 *
 * ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, sec. 2.1): each backward is
 * split in two. B computes the gradient of the stage's input, the one thing stage s-1 waits for;
 * W computes the gradients of the stage's parameters, which nobody waits for until the optimizer
 * step. F and B keep 1F1B's order; stage s runs W of micro-batch j after B of j + s (the last
 * stage runs W right after B, the first defers p - 1 of them), the rest after its last B. Drawn
 * with tF = tB = tW = 1 (Wi: weight gradient of micro-batch i), so 1F1B above is the same work
 * with each backward two units:
 *   stage 0: F0 F1 F2 F3 .  .  .  B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7
 *   stage 1: .  F0 F1 F2 .  .  B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7
 *   stage 2: .  .  F0 F1 .  B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7
 *   stage 3: .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7
 * The first gradient reaches stage s after the p - s - 1 downstream Bs alone, not B + W each,
 * and the cool-down, where 1F1B's stage s waits for its last gradients, is filled by the
 * deferred Ws.
 *
 * Bubble. GPipe and 1F1B take the same time: every stage idles while the pipeline fills (p-1
 * forwards) and drains (p-1 backwards), so with forward time tf and backward time tb the step
 * takes (m + p - 1)(tf + tb) and each stage is idle (p - 1)(tf + tb) of it: the bubble fraction
 * is (p - 1) / (m + p - 1), small only when m >> p. Interleaving v chunks fills and drains the
 * pipeline in steps of a chunk, 1/v of a stage, so the idle time shrinks v-fold and the bubble is
 * (p - 1) / (v·m + p - 1): 6 of 38 units above against 12 of 44 for 1F1B (whose boxes are two
 * units of these). The price is v times as many messages. With the backward split into B and W
 * (1F1B's backward is tB + tW), 1F1B idles (p - 1)(tF + tB + tW) per stage and ZB-H1
 * (p - 1)(tF + tB - tW) (Qi et al., sec. 2.1, for m >= p): with tF = tB = tW a third, bubble
 * (p - 1) / (3m + p - 1) against (p - 1) / (m + p - 1): 3 of 27 units above against 9 of 33,
 * at the same message count. (The simulator reproduces all four.)
 *
 * Memory. A stage keeps the activations of a micro-batch from its forward until its backward.
 * GPipe runs all m forwards before any backward, so every stage holds m micro-batches of
 * activations at its peak. 1F1B starts backwards as soon as the first gradient comes back:
 * stage s never holds more than p - s (at most p) micro-batches, whatever m is, so m can grow
 * to shrink the bubble without growing the activation memory. For p = 4, m = 8 above: GPipe
 * peaks at 8 micro-batches on every stage, 1F1B at 4, 3, 2, 1 on stages 0 .. 3 (the first stage,
 * which waits longest for its first gradient, holds the most). Interleaved 1F1B warms up longer:
 * rank r holds up to 2(p - r - 1) + (v - 1)p + 1 chunk micro-batches of 1/v of a stage each,
 * 11, 9, 7, 5 halves above, i.e. 5.5, 4.5, 3.5, 2.5 micro-batches: more than 1F1B, still not m.
 * ZB-H1 holds 1F1B's p - s micro-batches between F and B; counted until W (what B leaves for
 * W: the saved tensors of the nodes that owe a weight gradient, autograd/split_backward.h),
 * stage s holds up to (p - s) + s = p, the most 1F1B holds on any stage (stage 0): 4 on every
 * stage above.
 * SimulationResult reports both counts.
 *
 * Deadlock freedom. With blocking send/recv a message completes only when both sides reach it
 * (MPI may send small messages eagerly, but large ones wait for the matching receive: the
 * "rendezvous" model, which simulate() uses by default). With one stage per rank the stages form
 * a chain, so a blocked rank waits on a neighbour, and following the waits along the chain must
 * end at two neighbours waiting on each other, each at its next message of their link. If both
 * sides of every link do the link's messages in the same order, those are the two halves of one
 * message, which then completes: no deadlock. So the order on each link is all that matters, and
 * it is built to agree: between two compute actions (F or B; W has no messages and goes just
 * before the gap's first receive, whose wait it fills) a rank does the activation messages of that
 * gap before the gradient messages, on both sides of every link (stage s+1 receives the
 * activation of its next forward before it sends the gradient of the backward it just did, while
 * stage s sends that activation before it waits for that gradient; the naive order, send the
 * gradient first, deadlocks: both ranks send, neither receives). check_pairwise_order() verifies
 * the agreement for every pair and simulate() runs the whole schedule; the tests do both for many
 * (p, m). Interleaved chunks break the chain: activations go from rank p-1 back to rank 0, so the
 * ranks form a ring, where two neighbours can both be sending, each waiting for the other to
 * receive, and blocking sends deadlock. Posted sends (the Eager model) cannot block, so there
 * only each direction's order has to agree; PipelineStageRunner posts every send, and
 * simulate(..., Eager) checks interleaved schedules.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::distributed::pipeline {

// Compute actions (Forward, Backward; zero-bubble splits Backward into BackwardInput and
// BackwardWeight) and the blocking messages around them.
enum class ActionType {
  Forward,
  Backward,
  SendActivation,
  RecvActivation,
  SendGrad,
  RecvGrad,
  BackwardInput,   // "B" of zero-bubble: the gradient of the stage's input only (what goes upstream)
  BackwardWeight,  // "W": the gradients of the stage's parameters; no messages, any time after B
};

// One step of one rank. `stage` is the model stage the action belongs to (stage g runs on rank
// g mod p: the rank's own stage unless interleaved); `peer` is the other rank of a send/recv, -1
// for compute actions. A message is identified by its micro-batch and the model-stage boundary
// it crosses (two ranks share several boundaries when interleaved): the executor tags by the
// boundary, and messages of one tag between two ranks keep their order.
struct Action {
  ActionType type;
  int64_t microbatch;
  int64_t stage;
  int peer;

  bool is_compute() const {
    return type == ActionType::Forward || type == ActionType::Backward || type == ActionType::BackwardInput ||
           type == ActionType::BackwardWeight;
  }
  // The backward that sends the input's gradient upstream: Backward, or zero-bubble's B.
  bool is_input_backward() const { return type == ActionType::Backward || type == ActionType::BackwardInput; }
  bool is_send() const { return type == ActionType::SendActivation || type == ActionType::SendGrad; }
  bool is_recv() const { return type == ActionType::RecvActivation || type == ActionType::RecvGrad; }

  // "F3", "B3" (Backward or BackwardInput), "W3", "send act 3 -> rank 2", "recv act 3 <- rank 0",
  // "send grad 3 -> rank 0", "recv grad 3 <- rank 2".
  std::string to_string() const;

  bool operator==(const Action&) const = default;
};

// schedule[r]: the actions of rank r, in the order it performs them.
using Schedule = std::vector<std::vector<Action>>;

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1 };
// "GPipe", "1F1B", "interleaved 1F1B", "ZB-H1".
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
//   ZB-H1 (Qi et al., 2024): 1F1B's order of forwards and input-gradient backwards (BackwardInput),
//     each backward's weight half (BackwardWeight) of micro-batch j on stage s deferred until
//     after the input half of micro-batch j + s, the last s ones after the stage's last B.
// Throws loom::Error if stages < 1, microbatches < 1, chunks != 1 for GPipe, 1F1B or ZB-H1, or (for
// interleaved) chunks < 1, chunks > 1 on one rank, or m not a multiple of p.
Schedule make_schedule(ScheduleKind kind, int64_t stages, int64_t microbatches, int64_t chunks = 1);

// The compute actions of each rank, one line per stage: "stage 0: F0 F1 B0 F2 B1 B2\n...". In an
// interleaved schedule each label ends with its chunk's letter: "F3a" is micro-batch 3 through
// the rank's first chunk, "F3b" through its second.
std::string format_schedule(const Schedule& schedule);
// That label of one compute action on a schedule of `ranks` ranks.
std::string compute_label(const Action& a, int64_t ranks, bool interleaved);

}  // namespace loom::distributed::pipeline
