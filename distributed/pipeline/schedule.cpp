/*
 * The pipeline schedules (GPipe, 1F1B), built as per-rank action lists, and the simulator that
 * runs the lists together to check them. See schedule.h for the pictures and the reasoning.
 *
 * Building a schedule has two steps: the order of the compute actions on each stage (the part
 * that differs between GPipe and 1F1B, and that the textbook pictures show), then the messages
 * around them, placed by one rule shared by both schedules (with_messages).
 */
#include "distributed/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace loom::distributed::pipeline {
namespace {

bool is_activation_message(ActionType type) {
  return type == ActionType::SendActivation || type == ActionType::RecvActivation;
}

// The receive that matches a send of `type` (and the converse).
ActionType matching_type(ActionType type) {
  switch (type) {
    case ActionType::SendActivation:
      return ActionType::RecvActivation;
    case ActionType::RecvActivation:
      return ActionType::SendActivation;
    case ActionType::SendGrad:
      return ActionType::RecvGrad;
    case ActionType::RecvGrad:
      return ActionType::SendGrad;
    default:
      return type;
  }
}

// The model-stage boundary a message crosses: an activation goes from stage g to g + 1 and a
// gradient from g + 1 to g, both across boundary g. Two messages are the halves of one when they
// have matching types, the same micro-batch and the same boundary (with one stage per rank the
// boundary is implied by the ranks; with interleaved chunks two ranks share several boundaries).
int64_t boundary_of(const Action& a) {
  switch (a.type) {
    case ActionType::SendActivation:
    case ActionType::RecvGrad:
      return a.stage;
    default:
      return a.stage - 1;
  }
}

bool halves_of_one_message(const Action& a, const Action& b) {
  return matching_type(a.type) == b.type && a.microbatch == b.microbatch && boundary_of(a) == boundary_of(b);
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
std::vector<Action> with_messages(const std::vector<Action>& computes, int64_t p, int64_t model_stages) {
  std::vector<Action> out;
  std::vector<Action> gap;  // messages of the current gap
  auto flush = [&] {
    std::stable_sort(gap.begin(), gap.end(), [](const Action& a, const Action& b) {
      return is_activation_message(a.type) && !is_activation_message(b.type);
    });
    out.insert(out.end(), gap.begin(), gap.end());
    gap.clear();
  };
  for (const Action& c : computes) {
    const int64_t stage = c.stage;
    const int prev = static_cast<int>((stage - 1 + p) % p);
    const int next = static_cast<int>((stage + 1) % p);
    const bool first = stage == 0;
    const bool last = stage == model_stages - 1;
    // What the next compute action needs.
    if (c.type == ActionType::Forward && !first)
      gap.push_back({ActionType::RecvActivation, c.microbatch, stage, prev});
    if (c.type == ActionType::Backward && !last)
      gap.push_back({ActionType::RecvGrad, c.microbatch, stage, next});
    flush();
    out.push_back(c);
    // What it produced.
    if (c.type == ActionType::Forward && !last)
      gap.push_back({ActionType::SendActivation, c.microbatch, stage, next});
    if (c.type == ActionType::Backward && !first)
      gap.push_back({ActionType::SendGrad, c.microbatch, stage, prev});
  }
  flush();
  return out;
}

void validate(const Schedule& schedule, const char* fn) {
  const int ranks = static_cast<int>(schedule.size());
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < schedule[r].size(); ++i) {
      const Action& a = schedule[r][i];
      LOOM_CHECK(a.microbatch >= 0, fn, ": rank ", r, " action #", i, " (", a.to_string(),
                 ") has negative micro-batch ", a.microbatch);
      if (a.is_compute()) {
        LOOM_CHECK(a.peer == -1, fn, ": rank ", r, " action #", i, " (", a.to_string(),
                   ") is a compute action and must have peer -1, got ", a.peer);
      } else {
        LOOM_CHECK(a.peer >= 0 && a.peer < ranks && a.peer != r, fn, ": rank ", r, " action #", i, " (",
                   a.to_string(), ") has peer ", a.peer, ", expected another rank in [0, ", ranks, ")");
      }
    }
  }
}

}  // namespace

