/*
 * The pipeline schedules as data (distributed/pipeline/schedule.h, simulated by
 * schedule_simulator.h): GPipe and 1F1B for many (stages p, micro-batches m), and interleaved
 * 1F1B for many (p, m, chunks v), checked against the definitions rather than against the code
 * that builds them:
 *   - hand-written action lists for small cases (p = 2, m = 3; p = 1) and the pictures of
 *     schedule.h for p = 4, m = 8 (v = 2) as literal strings;
 *   - structure: one forward and one backward of every micro-batch on every stage, messages only
 *     between neighbouring stages, the same message order on both sides of every link;
 *   - the simulator: no deadlock under strict rendezvous (and eager) send/recv, the data
 *     dependencies hold in simulated time, the step takes (m + p - 1)(tf + tb), so the bubble is
 *     the theory's (p - 1) / (m + p - 1), and the peak live activations are m (GPipe) and
 *     min(p - s, m) (1F1B);
 *   - ZB-H1: one F, B and W of every micro-batch per stage (W after B, W without messages),
 *     deadlock-free under both send models, 1F1B's live micro-batches until B (and at most p
 *     until W), and the bubble (p - 1)(tF + tB - tW) of Qi et al. for tF = tB = tW, below
 *     1F1B's (p - 1)(tF + tB + tW);
 *   - negative controls: broken schedules are reported (deadlock, message mismatch);
 *   - error paths.
 * Pure logic: the MPI main runs it on every rank, each rank checks the same things.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "distributed/pipeline/schedule_simulator.h"

namespace loom::distributed::pipeline {
namespace {

const int64_t kStages[] = {1, 2, 3, 4, 8};
const int64_t kMicrobatches[] = {1, 2, 4, 8, 16};
const ScheduleKind kKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB};

std::vector<std::string> strings(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) out.push_back(a.to_string());
  return out;
}

// Runs check(kind, p, m) for every schedule kind, stage count and micro-batch count above, with
// the three captured for the failure message.
template <class Check>
void for_each_schedule(Check&& check) {
  for (ScheduleKind kind : kKinds) {
    for (int64_t p : kStages) {
      for (int64_t m : kMicrobatches) {
        CAPTURE(schedule_kind_name(kind));
        CAPTURE(p);
        CAPTURE(m);
        check(kind, p, m);
      }
    }
  }
}

// The timed compute action (type, microbatch) of one rank; fails the test if it is missing.
TimedAction find_compute(const SimulationResult& result, int64_t rank, ActionType type, int64_t microbatch) {
  for (const TimedAction& t : result.timeline[rank]) {
    if (t.action.type == type && t.action.microbatch == microbatch) return t;
  }
  FAIL("rank ", rank, " has no compute action ", static_cast<int>(type), " for micro-batch ", microbatch);
  return {};
}

TEST_CASE("pipeline schedule: action strings") {
  CHECK(Action{ActionType::Forward, 3, 0, -1}.to_string() == "F3");
  CHECK(Action{ActionType::Backward, 3, 0, -1}.to_string() == "B3");
  CHECK(Action{ActionType::SendActivation, 3, 1, 2}.to_string() == "send act 3 -> rank 2");
  CHECK(Action{ActionType::RecvActivation, 3, 1, 0}.to_string() == "recv act 3 <- rank 0");
  CHECK(Action{ActionType::SendGrad, 3, 1, 0}.to_string() == "send grad 3 -> rank 0");
  CHECK(Action{ActionType::RecvGrad, 3, 1, 2}.to_string() == "recv grad 3 <- rank 2");
}

TEST_CASE("pipeline schedule: hand-written lists for p = 2, m = 3 and p = 1") {
  // Written by hand from the definitions in schedule.h (warm-up p - s - 1; activation messages
  // before gradient messages within a gap).
  const auto one_f_one_b = make_schedule(ScheduleKind::OneFOneB, 2, 3);
  REQUIRE(one_f_one_b.size() == 2);
  CHECK(strings(one_f_one_b[0]) ==
        std::vector<std::string>{"F0", "send act 0 -> rank 1", "F1", "send act 1 -> rank 1",
                                 "recv grad 0 <- rank 1", "B0", "F2", "send act 2 -> rank 1",
                                 "recv grad 1 <- rank 1", "B1", "recv grad 2 <- rank 1", "B2"});
  CHECK(strings(one_f_one_b[1]) ==
        std::vector<std::string>{"recv act 0 <- rank 0", "F0", "B0", "recv act 1 <- rank 0",
                                 "send grad 0 -> rank 0", "F1", "B1", "recv act 2 <- rank 0",
                                 "send grad 1 -> rank 0", "F2", "B2", "send grad 2 -> rank 0"});
  for (const auto& list : one_f_one_b) {
    for (const Action& a : list) CHECK(a.stage == (&list == &one_f_one_b[0] ? 0 : 1));
  }

  const auto gpipe = make_schedule(ScheduleKind::GPipe, 2, 3);
  REQUIRE(gpipe.size() == 2);
  CHECK(strings(gpipe[0]) == std::vector<std::string>{"F0", "send act 0 -> rank 1", "F1",
                                                      "send act 1 -> rank 1", "F2", "send act 2 -> rank 1",
                                                      "recv grad 2 <- rank 1", "B2", "recv grad 1 <- rank 1",
                                                      "B1", "recv grad 0 <- rank 1", "B0"});
  CHECK(strings(gpipe[1]) == std::vector<std::string>{"recv act 0 <- rank 0", "F0", "recv act 1 <- rank 0",
                                                      "F1", "recv act 2 <- rank 0", "F2", "B2",
                                                      "send grad 2 -> rank 0", "B1", "send grad 1 -> rank 0",
                                                      "B0", "send grad 0 -> rank 0"});

  // One stage: no messages.
  CHECK(strings(make_schedule(ScheduleKind::GPipe, 1, 2)[0]) ==
        std::vector<std::string>{"F0", "F1", "B1", "B0"});
  CHECK(strings(make_schedule(ScheduleKind::OneFOneB, 1, 2)[0]) ==
        std::vector<std::string>{"F0", "B0", "F1", "B1"});
}

TEST_CASE("pipeline schedule: every micro-batch once forward and once backward per stage, neighbours only") {
  for_each_schedule([](ScheduleKind kind, int64_t p, int64_t m) {
    const Schedule schedule = make_schedule(kind, p, m);
    REQUIRE(static_cast<int64_t>(schedule.size()) == p);
    for (int64_t s = 0; s < p; ++s) {
      CAPTURE(s);
      // count[type][mb]
      std::vector<std::vector<int>> count(6, std::vector<int>(m, 0));
      for (const Action& a : schedule[s]) {
        CHECK(a.stage == s);
        REQUIRE(a.microbatch >= 0);
        REQUIRE(a.microbatch < m);
        ++count[static_cast<int>(a.type)][a.microbatch];
        if (a.type == ActionType::SendActivation || a.type == ActionType::RecvGrad)
          CHECK(a.peer == s + 1);
        if (a.type == ActionType::RecvActivation || a.type == ActionType::SendGrad)
          CHECK(a.peer == s - 1);
        if (a.is_compute()) CHECK(a.peer == -1);
      }
      for (int64_t i = 0; i < m; ++i) {
        CHECK(count[static_cast<int>(ActionType::Forward)][i] == 1);
        CHECK(count[static_cast<int>(ActionType::Backward)][i] == 1);
        // Messages: one per micro-batch across each link the stage has.
        CHECK(count[static_cast<int>(ActionType::RecvActivation)][i] == (s > 0 ? 1 : 0));
        CHECK(count[static_cast<int>(ActionType::SendGrad)][i] == (s > 0 ? 1 : 0));
        CHECK(count[static_cast<int>(ActionType::SendActivation)][i] == (s < p - 1 ? 1 : 0));
        CHECK(count[static_cast<int>(ActionType::RecvGrad)][i] == (s < p - 1 ? 1 : 0));
      }
      // Within the rank: a forward's input arrives before it, its output leaves after it;
      // the backward comes after the forward.
      auto position = [&](ActionType type, int64_t mb) {
        const auto it = std::find_if(schedule[s].begin(), schedule[s].end(), [&](const Action& a) {
          return a.type == type && a.microbatch == mb;
        });
        return it - schedule[s].begin();
      };
      for (int64_t i = 0; i < m; ++i) {
        CHECK(position(ActionType::Forward, i) < position(ActionType::Backward, i));
        if (s > 0) CHECK(position(ActionType::RecvActivation, i) < position(ActionType::Forward, i));
        if (s > 0) CHECK(position(ActionType::Backward, i) < position(ActionType::SendGrad, i));
        if (s < p - 1) CHECK(position(ActionType::Forward, i) < position(ActionType::SendActivation, i));
        if (s < p - 1) CHECK(position(ActionType::RecvGrad, i) < position(ActionType::Backward, i));
      }
    }
  });
}

TEST_CASE("pipeline schedule: deadlock-free and the same message order on both sides of every link") {
  for_each_schedule([](ScheduleKind kind, int64_t p, int64_t m) {
    const Schedule schedule = make_schedule(kind, p, m);
    CHECK(check_pairwise_order(schedule).empty());
    for (CommModel comm : {CommModel::Rendezvous, CommModel::Eager}) {
      CAPTURE(static_cast<int>(comm));
      const SimulationResult result = simulate(schedule, {1, 2, comm});
      CHECK_FALSE(result.deadlocked);
      CHECK(result.deadlock_report.empty());
      CHECK(result.blocked.empty());
      for (int64_t r = 0; r < p; ++r) CHECK(result.timeline[r].size() == schedule[r].size());
    }
  });
}

TEST_CASE("pipeline schedule: dependencies hold in simulated time") {
  for_each_schedule([](ScheduleKind kind, int64_t p, int64_t m) {
    const SimulationResult result = simulate(make_schedule(kind, p, m), {1, 2, CommModel::Rendezvous});
    REQUIRE_FALSE(result.deadlocked);
    for (int64_t s = 0; s < p; ++s) {
      for (int64_t i = 0; i < m; ++i) {
        CAPTURE(s);
        CAPTURE(i);
        const TimedAction f = find_compute(result, s, ActionType::Forward, i);
        const TimedAction b = find_compute(result, s, ActionType::Backward, i);
        CHECK(f.end - f.start == 1);
        CHECK(b.end - b.start == 2);
        CHECK(b.start >= f.end);
        if (s > 0) CHECK(f.start >= find_compute(result, s - 1, ActionType::Forward, i).end);
        if (s < p - 1) CHECK(b.start >= find_compute(result, s + 1, ActionType::Backward, i).end);
      }
    }
  });
}

TEST_CASE("pipeline schedule: peak live activations, GPipe m and 1F1B min(p - s, m)") {
  for (int64_t p : kStages) {
    for (int64_t m : kMicrobatches) {
      CAPTURE(p);
      CAPTURE(m);
      const SimulationResult gpipe = simulate(make_schedule(ScheduleKind::GPipe, p, m));
      const SimulationResult one_f_one_b = simulate(make_schedule(ScheduleKind::OneFOneB, p, m));
      for (int64_t s = 0; s < p; ++s) {
        CAPTURE(s);
        CHECK(gpipe.peak_live_activations[s] == m);
        CHECK(one_f_one_b.peak_live_activations[s] == std::min(p - s, m));
        CHECK(one_f_one_b.peak_live_activations[s] <= p - s);
      }
    }
  }
}

TEST_CASE("pipeline schedule: simulated bubble equals the theory (p - 1) / (m + p - 1)") {
  // Theory: the step takes (m + p - 1)(tf + tb); each stage computes m (tf + tb) of it and is
  // idle (p - 1)(tf + tb). The simulator gives exactly this for both schedules, both
  // communication models and both cost ratios (messages take no time in the simulator).
  const std::pair<int64_t, int64_t> costs[] = {{1, 2}, {1, 1}};
  for_each_schedule([&costs](ScheduleKind kind, int64_t p, int64_t m) {
    for (const auto& [tf, tb] : costs) {
      for (CommModel comm : {CommModel::Rendezvous, CommModel::Eager}) {
        CAPTURE(tb);
        CAPTURE(static_cast<int>(comm));
        const SimulationResult result = simulate(make_schedule(kind, p, m), {tf, tb, comm});
        CHECK(result.total_time == (m + p - 1) * (tf + tb));
        for (int64_t s = 0; s < p; ++s) {
          CHECK(result.busy_time[s] == m * (tf + tb));
          CHECK(result.idle_time[s] == (p - 1) * (tf + tb));
          CHECK(result.bubble_fraction[s] ==
                doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(m + p - 1)).epsilon(1e-12));
        }
      }
    }
  });
  // A hand-checked instance: p = 4, m = 8, tf = 1, tb = 2: 33 time units, 9 idle per stage,
  // bubble 3 / 11.
  const SimulationResult r =
      simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8), {1, 2, CommModel::Rendezvous});
  CHECK(r.total_time == 33);
  CHECK(r.idle_time == std::vector<int64_t>{9, 9, 9, 9});
  CHECK(r.bubble_fraction[0] == doctest::Approx(3.0 / 11.0));
}

TEST_CASE("pipeline schedule: textbook pictures for p = 4, m = 8") {
  CHECK(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 8)) ==
        "stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n"
        "stage 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7\n"
        "stage 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7\n"
        "stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7\n");
  CHECK(format_schedule(make_schedule(ScheduleKind::GPipe, 4, 8)) ==
        "stage 0: F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0\n"
        "stage 1: F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0\n"
        "stage 2: F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0\n"
        "stage 3: F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0\n");
  // The time grids drawn in schedule.h (forward and backward one unit each).
  CHECK(
      format_timeline(simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8), {1, 1, CommModel::Rendezvous})) ==
      "stage 0: F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 B4 .  B5 .  B6 .  B7\n"
      "stage 1: .  F0 F1 F2 .  .  B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .  B6 .  B7 .\n"
      "stage 2: .  .  F0 F1 .  B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .  B7 .  .\n"
      "stage 3: .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .  .  .\n");
  CHECK(format_timeline(simulate(make_schedule(ScheduleKind::GPipe, 4, 8), {1, 1, CommModel::Rendezvous})) ==
        "stage 0: F0 F1 F2 F3 F4 F5 F6 F7 .  .  .  .  .  .  B7 B6 B5 B4 B3 B2 B1 B0\n"
        "stage 1: .  F0 F1 F2 F3 F4 F5 F6 F7 .  .  .  .  B7 B6 B5 B4 B3 B2 B1 B0 .\n"
        "stage 2: .  .  F0 F1 F2 F3 F4 F5 F6 F7 .  .  B7 B6 B5 B4 B3 B2 B1 B0 .  .\n"
        "stage 3: .  .  .  F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0 .  .  .\n");
  // m < p: the front stages have no steady state and run all forwards, then all backwards.
  CHECK(format_schedule(make_schedule(ScheduleKind::OneFOneB, 4, 2)) ==
        "stage 0: F0 F1 B0 B1\n"
        "stage 1: F0 F1 B0 B1\n"
        "stage 2: F0 F1 B0 B1\n"
        "stage 3: F0 B0 F1 B1\n");
}

TEST_CASE("pipeline schedule: negative control, send-send cycle deadlocks under rendezvous only") {
  // The naive 1F1B order on the last stage of p = 2: send the gradient of B0 before receiving
  // the activation of F1. Stage 0 meanwhile sends activation 1 before waiting for gradient 0:
  // both ranks send to each other and neither receives.
  Schedule schedule = make_schedule(ScheduleKind::OneFOneB, 2, 3);
  auto& last = schedule[1];
  REQUIRE(last[3].to_string() == "recv act 1 <- rank 0");
  REQUIRE(last[4].to_string() == "send grad 0 -> rank 0");
  std::swap(last[3], last[4]);

  const auto mismatches = check_pairwise_order(schedule);
  // Each direction alone is still in order; the interleaving of the two is not.
  REQUIRE(mismatches.size() == 1);
  CHECK(
      mismatches[0] ==
      "rank 0 <-> rank 1: message #1 is send act 1 -> rank 1 on rank 0 but send grad 0 -> rank 0 on rank 1");

  const SimulationResult rendezvous = simulate(schedule, {1, 2, CommModel::Rendezvous});
  CHECK(rendezvous.deadlocked);
  REQUIRE(rendezvous.blocked.size() == 2);
  CHECK(rendezvous.blocked[0].rank == 0);
  CHECK(rendezvous.blocked[0].index == 3);
  CHECK(rendezvous.blocked[0].action.to_string() == "send act 1 -> rank 1");
  CHECK(rendezvous.blocked[1].rank == 1);
  CHECK(rendezvous.blocked[1].action.to_string() == "send grad 0 -> rank 0");
  CHECK(rendezvous.deadlock_report ==
        "deadlock: rank 0 blocked at #3 send act 1 -> rank 1; rank 1 blocked at #3 send grad 0 -> rank 0");

  // With buffered sends the same schedule completes: why the checker uses the strict model.
  const SimulationResult eager = simulate(schedule, {1, 2, CommModel::Eager});
  CHECK_FALSE(eager.deadlocked);
}

TEST_CASE("pipeline schedule: negative control, swapped receives and a missing receive") {
  // Swap two receives on the middle rank of p = 3: activations 0 and 1 are expected in the wrong
  // order.
  Schedule swapped = make_schedule(ScheduleKind::GPipe, 3, 4);
  auto& middle = swapped[1];
  REQUIRE(middle[0].to_string() == "recv act 0 <- rank 0");
  REQUIRE(middle[3].to_string() == "recv act 1 <- rank 0");
  std::swap(middle[0].microbatch, middle[3].microbatch);
  const auto mismatches = check_pairwise_order(swapped);
  REQUIRE(mismatches.size() == 1);
  CHECK(mismatches[0] ==
        "rank 0 <-> rank 1: message #0 is send act 0 -> rank 1 on rank 0 but recv act 1 <- rank 0 on rank 1");
  const SimulationResult rendezvous = simulate(swapped, {1, 2, CommModel::Rendezvous});
  CHECK(rendezvous.deadlocked);
  CHECK(rendezvous.deadlock_report.find("rank 0 blocked at #1 send act 0 -> rank 1") != std::string::npos);
  CHECK(rendezvous.deadlock_report.find("rank 1 blocked at #0 recv act 1 <- rank 0") != std::string::npos);
  const SimulationResult eager = simulate(swapped, {1, 2, CommModel::Eager});
  CHECK(eager.deadlocked);
  CHECK(eager.deadlock_report.find(
            "message mismatch: rank 1 at #0 recv act 1 <- rank 0 got send act 0 -> rank 1") !=
        std::string::npos);

  // Drop the last receive of gradients on rank 0: rank 1's last send never completes.
  Schedule missing = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  auto& first = missing[0];
  const auto it = std::find_if(first.begin(), first.end(), [](const Action& a) {
    return a.type == ActionType::RecvGrad && a.microbatch == 1;
  });
  REQUIRE(it != first.end());
  first.erase(it);
  const auto counts = check_pairwise_order(missing);
  REQUIRE(counts.size() == 1);
  CHECK(counts[0] == "rank 0 <-> rank 1: rank 0 has 3 messages with rank 1 but rank 1 has 4 with rank 0");
  const SimulationResult r = simulate(missing, {1, 2, CommModel::Rendezvous});
  CHECK(r.deadlocked);
  REQUIRE(r.blocked.size() == 1);
  CHECK(r.blocked[0].rank == 1);
  CHECK(r.blocked[0].action.to_string() == "send grad 1 -> rank 0");
  const SimulationResult e = simulate(missing, {1, 2, CommModel::Eager});
  CHECK(e.deadlocked);
  CHECK(e.deadlock_report == "rank 1 -> rank 0: 1 message(s) never received");
}

TEST_CASE("pipeline schedule: errors") {
  CHECK_THROWS_WITH_AS(make_schedule(ScheduleKind::GPipe, 0, 4),
                       doctest::Contains("make_schedule(GPipe): expected stages >= 1, got 0"), loom::Error);
  CHECK_THROWS_WITH_AS(make_schedule(ScheduleKind::OneFOneB, 4, 0),
                       doctest::Contains("make_schedule(1F1B): expected microbatches >= 1, got 0"),
                       loom::Error);
  CHECK_THROWS_WITH_AS(make_schedule(ScheduleKind::OneFOneB, -2, 4),
                       doctest::Contains("expected stages >= 1, got -2"), loom::Error);

  Schedule bad_peer = make_schedule(ScheduleKind::GPipe, 2, 1);
  bad_peer[0][1].peer = 5;  // "send act 0 -> rank 5"
  CHECK_THROWS_WITH_AS(
      simulate(bad_peer),
      doctest::Contains("simulate: rank 0 action #1 (send act 0 -> rank 5) has peer 5, expected "
                        "another rank in [0, 2)"),
      loom::Error);
  CHECK_THROWS_WITH_AS(check_pairwise_order(bad_peer),
                       doctest::Contains("check_pairwise_order: rank 0 action #1"), loom::Error);
  Schedule self_peer = make_schedule(ScheduleKind::GPipe, 2, 1);
  self_peer[1][0].peer = 1;
  CHECK_THROWS_WITH_AS(simulate(self_peer), doctest::Contains("has peer 1, expected another rank"),
                       loom::Error);
  Schedule compute_peer = make_schedule(ScheduleKind::GPipe, 2, 1);
  compute_peer[0][0].peer = 1;  // F0 with a peer
  CHECK_THROWS_WITH_AS(simulate(compute_peer),
                       doctest::Contains("is a compute action and must have peer -1, got 1"), loom::Error);
  Schedule negative = make_schedule(ScheduleKind::GPipe, 1, 1);
  negative[0][0].microbatch = -1;
  CHECK_THROWS_WITH_AS(simulate(negative), doctest::Contains("has negative micro-batch -1"), loom::Error);
  CHECK_THROWS_WITH_AS(
      simulate(make_schedule(ScheduleKind::GPipe, 2, 2), {0, 2, CommModel::Rendezvous}),
      doctest::Contains("simulate: expected every cost >= 1, got forward_cost 0, backward_cost 2, "
                        "input_backward_cost 1, weight_backward_cost 1"),
      loom::Error);
  SimulationOptions no_weight_cost;
  no_weight_cost.weight_backward_cost = 0;
  CHECK_THROWS_WITH_AS(simulate(make_schedule(ScheduleKind::ZeroBubbleH1, 2, 2), no_weight_cost),
                       doctest::Contains("weight_backward_cost 0"), loom::Error);
  CHECK_THROWS_WITH_AS(make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4, 2),
                       doctest::Contains("make_schedule(ZB-H1): one model chunk per rank, got 2"), loom::Error);
}

TEST_CASE("pipeline schedule: interleaved 1F1B runs every (model stage, micro-batch) once, on its rank") {
  for (int64_t p : {2, 3, 4})
    for (int64_t v : {2, 3})
      for (int64_t m : {p, 2 * p, 4 * p}) {
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(m);
        const Schedule schedule = make_schedule(ScheduleKind::Interleaved1F1B, p, m, v);
        REQUIRE(static_cast<int64_t>(schedule.size()) == p);
        for (int64_t r = 0; r < p; ++r) {
          std::vector<int> forwards(p * v * m, 0), backwards(p * v * m, 0);
          for (const Action& a : schedule[r]) {
            CHECK(a.stage % p == r);  // rank r holds model stages r, r + p, ...
            if (a.type == ActionType::Forward) ++forwards[a.stage * m + a.microbatch];
            if (a.type == ActionType::Backward) ++backwards[a.stage * m + a.microbatch];
            // Neighbouring model stages, around the ring of ranks.
            if (a.type == ActionType::SendActivation || a.type == ActionType::RecvGrad) CHECK(a.peer == (r + 1) % p);
            if (a.type == ActionType::RecvActivation || a.type == ActionType::SendGrad) CHECK(a.peer == (r + p - 1) % p);
          }
          for (int64_t c = 0; c < v; ++c)
            for (int64_t i = 0; i < m; ++i) {
              CHECK(forwards[(c * p + r) * m + i] == 1);
              CHECK(backwards[(c * p + r) * m + i] == 1);
            }
        }
      }
}

TEST_CASE("pipeline schedule: interleaved 1F1B needs posted sends, and with them its bubble is (p-1)/(v m + p-1)") {
  for (int64_t p : {2, 3, 4})
    for (int64_t v : {1, 2, 3})
      for (int64_t m : {p, 2 * p, 4 * p}) {
        CAPTURE(p);
        CAPTURE(v);
        CAPTURE(m);
        const Schedule schedule = make_schedule(ScheduleKind::Interleaved1F1B, p, m, v);
        // A chunk's forward costs 1 and backward 2: the v chunks together are one stage of
        // 1F1B with costs v and 2v, so the two take the same compute time per rank.
        const SimulationResult interleaved = simulate(schedule, {1, 2, CommModel::Eager});
        REQUIRE_MESSAGE(!interleaved.deadlocked, interleaved.deadlock_report);
        const SimulationResult plain = simulate(make_schedule(ScheduleKind::OneFOneB, p, m), {v, 2 * v, CommModel::Eager});
        const double theory = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
        CHECK(interleaved.bubble_fraction[0] == doctest::Approx(theory));
        CHECK(interleaved.busy_time[0] == plain.busy_time[0]);
        if (v > 1) CHECK(interleaved.total_time < plain.total_time);
        // Data dependencies hold in simulated time: stage g's forward of i ends before stage
        // g + 1's starts, whichever ranks they are on.
        for (int64_t g = 0; g + 1 < p * v; ++g)
          for (int64_t i = 0; i < m; ++i) {
            auto when = [&](int64_t stage) {
              for (const TimedAction& t : interleaved.timeline[stage % p])
                if (t.action.type == ActionType::Forward && t.action.stage == stage && t.action.microbatch == i)
                  return t;
              FAIL("no forward of micro-batch ", i, " on stage ", stage);
              return TimedAction{};
            };
            CHECK(when(g).end <= when(g + 1).start);
          }
        // With v > 1 activations travel around the ring (rank p-1 -> rank 0), where two
        // neighbours can both be sending: blocking sends deadlock. (v = 1 is 1F1B: they do not.)
        if (v > 1) CHECK(simulate(schedule, {1, 2, CommModel::Rendezvous}).deadlocked);
      }
}

TEST_CASE("pipeline schedule: the interleaved timeline for p = 4, m = 8, v = 2") {
  // The case of Narayanan et al. (2021, fig. 4), as the simulator lays it out with forward and
  // backward one unit each, and as schedule.h draws it (in two halves there);
  // "a"/"b" are a rank's first and second chunk (model stages r and r + 4).
  const std::string timeline = format_timeline(
      simulate(make_schedule(ScheduleKind::Interleaved1F1B, 4, 8, 2), {1, 1, CommModel::Eager}));
  CHECK(timeline ==
        "stage 0: F0a F1a F2a F3a F0b F1b F2b F3b F4a F5a F6a B0b F7a B1b .   .   F4b B2b F5b "
        "B3b F6b B0a F7b B1a B2a B3a .   B4b .   B5b .   B6b .   B7b B4a B5a B6a B7a\n"
        "stage 1: .   F0a F1a F2a F3a F0b F1b F2b F3b F4a B0b F5a B1b F6a B2b F7a B3b F4b B0a "
        "F5b B1a F6b B2a F7b B3a .   B4b .   B5b .   B6b .   B7b B4a B5a B6a B7a .\n"
        "stage 2: .   .   F0a F1a F2a F3a F0b F1b F2b B0b F3b B1b F4a B2b F5a B3b F6a B0a F7a "
        "B1a F4b B2a F5b B3a F6b B4b F7b B5b .   B6b .   B7b B4a B5a B6a B7a .   .\n"
        "stage 3: .   .   .   F0a F1a F2a F3a F0b B0b F1b B1b F2b B2b F3b B3b F4a B0a F5a B1a "
        "F6a B2a F7a B3a F4b B4b F5b B5b F6b B6b F7b B7b B4a B5a B6a B7a .   .   .\n");
}

TEST_CASE("pipeline schedule: interleaved errors name the problem") {
  auto error = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error([] { make_schedule(ScheduleKind::Interleaved1F1B, 4, 6, 2); }).find("must be a multiple of the 4 ranks") !=
        std::string::npos);
  CHECK(error([] { make_schedule(ScheduleKind::Interleaved1F1B, 1, 4, 2); }).find("interleaving needs at least 2 ranks") !=
        std::string::npos);
  CHECK(error([] { make_schedule(ScheduleKind::OneFOneB, 2, 4, 2); }).find("one model chunk per rank, got 2") !=
        std::string::npos);
}

// ZB-H1 with every micro-batch count from 1 to 3p (m < p included, where the pipeline never
// fills), for p = 1 .. 6.
template <class Check>
void for_each_zero_bubble(Check&& check) {
  for (int64_t p = 1; p <= 6; ++p)
    for (int64_t m = 1; m <= 3 * p; ++m) {
      CAPTURE(p);
      CAPTURE(m);
      check(p, m, make_schedule(ScheduleKind::ZeroBubbleH1, p, m));
    }
}

TEST_CASE("pipeline schedule: ZB-H1 runs one F, B and W of every micro-batch per stage, W after B and silent") {
  for_each_zero_bubble([](int64_t p, int64_t m, const Schedule& schedule) {
    const Schedule one_f_one_b = make_schedule(ScheduleKind::OneFOneB, p, m);
    REQUIRE(static_cast<int64_t>(schedule.size()) == p);
    for (int64_t s = 0; s < p; ++s) {
      CAPTURE(s);
      std::vector<int64_t> forward(m, -1), input(m, -1), weight(m, -1);
      std::vector<Action> messages, reference_messages, f_and_b, reference_f_and_b;
      for (int64_t k = 0; k < static_cast<int64_t>(schedule[s].size()); ++k) {
        const Action& a = schedule[s][k];
        CHECK(a.stage == s);
        CHECK(a.type != ActionType::Backward);  // every backward is split
        auto once = [&](std::vector<int64_t>& at) {
          CHECK(at[a.microbatch] == -1);
          at[a.microbatch] = k;
        };
        if (a.type == ActionType::Forward) once(forward);
        if (a.type == ActionType::BackwardInput) once(input);
        if (a.type == ActionType::BackwardWeight) once(weight);
        if (!a.is_compute()) messages.push_back(a);
        if (a.type == ActionType::Forward || a.type == ActionType::BackwardInput)
          f_and_b.push_back({a.type == ActionType::Forward ? ActionType::Forward : ActionType::Backward,
                             a.microbatch, a.stage, -1});
      }
      for (const Action& a : one_f_one_b[s]) (a.is_compute() ? reference_f_and_b : reference_messages).push_back(a);
      for (int64_t i = 0; i < m; ++i) {
        CHECK(forward[i] >= 0);
        CHECK(forward[i] < input[i]);
        CHECK(input[i] < weight[i]);
      }
      // B takes the place of 1F1B's backward, messages included: W adds none.
      CHECK(f_and_b == reference_f_and_b);
      std::vector<std::string> got = strings(messages), expected = strings(reference_messages);
      std::sort(got.begin(), got.end());
      std::sort(expected.begin(), expected.end());
      CHECK(got == expected);
    }
  });
}

TEST_CASE("pipeline schedule: ZB-H1 is deadlock-free, with 1F1B's live micro-batches until B and at most p until W") {
  for_each_zero_bubble([](int64_t p, int64_t m, const Schedule& schedule) {
    CHECK(check_pairwise_order(schedule).empty());
    const SimulationResult one_f_one_b = simulate(make_schedule(ScheduleKind::OneFOneB, p, m));
    for (CommModel comm : {CommModel::Rendezvous, CommModel::Eager}) {
      CAPTURE(static_cast<int>(comm));
      SimulationOptions options;
      options.comm = comm;
      const SimulationResult result = simulate(schedule, options);
      REQUIRE_MESSAGE(!result.deadlocked, result.deadlock_report);
      for (int64_t s = 0; s < p; ++s) {
        CAPTURE(s);
        CHECK(result.timeline[s].size() == schedule[s].size());
        CHECK(result.peak_live_activations[s] == one_f_one_b.peak_live_activations[s]);
        // Holding each graph until its W: no more than 1F1B's most loaded stage (stage 0).
        CHECK(result.peak_live_until_weight_grad[s] <= one_f_one_b.peak_live_activations[0]);
        CHECK(one_f_one_b.peak_live_until_weight_grad[s] == one_f_one_b.peak_live_activations[s]);
        // Dependencies in simulated time: F after the upstream F, B after the downstream B, W
        // after this stage's B.
        for (int64_t i = 0; i < m; ++i) {
          CAPTURE(i);
          const TimedAction f = find_compute(result, s, ActionType::Forward, i);
          const TimedAction b = find_compute(result, s, ActionType::BackwardInput, i);
          const TimedAction w = find_compute(result, s, ActionType::BackwardWeight, i);
          CHECK(b.start >= f.end);
          CHECK(w.start >= b.end);
          if (s > 0) CHECK(f.start >= find_compute(result, s - 1, ActionType::Forward, i).end);
          if (s < p - 1) CHECK(b.start >= find_compute(result, s + 1, ActionType::BackwardInput, i).end);
        }
      }
    }
  });
}

TEST_CASE("pipeline schedule: ZB-H1's bubble is (p - 1)(tF + tB - tW), a third of 1F1B's when tF = tB = tW") {
  // Qi et al. (2024), sec. 2.1: 1F1B idles (p - 1)(tF + tB + tW) per stage (its backward is
  // B + W), ZB-H1 (p - 1)(tF + tB - tW): B alone is on the path back to the first stage, and
  // the deferred Ws fill the cool-down. With tF = tB = tW = t the bubble fractions are
  // 3(p - 1) / (3m + 3(p - 1)) = (p - 1) / (m + p - 1) and (p - 1) / (3m + p - 1). The formula
  // needs m >= p (a full pipeline); below that ZB-H1 is still shorter than 1F1B.
  for_each_zero_bubble([](int64_t p, int64_t m, const Schedule& schedule) {
    for (int64_t t : {1, 2}) {
      for (CommModel comm : {CommModel::Rendezvous, CommModel::Eager}) {
        CAPTURE(t);
        CAPTURE(static_cast<int>(comm));
        SimulationOptions zb{t, 2 * t, comm, t, t};
        const SimulationResult result = simulate(schedule, zb);
        const SimulationResult one_f_one_b = simulate(make_schedule(ScheduleKind::OneFOneB, p, m), zb);
        REQUIRE_FALSE(result.deadlocked);
        for (int64_t s = 0; s < p; ++s) {
          CHECK(result.busy_time[s] == one_f_one_b.busy_time[s]);
          CHECK(one_f_one_b.idle_time[s] == (p - 1) * 3 * t);
          if (p > 1) CHECK(result.bubble_fraction[s] < one_f_one_b.bubble_fraction[s]);
          if (m < p) continue;
          CHECK(result.idle_time[s] == (p - 1) * (t + t - t));
          CHECK(result.bubble_fraction[s] ==
                doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(3 * m + p - 1)).epsilon(1e-12));
        }
        if (m >= p) CHECK(result.total_time == 3 * m * t + (p - 1) * t);
      }
    }
  });
  // Unequal costs: still below 1F1B at the same work (tB + tW = 1F1B's backward).
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {p, 2 * p}) {
      CAPTURE(p);
      CAPTURE(m);
      const SimulationResult zb = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, p, m), {1, 3, CommModel::Rendezvous, 2, 1});
      const SimulationResult base = simulate(make_schedule(ScheduleKind::OneFOneB, p, m), {1, 3, CommModel::Rendezvous});
      REQUIRE_FALSE(zb.deadlocked);
      CHECK(zb.busy_time[0] == base.busy_time[0]);
      CHECK(zb.total_time < base.total_time);
    }
}

TEST_CASE("pipeline schedule: the ZB-H1 timeline for p = 4, m = 8") {
  // As schedule.h draws it, tF = tB = tW = 1: 27 time units against 1F1B's 33 (its backward two).
  const std::string timeline =
      format_timeline(simulate(make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8), {1, 2, CommModel::Rendezvous, 1, 1}));
  CHECK(timeline ==
        "stage 0: F0 F1 F2 F3 .  .  .  B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7\n"
        "stage 1: .  F0 F1 F2 .  .  B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7\n"
        "stage 2: .  .  F0 F1 .  B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7\n"
        "stage 3: .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7\n");
}

}  // namespace
}  // namespace loom::distributed::pipeline
