/*
 * Building the pipeline schedules (GPipe, 1F1B, interleaved 1F1B, ZB-H1) as per-rank action lists; see
 * schedule.h for the pictures and the reasoning, and schedule_simulator.cpp for running them.
 *
 * Building a schedule has two steps: the order of the compute actions on each rank (the part
 * that differs between the schedules, and that the textbook pictures show), then the messages
 * around them, placed by one rule shared by all four (with_messages).
 */
#include "distributed/pipeline/schedule.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace loom::distributed::pipeline {
namespace {

bool is_activation_message(ActionType type) {
  return type == ActionType::SendActivation || type == ActionType::RecvActivation;
}

Action compute(ActionType type, int64_t microbatch, int64_t stage) {
  return {type, microbatch, stage, -1};
}

// GPipe on one stage: F0 .. F(m-1), then B(m-1) .. B0.
std::vector<Action> gpipe_compute_order(int64_t stage, int64_t m) {
  std::vector<Action> order;
  for (int64_t i = 0; i < m; ++i) order.push_back(compute(ActionType::Forward, i, stage));
  for (int64_t i = m - 1; i >= 0; --i) order.push_back(compute(ActionType::Backward, i, stage));
  return order;
}

// 1F1B on one stage. The warm-up fills the pipeline: stage s must have sent p - s - 1
// micro-batches downstream before the first gradient can come back to it, so it runs that many
// forwards first. Then every backward frees the activations of one micro-batch and the next
// forward takes their place (steady state); the cool-down drains the remaining backwards.
std::vector<Action> one_f_one_b_compute_order(int64_t stage, int64_t p, int64_t m) {
  const int64_t warmup = std::min(p - stage - 1, m);
  std::vector<Action> order;
  for (int64_t i = 0; i < warmup; ++i) order.push_back(compute(ActionType::Forward, i, stage));
  for (int64_t i = 0; i < m - warmup; ++i) {
    order.push_back(compute(ActionType::Forward, i + warmup, stage));
    order.push_back(compute(ActionType::Backward, i, stage));
  }
  for (int64_t i = m - warmup; i < m; ++i) order.push_back(compute(ActionType::Backward, i, stage));
  return order;
}

// ZB-H1 on one stage (Qi et al., 2024, sec. 2.1): 1F1B with each backward split into B (the
// input's gradient, which stage s-1 waits for) and W (the parameters' gradients, which nobody
// waits for). Forwards and Bs keep 1F1B's order, so the stage holds 1F1B's p - s micro-batches
// between F and B; W of micro-batch j waits until after B of j + s. Stage s's first gradient
// arrives after the p - s - 1 downstream Bs alone (W no longer sits on that path), and the s
// deferred Ws fill the cool-down, where stage s would idle waiting for its last gradients; the
// last stage defers none: it runs B and W back to back. Counted from F to W, stage s holds up
// to (p - s) + s = p micro-batches: the most any 1F1B stage (stage 0) holds.
std::vector<Action> zero_bubble_h1_compute_order(int64_t stage, int64_t p, int64_t m) {
  std::vector<Action> order;
  int64_t next_weight = 0;  // the oldest micro-batch whose W is still to come
  for (const Action& a : one_f_one_b_compute_order(stage, p, m)) {
    if (a.type == ActionType::Forward) {
      order.push_back(a);
      continue;
    }
    order.push_back(compute(ActionType::BackwardInput, a.microbatch, stage));
    if (a.microbatch - next_weight >= stage)
      order.push_back(compute(ActionType::BackwardWeight, next_weight++, stage));
  }
  while (next_weight < m) order.push_back(compute(ActionType::BackwardWeight, next_weight++, stage));
  return order;
}

// Interleaved 1F1B on one rank (Narayanan et al., 2021, sec. 2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving). The model is cut into p·v stages and rank r
// holds v of them, "chunks" r, r + p, r + 2p, ...: a micro-batch crosses every rank v times, so a
// rank gets work after 1/v of a stage's time instead of a whole stage's, and the fill and drain
// (the bubble) shrink by v. The rank goes through m·v "virtual micro-batches" in groups of p:
// forwards take p micro-batches through chunk 0, the same p through chunk 1, ..., then the next p;
// backwards go through the chunks in reverse. The warm-up is what must be in flight before the
// first gradient can come back: 2(p - r - 1) forwards for the two trips along the ranks the
// last chunk's gradient and its activation make, plus (v - 1)·p for the earlier chunks.
std::vector<Action> interleaved_compute_order(int64_t rank, int64_t p, int64_t m, int64_t v) {
  const int64_t total = m * v;
  auto chunk_of = [&](int64_t k, bool forward) {
    const int64_t c = (k % (p * v)) / p;
    return forward ? c : v - 1 - c;
  };
  auto microbatch_of = [&](int64_t k) { return (k / (p * v)) * p + k % p; };
  auto forward = [&](int64_t k) {
    return compute(ActionType::Forward, microbatch_of(k), chunk_of(k, true) * p + rank);
  };
  auto backward = [&](int64_t k) {
    return compute(ActionType::Backward, microbatch_of(k), chunk_of(k, false) * p + rank);
  };
  // With m == p every virtual micro-batch is in flight before the first backward can start.
  const int64_t warmup = m == p ? total : std::min(total, 2 * (p - rank - 1) + (v - 1) * p);
  std::vector<Action> order;
  for (int64_t k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(forward(k + warmup));
    order.push_back(backward(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
}

// Adds the messages to one stage's compute order. In each gap between two compute actions the
// rank sends what the previous action produced and receives what the next one needs; within the
// gap, activation messages go before gradient messages (stable otherwise: send, then receive).
// Only the gap "backward j | forward i" changes order: the rank receives activation i from s-1
// before sending gradient j to s-1 — because stage s-1, in its gap "forward i | backward j",
// sends activation i before waiting for gradient j. Both sides of each link thus see the same
// message order, which is what makes blocking send/recv deadlock-free (schedule.h).
//
// With several chunks per rank (interleaved), each compute action names its model stage g; its
// neighbours are stages g - 1 and g + 1 of the p·v, on ranks (g - 1) mod p and (g + 1) mod p.
//
// Zero-bubble's W actions have no messages and do not end a gap: the gap runs from one F or B to
// the next, and its Ws go just before its first receive. The sends before it leave at once (the
// neighbour may be waiting for them) and the Ws fill the time the receive would wait.
std::vector<Action> with_messages(const std::vector<Action>& computes, int64_t p, int64_t model_stages) {
  std::vector<Action> out;
  std::vector<Action> gap;      // messages of the current gap
  std::vector<Action> weights;  // its W actions
  auto flush = [&] {
    std::stable_sort(gap.begin(), gap.end(), [](const Action& a, const Action& b) {
      return is_activation_message(a.type) && !is_activation_message(b.type);
    });
    const auto first_recv = std::find_if(gap.begin(), gap.end(), [](const Action& a) { return a.is_recv(); });
    out.insert(out.end(), gap.begin(), first_recv);
    out.insert(out.end(), weights.begin(), weights.end());
    out.insert(out.end(), first_recv, gap.end());
    gap.clear();
    weights.clear();
  };
  for (const Action& c : computes) {
    if (c.type == ActionType::BackwardWeight) {
      weights.push_back(c);
      continue;
    }
    const int64_t stage = c.stage;
    const int prev = static_cast<int>((stage - 1 + p) % p);
    const int next = static_cast<int>((stage + 1) % p);
    const bool first = stage == 0;
    const bool last = stage == model_stages - 1;
    // What the next compute action needs.
    if (c.type == ActionType::Forward && !first)
      gap.push_back({ActionType::RecvActivation, c.microbatch, stage, prev});
    if (c.is_input_backward() && !last)
      gap.push_back({ActionType::RecvGrad, c.microbatch, stage, next});
    flush();
    out.push_back(c);
    // What it produced.
    if (c.type == ActionType::Forward && !last)
      gap.push_back({ActionType::SendActivation, c.microbatch, stage, next});
    if (c.is_input_backward() && !first)
      gap.push_back({ActionType::SendGrad, c.microbatch, stage, prev});
  }
  flush();
  return out;
}

// Whether some action belongs to a model stage beyond the ranks: the schedule has chunks.
bool has_chunks(const Schedule& schedule) {
  const auto ranks = static_cast<int64_t>(schedule.size());
  for (const auto& actions : schedule)
    for (const Action& a : actions)
      if (a.stage >= ranks) return true;
  return false;
}

}  // namespace

std::string Action::to_string() const {
  const std::string mb = std::to_string(microbatch);
  const std::string rank = std::to_string(peer);
  switch (type) {
    case ActionType::Forward:
      return "F" + mb;
    case ActionType::Backward:
    case ActionType::BackwardInput:
      return "B" + mb;
    case ActionType::BackwardWeight:
      return "W" + mb;
    case ActionType::SendActivation:
      return "send act " + mb + " -> rank " + rank;
    case ActionType::RecvActivation:
      return "recv act " + mb + " <- rank " + rank;
    case ActionType::SendGrad:
      return "send grad " + mb + " -> rank " + rank;
    case ActionType::RecvGrad:
      return "recv grad " + mb + " <- rank " + rank;
  }
  return "?";
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe:
      return "GPipe";
    case ScheduleKind::OneFOneB:
      return "1F1B";
    case ScheduleKind::Interleaved1F1B:
      return "interleaved 1F1B";
    case ScheduleKind::ZeroBubbleH1:
      return "ZB-H1";
  }
  return "?";
}

Schedule make_schedule(ScheduleKind kind, int64_t stages, int64_t microbatches, int64_t chunks) {
  const char* name = schedule_kind_name(kind);
  LOOM_CHECK(stages >= 1, "make_schedule(", name, "): expected stages >= 1, got ", stages);
  LOOM_CHECK(microbatches >= 1, "make_schedule(", name, "): expected microbatches >= 1, got ", microbatches);
  if (kind != ScheduleKind::Interleaved1F1B) {
    LOOM_CHECK(chunks == 1, "make_schedule(", name, "): one model chunk per rank, got ", chunks,
               " (several are the interleaved schedule's)");
  } else {
    LOOM_CHECK(chunks >= 1, "make_schedule(", name, "): expected chunks >= 1, got ", chunks);
    LOOM_CHECK(chunks == 1 || stages >= 2, "make_schedule(", name, "): ", chunks,
               " chunks on 1 rank would send to itself; interleaving needs at least 2 ranks");
    LOOM_CHECK(microbatches % stages == 0, "make_schedule(", name, "): the micro-batches (", microbatches,
               ") go through the chunks in groups of one per rank, so they must be a multiple of the ", stages,
               " ranks");
  }
  Schedule schedule;
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<Action> computes;
    if (kind == ScheduleKind::GPipe)
      computes = gpipe_compute_order(s, microbatches);
    else if (kind == ScheduleKind::OneFOneB)
      computes = one_f_one_b_compute_order(s, stages, microbatches);
    else if (kind == ScheduleKind::ZeroBubbleH1)
      computes = zero_bubble_h1_compute_order(s, stages, microbatches);
    else
      computes = interleaved_compute_order(s, stages, microbatches, chunks);
    schedule.push_back(with_messages(computes, stages, stages * chunks));
  }
  return schedule;
}

std::string compute_label(const Action& a, int64_t ranks, bool interleaved) {
  if (!interleaved) return a.to_string();
  return a.to_string() + static_cast<char>('a' + a.stage / ranks);
}

std::string format_schedule(const Schedule& schedule) {
  std::ostringstream os;
  const bool interleaved = has_chunks(schedule);
  for (size_t r = 0; r < schedule.size(); ++r) {
    os << "stage " << r << ":";
    for (const Action& a : schedule[r]) {
      if (a.is_compute()) os << " " << compute_label(a, static_cast<int64_t>(schedule.size()), interleaved);
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace loom::distributed::pipeline