std::string Action::to_string() const {
  const std::string mb = std::to_string(microbatch);
  const std::string rank = std::to_string(peer);
  switch (type) {
    case ActionType::Forward:
      return "F" + mb;
    case ActionType::Backward:
      return "B" + mb;
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

namespace {

bool has_chunks(const Schedule& schedule) {
  const auto ranks = static_cast<int64_t>(schedule.size());
  for (const auto& actions : schedule)
    for (const Action& a : actions)
      if (a.stage >= ranks) return true;
  return false;
}

}  // namespace

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

std::vector<std::string> check_pairwise_order(const Schedule& schedule) {
  validate(schedule, "check_pairwise_order");
  const int ranks = static_cast<int>(schedule.size());
  // messages[r][q]: rank r's sends to and receives from rank q, in r's order.
  std::vector<std::map<int, std::vector<Action>>> messages(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (const Action& x : schedule[r]) {
      if (!x.is_compute()) messages[r][x.peer].push_back(x);
    }
  }
  std::vector<std::string> mismatches;
  const std::vector<Action> none;
  for (int a = 0; a < ranks; ++a) {
    for (int b = a + 1; b < ranks; ++b) {
      // All messages of the link a <-> b, both directions, in the order each side does them:
      // the k-th on a must be the counterpart of the k-th on b. Comparing each direction alone
      // would miss two ranks that both send first (each waits for the other to receive).
      const auto ia = messages[a].find(b);
      const auto ib = messages[b].find(a);
      const std::vector<Action>& on_a = ia == messages[a].end() ? none : ia->second;
      const std::vector<Action>& on_b = ib == messages[b].end() ? none : ib->second;
      const size_t n = std::min(on_a.size(), on_b.size());
      std::ostringstream os;
      for (size_t i = 0; i < n; ++i) {
        if (!halves_of_one_message(on_a[i], on_b[i])) {
          os << "rank " << a << " <-> rank " << b << ": message #" << i << " is " << on_a[i].to_string()
             << " on rank " << a << " but " << on_b[i].to_string() << " on rank " << b;
          break;
        }
      }
      if (os.str().empty() && on_a.size() != on_b.size()) {
        os << "rank " << a << " <-> rank " << b << ": rank " << a << " has " << on_a.size()
           << " messages with rank " << b << " but rank " << b << " has " << on_b.size() << " with rank "
           << a;
      }
      if (!os.str().empty()) mismatches.push_back(os.str());
    }
  }
  return mismatches;
}

SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options) {
  validate(schedule, "simulate");
  LOOM_CHECK(options.forward_cost >= 1 && options.backward_cost >= 1,
             "simulate: expected forward_cost >= 1 and backward_cost >= 1, got ", options.forward_cost,
             " and ", options.backward_cost);
  const int ranks = static_cast<int>(schedule.size());
  SimulationResult result;
  result.timeline.resize(ranks);
  std::vector<size_t> pc(ranks, 0);
  std::vector<int64_t> clock(ranks, 0);
  result.busy_time.assign(ranks, 0);
  // Eager model: messages in flight from src to dst, with the time they were sent.
  std::map<std::pair<int, int>, std::deque<std::pair<Action, int64_t>>> in_flight;
  std::vector<std::string> mismatch;  // Eager: a receive met another message than it expects

  auto done = [&](int r) { return pc[r] >= schedule[r].size(); };
  auto matches = [](const Action& send_or_recv, const Action& other, int rank) {
    return halves_of_one_message(send_or_recv, other) && other.peer == rank;
  };
  auto finish = [&](int r, int64_t start, int64_t end) {
    result.timeline[r].push_back({schedule[r][pc[r]], start, end});
    clock[r] = end;
    ++pc[r];
  };

  // Each pass advances every rank as far as it can go; the times do not depend on the order in
  // which ranks are visited (an action ends at the max of its inputs' times plus its cost).
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      while (!done(r)) {
        const Action& a = schedule[r][pc[r]];
        if (a.is_compute()) {
          const int64_t cost = a.type == ActionType::Forward ? options.forward_cost : options.backward_cost;
          result.busy_time[r] += cost;
          finish(r, clock[r], clock[r] + cost);
        } else if (options.comm == CommModel::Rendezvous) {
          // Both ranks must stand at the matching pair; then both continue from the later time.
          const int q = a.peer;
          if (done(q) || !matches(a, schedule[q][pc[q]], r)) break;
          const int64_t t = std::max(clock[r], clock[q]);
          finish(q, clock[q], t);
          finish(r, clock[r], t);
        } else if (a.is_send()) {
          in_flight[{r, a.peer}].push_back({a, clock[r]});
          finish(r, clock[r], clock[r]);
        } else {
          auto& queue = in_flight[{a.peer, r}];
          if (queue.empty()) break;
          const auto [sent, sent_at] = queue.front();
          if (!matches(a, sent, r)) {
            mismatch.push_back("rank " + std::to_string(r) + " at #" + std::to_string(pc[r]) + " " +
                               a.to_string() + " got " + sent.to_string() + " from rank " +
                               std::to_string(a.peer));
            break;
          }
          queue.pop_front();
          finish(r, clock[r], std::max(clock[r], sent_at));
        }
        progress = true;
      }
      if (!mismatch.empty()) break;
    }
    if (!mismatch.empty()) break;
  }

  std::ostringstream report;
  for (int r = 0; r < ranks; ++r) {
    if (done(r)) continue;
    result.blocked.push_back({r, static_cast<int64_t>(pc[r]), schedule[r][pc[r]]});
    report << (result.blocked.size() == 1 ? "deadlock: " : "; ") << "rank " << r << " blocked at #" << pc[r]
           << " " << schedule[r][pc[r]].to_string();
  }
  for (const std::string& m : mismatch) report << "; message mismatch: " << m;
  for (const auto& [link, queue] : in_flight) {
    if (!queue.empty() && result.blocked.empty()) {
      report << (report.str().empty() ? "" : "; ") << "rank " << link.first << " -> rank " << link.second
             << ": " << queue.size() << " message(s) never received";
    }
  }
  result.deadlock_report = report.str();
  result.deadlocked = !result.deadlock_report.empty();

  for (int r = 0; r < ranks; ++r) result.total_time = std::max(result.total_time, clock[r]);
  for (int r = 0; r < ranks; ++r) {
    result.idle_time.push_back(result.total_time - result.busy_time[r]);
    result.bubble_fraction.push_back(result.total_time == 0 ? 0.0
                                                            : static_cast<double>(result.idle_time[r]) /
                                                                  static_cast<double>(result.total_time));
    // Activations live from a micro-batch's forward to its backward on this stage.
    int64_t live = 0, peak = 0;
    for (const Action& a : schedule[r]) {
      if (a.type == ActionType::Forward) peak = std::max(peak, ++live);
      if (a.type == ActionType::Backward) --live;
    }
    result.peak_live_activations.push_back(peak);
  }
  return result;
}

std::string format_timeline(const SimulationResult& result) {
  const auto ranks = static_cast<int64_t>(result.timeline.size());
  bool interleaved = false;
  for (const auto& actions : result.timeline)
    for (const TimedAction& t : actions) interleaved = interleaved || t.action.stage >= ranks;
  auto label = [&](const Action& a) { return compute_label(a, ranks, interleaved); };
  size_t width = 1;
  for (const auto& actions : result.timeline) {
    for (const TimedAction& t : actions) {
      if (t.action.is_compute()) width = std::max(width, label(t.action).size());
    }
  }
  std::ostringstream os;
  for (size_t r = 0; r < result.timeline.size(); ++r) {
    std::vector<std::string> cells(result.total_time, ".");
    for (const TimedAction& t : result.timeline[r]) {
      if (!t.action.is_compute()) continue;
      for (int64_t u = t.start; u < t.end; ++u) cells[u] = label(t.action);
    }
    std::string line = "stage " + std::to_string(r) + ":";
    for (const std::string& c : cells) line += " " + c + std::string(width - c.size(), ' ');
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
  }
  return os.str();
}

}  // namespace loom::distributed::pipeline
