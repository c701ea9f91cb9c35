/*
 * Checkpoints saved by a group of processes (CheckpointGroup): the rank-R/ layout, the
 * all-or-nothing failure, the world-size check on load, and the commit's atomicity across
 * ranks — two forked "ranks" save step after step, synchronised by a barrier in shared memory
 * (what an MPI all-reduce is to train), and one of them is SIGKILLed at a random moment in
 * each of 100 trials (the other then killed too, as mpirun ends a job whose rank died). Every
 * time, both ranks must load the same complete checkpoint, with contents matching its step and
 * their rank, never older than the last step rank 0 saw committed.
 */
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "core/parallel.h"
#include "nn/serialize/serialize.h"
#include "tests/nn/checkpoint_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::nn;
namespace fs = std::filesystem;

namespace {

using test::error_of;


bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// A barrier with a verdict for processes forked from one parent, in MAP_SHARED memory: the
// stand-in for the all-reduce of "ok" flags that train uses over MPI.
struct SharedBarrier {
  int size = 2;
  std::atomic<int> arrived{0}, generation{0};
  std::atomic<int> failed[2] = {0, 0};
  std::atomic<int> verdict[2] = {0, 0};
  std::atomic<int64_t> committed{0};  // the last step whose save returned on rank 0

  // Returns when all `size` processes called it; true when every one passed ok.
  bool all_ok(bool ok) {
    const int g = generation.load();
    if (!ok) failed[g & 1] = 1;
    if (arrived.fetch_add(1) + 1 == size) {
      verdict[g & 1] = failed[g & 1].load() == 0;
      failed[(g + 1) & 1] = 0;  // before the next generation opens
      arrived = 0;
      generation = g + 1;
    } else {
      while (generation.load() == g) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return verdict[g & 1] != 0;
  }
};

SharedBarrier* shared_barrier(int size) {
  void* memory = ::mmap(nullptr, sizeof(SharedBarrier), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(memory != MAP_FAILED);
  auto* barrier = new (memory) SharedBarrier();
  barrier->size = size;
  return barrier;
}

CheckpointGroup group_of(SharedBarrier* barrier, int rank) {
  return CheckpointGroup{.rank = rank, .size = barrier->size, .all_ok = [barrier](bool ok) { return barrier->all_ok(ok); }};
}

// A loader's view of the group: load_latest never calls all_ok.
CheckpointGroup reader_of(int rank, int size) {
  return CheckpointGroup{.rank = rank, .size = size, .all_ok = [](bool ok) { return ok; }};
}

constexpr int64_t kFloats = 1 << 19;  // 2 MiB of float32 per rank and step: saves take a while

// Rank `rank`'s state at `step`: every value derived from both. Filled through raw pointers:
// a forked child has one thread, and the parent's OpenMP pool must not be touched.
std::map<std::string, StateDict> rank_state(int64_t step, int rank) {
  Tensor weight = empty({kFloats}, kFloat32);
  std::fill_n(weight.data_ptr<float>(), kFloats, static_cast<float>(step * 10 + rank));
  Tensor counter = empty({}, kInt64);
  *counter.data_ptr<int64_t>() = step;
  StateDict model, rng;
  model.insert("weight", weight);
  rng.insert("step", counter);
  return {{"model", model}, {"rng", rng}};
}

std::string rank_mismatch(const Checkpoint& c, int rank) {
  const Tensor& w = c.sections.at("model").at("weight");
  if (w.numel() != kFloats) return "wrong size";
  const float expected = static_cast<float>(c.step * 10 + rank);
  const float* p = w.data_ptr<float>();
  for (int64_t i = 0; i < kFloats; ++i)
    if (p[i] != expected) return "weight[" + std::to_string(i) + "] = " + std::to_string(p[i]);
  if (c.sections.at("rng").at("step").item<int64_t>() != c.step) return "rng step differs";
  if (c.metadata != "{\"step\":" + std::to_string(c.step) + "}") return "metadata " + c.metadata;
  return "";
}

// Runs `body(rank)` in `size` forked processes; returns their exit statuses.
template <class Body>
std::vector<int> run_ranks(int size, Body body) {
  std::cout.flush();
  std::cerr.flush();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        code = body(rank);
      } catch (const std::exception& e) {
        std::cerr << "rank " << rank << ": " << e.what() << std::endl;
        code = 3;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    statuses.push_back(status);
  }
  return statuses;
}

bool exited_zero(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace

TEST_CASE("checkpoint group: every rank's sections under rank-R/, loaded back by each rank") {
  test::ScratchDir dir("checkpoint_group");
  const fs::path run = dir.path() / "run";
  SharedBarrier* barrier = shared_barrier(2);
  auto statuses = run_ranks(2, [&](int rank) {
    CheckpointManager manager(run, 2, group_of(barrier, rank));
    for (int64_t step = 1; step <= 3; ++step) manager.save(step, rank_state(step, rank), "{\"step\":" + std::to_string(step) + "}");
    return 0;
  });
  CHECK(exited_zero(statuses[0]));
  CHECK(exited_zero(statuses[1]));

  CHECK(fs::exists(run / "step-00000003" / "rank-00000" / "model.safetensors"));
  CHECK(fs::exists(run / "step-00000003" / "rank-00001" / "rng.safetensors"));
  CHECK(fs::exists(run / "step-00000003" / "meta.json"));
  CHECK_FALSE(fs::exists(run / "step-00000001"));  // keep_last 2
  for (int rank = 0; rank < 2; ++rank) {
    auto c = CheckpointManager(run, 2, reader_of(rank, 2)).load_latest();
    REQUIRE(c.has_value());
    CHECK(c->step == 3);
    CHECK(c->note.empty());
    CHECK(rank_mismatch(*c, rank).empty());
  }

  // A job of another size is told how many processes wrote it, not handed a fallback.
  CHECK(contains(error_of([&] { CheckpointManager(run, 2, reader_of(0, 4)).load_latest(); }),
                 "saved by a job of 2 processes, this job has 4: resume it with mpirun -np 2"));
  CHECK(contains(error_of([&] { CheckpointManager(run).load_latest(); }), "this job has 1: resume it with mpirun -np 2"));

  // A rank whose part is missing makes the checkpoint incomplete for every rank alike: both
  // fall back to step 2 (rank 0's files are intact, but rank 1's are not).
  fs::remove(run / "step-00000003" / "rank-00001" / "rank.json");
  for (int rank = 0; rank < 2; ++rank) {
    auto c = CheckpointManager(run, 2, reader_of(rank, 2)).load_latest();
    REQUIRE(c.has_value());
    CHECK(c->step == 2);
    CHECK(contains(c->note, "rank-00001/rank.json"));
    CHECK(rank_mismatch(*c, rank).empty());
  }
}

TEST_CASE("checkpoint group: a rank that fails makes every rank throw, and 'latest' stays") {
  test::ScratchDir dir("checkpoint_group_fail");
  const fs::path run = dir.path() / "run";
  SharedBarrier* barrier = shared_barrier(2);
  auto statuses = run_ranks(2, [&](int rank) {
    CheckpointManager manager(run, 3, group_of(barrier, rank));
    manager.save(1, rank_state(1, rank), "{\"step\":1}");
    // Step 2: rank 1 passes a section name that is not a file name; rank 0's part is fine.
    auto state = rank_state(2, rank);
    if (rank == 1) state.emplace("../escape", StateDict());
    const std::string error = test::error_if_any([&] { manager.save(2, state, "{\"step\":2}"); });
    if (rank == 1 && !contains(error, "section name '../escape'")) return 10;
    if (rank == 0 && !contains(error, "step 2 failed on another rank")) return 11;
    return 0;
  });
  CHECK(exited_zero(statuses[0]));
  CHECK(exited_zero(statuses[1]));
  auto c = CheckpointManager(run, 3, reader_of(0, 2)).load_latest();
  REQUIRE(c.has_value());
  CHECK(c->step == 1);
  CHECK(c->note.empty());
  CHECK_FALSE(fs::exists(run / "step-00000002"));
}

TEST_CASE("checkpoint group: SIGKILL of a rank at random moments, 100 trials: always a complete, matching checkpoint") {
  test::ScratchDir dir("checkpoint_group_kill");
  const fs::path run = dir.path() / "run";
  SharedBarrier* barrier = shared_barrier(2);
  // One save's duration on this machine (fsync speeds vary), to spread the kills over saves.
  const auto start = std::chrono::steady_clock::now();
  CheckpointManager(dir.path() / "timing").save(1, rank_state(1, 0), "{}");
  const int64_t save_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  const int64_t max_delay_us = std::clamp<int64_t>(6 * save_us, 50'000, 2'000'000);
  std::mt19937 rng(2026);
  constexpr int kTrials = 100;
  int64_t previous = 0;
  test::LatestFileHistory latest_histories[2];  // one per rank's view
  int advanced = 0, fallbacks = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    // A fresh barrier for the fresh job (a killed rank may have left it mid-generation).
    barrier->~SharedBarrier();
    new (barrier) SharedBarrier();
    barrier->size = 2;
    std::cout.flush();
    std::cerr.flush();
    pid_t pids[2];
    for (int rank = 0; rank < 2; ++rank) {
      pids[rank] = ::fork();
      REQUIRE(pids[rank] >= 0);
      if (pids[rank] == 0) {
        try {
          // The job: resume from the latest checkpoint, then save step after step.
          CheckpointManager manager(run, 2, group_of(barrier, rank));
          auto latest = manager.load_latest();
          for (int64_t step = latest ? latest->step + 1 : 1;; ++step) {
            manager.save(step, rank_state(step, rank), "{\"step\":" + std::to_string(step) + "}");
            if (rank == 0) barrier->committed = step;
          }
        } catch (const std::exception& e) {
          std::cerr << "rank " << rank << " failed: " << e.what() << std::endl;
        }
        ::_exit(3);
      }
    }
    const int64_t delay_us = trial % 5 == 0 ? rng() % 5000 : rng() % max_delay_us;
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    const int victim = static_cast<int>(rng() % 2);
    ::kill(pids[victim], SIGKILL);
    // What mpirun does when a rank dies: the rest of the job is killed too. The survivor is
    // given a moment first, so that it may be anywhere in its own save (or waiting).
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    ::kill(pids[1 - victim], SIGKILL);
    for (pid_t pid : pids) {
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      INFO("trial ", trial, ", rank ", victim, " killed after ", delay_us, " us");
      REQUIRE_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL),
                      "a rank exited on its own (status ", status, "): it failed to save");
    }

    INFO("trial ", trial);
    std::optional<Checkpoint> views[2];
    for (int rank = 0; rank < 2; ++rank) {
      const std::string error = test::error_if_any([&] { views[rank] = CheckpointManager(run, 2, reader_of(rank, 2)).load_latest(); });
      REQUIRE_MESSAGE(error.empty(), error);
    }
    if (!views[0]) {
      CHECK_FALSE(views[1].has_value());
      CHECK(previous == 0);  // only before the first commit
      continue;
    }
    REQUIRE(views[1].has_value());
    CHECK(views[0]->step == views[1]->step);  // every rank resumes from the same checkpoint
    for (int rank = 0; rank < 2; ++rank) {
      const std::string bad = rank_mismatch(*views[rank], rank);
      CHECK_MESSAGE(bad.empty(), "rank ", rank, ", step ", views[rank]->step, ": ", bad);
      if (latest_histories[rank].unexpected_fallback(*views[rank])) ++fallbacks;
    }
    CHECK(views[0]->step >= barrier->committed.load());
    CHECK(views[0]->step >= previous);
    if (views[0]->step > previous) ++advanced;
    previous = views[0]->step;
  }
  MESSAGE("one save takes ", save_us, " us; last step ", previous, ", ", advanced, " of ", kTrials,
          " trials advanced, ", fallbacks, " fallbacks");
  CHECK(fallbacks == 0);  // `latest` only ever named complete checkpoints
  CHECK(advanced >= kTrials / 4);  // the jobs made progress, so kills landed inside saves
}

TEST_CASE("checkpoint group: asynchronous saves commit together at a poll once every rank's writer is done") {
  test::ScratchDir dir("checkpoint_group_async");
  SharedBarrier* barrier = shared_barrier(2);
  auto statuses = run_ranks(2, [&](int rank) {
    set_num_threads(1);  // the snapshot's copies run inline: the pool's threads did not survive fork()
    CheckpointManager sync(dir.path() / "sync", 3, group_of(barrier, rank));
    CheckpointManager manager(dir.path() / "async", 3, group_of(barrier, rank));
    AsyncCheckpointer async(manager);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::string meta = "{\"step\":" + std::to_string(step) + "}";
      sync.save(step, rank_state(step, rank), meta);
      async.save(step, rank_state(step, rank), meta);
      // Each poll is one agreement, so both ranks leave this loop at the same poll.
      int polls = 0;
      while (!async.poll()) {
        ++polls;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (rank == 0 && CheckpointManager(dir.path() / "async", 3, reader_of(0, 2)).load_latest()->step != step) return 12;
    }
    return 0;
  });
  CHECK(exited_zero(statuses[0]));
  CHECK(exited_zero(statuses[1]));
  for (int rank = 0; rank < 2; ++rank) {
    auto c = CheckpointManager(dir.path() / "async", 3, reader_of(rank, 2)).load_latest();
    REQUIRE(c.has_value());
    CHECK(c->step == 3);
    CHECK(rank_mismatch(*c, rank).empty());
    const std::string part = "step-00000003/" + CheckpointManager::rank_dir_name(rank) + "/model.safetensors";
    CHECK(read_file(dir.path() / "sync" / part) == read_file(dir.path() / "async" / part));
  }
}
