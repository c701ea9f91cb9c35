/*
 * Checking and simulating pipeline schedules (see schedule_simulator.h): the ranks' action lists
 * played together in virtual time.
 */
#include "distributed/pipeline/schedule_simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace loom::distributed::pipeline {
namespace {

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


// One run of simulate(): where each rank stands in its list, its clock, and (Eager) the messages
// posted and not yet received.
class Simulation {
 public:
  Simulation(const Schedule& schedule, const SimulationOptions& options)
      : schedule_(schedule), options_(options), ranks_(static_cast<int>(schedule.size())), pc_(ranks_, 0),
        clock_(ranks_, 0) {
    result_.timeline.resize(ranks_);
    result_.busy_time.assign(ranks_, 0);
  }

  SimulationResult run() {
    // Each pass advances every rank as far as it can go; the times do not depend on the order in
    // which ranks are visited (an action ends at the max of its inputs' times plus its cost).
    bool progress = true;
    while (progress && mismatch_.empty()) {
      progress = false;
      for (int r = 0; r < ranks_ && mismatch_.empty(); ++r)
        while (!done(r) && advance(r)) progress = true;
    }
    report_what_went_wrong();
    add_times_and_memory();
    return std::move(result_);
  }

 private:
  bool done(int r) const { return pc_[r] >= schedule_[r].size(); }

  int64_t cost_of(ActionType type) const {
    switch (type) {
      case ActionType::Forward:
        return options_.forward_cost;
      case ActionType::BackwardInput:
        return options_.input_backward_cost;
      case ActionType::BackwardWeight:
        return options_.weight_backward_cost;
      default:
        return options_.backward_cost;
    }
  }

  static bool matches(const Action& send_or_recv, const Action& other, int rank) {
    return halves_of_one_message(send_or_recv, other) && other.peer == rank;
  }

  void finish(int r, int64_t start, int64_t end) {
    result_.timeline[r].push_back({schedule_[r][pc_[r]], start, end});
    clock_[r] = end;
    ++pc_[r];
  }

  // Runs rank r's next action if it can run now. False when it waits for its peer, or (Eager)
  // when its receive meets another message than it expects (recorded in mismatch_).
  bool advance(int r) {
    const Action& a = schedule_[r][pc_[r]];
    if (a.is_compute()) {
      const int64_t cost = cost_of(a.type);
      result_.busy_time[r] += cost;
      finish(r, clock_[r], clock_[r] + cost);
    } else if (options_.comm == CommModel::Rendezvous) {
      // Both ranks must stand at the matching pair; then both continue from the later time.
      const int q = a.peer;
      if (done(q) || !matches(a, schedule_[q][pc_[q]], r)) return false;
      const int64_t t = std::max(clock_[r], clock_[q]);
      finish(q, clock_[q], t);
      finish(r, clock_[r], t);
    } else if (a.is_send()) {
      in_flight_[{r, a.peer}].push_back({a, clock_[r]});
      finish(r, clock_[r], clock_[r]);
    } else {
      auto& queue = in_flight_[{a.peer, r}];
      if (queue.empty()) return false;
      const auto [sent, sent_at] = queue.front();
      if (!matches(a, sent, r)) {
        mismatch_.push_back("rank " + std::to_string(r) + " at #" + std::to_string(pc_[r]) + " " +
                            a.to_string() + " got " + sent.to_string() + " from rank " +
                            std::to_string(a.peer));
        return false;
      }
      queue.pop_front();
      finish(r, clock_[r], std::max(clock_[r], sent_at));
    }
    return true;
  }

  // The ranks that did not finish, the mismatched receives, and (Eager) the messages never
  // received, as result_.blocked and result_.deadlock_report.
  void report_what_went_wrong() {
    std::ostringstream report;
    for (int r = 0; r < ranks_; ++r) {
      if (done(r)) continue;
      result_.blocked.push_back({r, static_cast<int64_t>(pc_[r]), schedule_[r][pc_[r]]});
      report << (result_.blocked.size() == 1 ? "deadlock: " : "; ") << "rank " << r << " blocked at #" << pc_[r]
             << " " << schedule_[r][pc_[r]].to_string();
    }
    for (const std::string& m : mismatch_) report << "; message mismatch: " << m;
    for (const auto& [link, queue] : in_flight_) {
      if (!queue.empty() && result_.blocked.empty()) {
        report << (report.str().empty() ? "" : "; ") << "rank " << link.first << " -> rank " << link.second
               << ": " << queue.size() << " message(s) never received";
      }
    }
    result_.deadlock_report = report.str();
    result_.deadlocked = !result_.deadlock_report.empty();
  }

  void add_times_and_memory() {
    for (int r = 0; r < ranks_; ++r) result_.total_time = std::max(result_.total_time, clock_[r]);
    for (int r = 0; r < ranks_; ++r) {
      result_.idle_time.push_back(result_.total_time - result_.busy_time[r]);
      result_.bubble_fraction.push_back(result_.total_time == 0 ? 0.0
                                                                : static_cast<double>(result_.idle_time[r]) /
                                                                      static_cast<double>(result_.total_time));
      // Activations live from a micro-batch's forward to its (input) backward on this stage, and
      // its graph until the weight gradient too.
      int64_t live = 0, peak = 0, until_weight = 0, peak_until_weight = 0;
      for (const Action& a : schedule_[r]) {
        if (a.type == ActionType::Forward) {
          peak = std::max(peak, ++live);
          peak_until_weight = std::max(peak_until_weight, ++until_weight);
        }
        if (a.is_input_backward()) --live;
        if (a.type == ActionType::Backward || a.type == ActionType::BackwardWeight) --until_weight;
      }
      result_.peak_live_activations.push_back(peak);
      result_.peak_live_until_weight_grad.push_back(peak_until_weight);
    }
  }

  const Schedule& schedule_;
  const SimulationOptions& options_;
  const int ranks_;
  std::vector<size_t> pc_;
  std::vector<int64_t> clock_;
  // Eager model: messages in flight from src to dst, with the time they were sent.
  std::map<std::pair<int, int>, std::deque<std::pair<Action, int64_t>>> in_flight_;
  std::vector<std::string> mismatch_;  // Eager: a receive met another message than it expects
  SimulationResult result_;
};

}  // namespace

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
  LOOM_CHECK(options.forward_cost >= 1 && options.backward_cost >= 1 && options.input_backward_cost >= 1 &&
                 options.weight_backward_cost >= 1,
             "simulate: expected every cost >= 1, got forward_cost ", options.forward_cost,
             ", backward_cost ", options.backward_cost, ", input_backward_cost ", options.input_backward_cost,
             ", weight_backward_cost ", options.weight_backward_cost);
  return Simulation(schedule, options).run();
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
