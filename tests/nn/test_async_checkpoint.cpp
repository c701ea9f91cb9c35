/*
 * AsyncCheckpointer (nn/serialize/async_checkpoint.h): the snapshot is taken when save()
 * returns (later updates do not leak into the file), the files are byte-identical to a
 * synchronous save's, `latest` moves only at the commit (poll or wait), and — the point of the
 * design — a process SIGKILLed while its background writer runs always leaves the previous
 * checkpoint complete and `latest`.
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

constexpr int64_t kFloats = 1 << 20;

// Filled through raw pointers: a forked child has one thread and must not touch the OpenMP pool.
std::map<std::string, StateDict> state_at(int64_t step) {
  Tensor weight = empty({kFloats}, kFloat32);
  std::fill_n(weight.data_ptr<float>(), kFloats, static_cast<float>(step));
  Tensor counter = empty({}, kInt64);
  *counter.data_ptr<int64_t>() = step;
  StateDict model, optimizer;
  model.insert("weight", weight);
  optimizer.insert("step", counter);
  return {{"model", model}, {"optimizer", optimizer}};
}

std::string meta_at(int64_t step) { return "{\"step\":" + std::to_string(step) + "}"; }

std::string mismatch(const Checkpoint& c) {
  const Tensor& w = c.sections.at("model").at("weight");
  if (w.numel() != kFloats) return "wrong size";
  const float* p = w.data_ptr<float>();
  for (int64_t i = 0; i < kFloats; ++i)
    if (p[i] != static_cast<float>(c.step)) return "weight[" + std::to_string(i) + "] = " + std::to_string(p[i]);
  if (c.sections.at("optimizer").at("step").item<int64_t>() != c.step) return "step differs";
  if (c.metadata != meta_at(c.step)) return "metadata " + c.metadata;
  return "";
}


}  // namespace

TEST_CASE("async checkpoint: snapshot at save(), same bytes as a synchronous save, latest moves at the commit") {
  test::ScratchDir dir("async_checkpoint");
  CheckpointManager sync_manager(dir.path() / "sync"), async_manager(dir.path() / "async");
  sync_manager.save(1, state_at(1), meta_at(1));
  async_manager.save(1, state_at(1), meta_at(1));

  auto state = state_at(2);
  AsyncCheckpointer async(async_manager);
  async.save(2, state, meta_at(2));
  CHECK(async.pending());
  // The training step after save() changes the weights in place: the checkpoint must not see it.
  std::fill_n(state.at("model").at("weight").data_ptr<float>(), kFloats, -1.0f);
  // Until the commit, `latest` names step 1, however far the writer got.
  CHECK(async_manager.load_latest()->step == 1);

  std::optional<fs::path> committed;
  for (int i = 0; i < 10000 && !committed; ++i) {
    committed = async.poll();
    if (!committed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(committed.has_value());
  CHECK_FALSE(async.pending());
  CHECK(*committed == dir.path() / "async" / "step-00000002");
  CHECK_FALSE(async.poll().has_value());  // nothing pending: nothing to commit
  CHECK(async.last_pause_seconds() > 0);

  sync_manager.save(2, state_at(2), meta_at(2));
  auto loaded = async_manager.load_latest();
  REQUIRE(loaded.has_value());
  CHECK(loaded->step == 2);
  CHECK(mismatch(*loaded).empty());
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    CHECK(read_file(dir.path() / "sync" / "step-00000002" / file) ==
          read_file(dir.path() / "async" / "step-00000002" / file));

  // A second save while one is pending finishes the first: both end up committed, in order.
  async.save(3, state_at(3), meta_at(3));
  async.save(4, state_at(4), meta_at(4));
  CHECK(async_manager.load_latest()->step == 3);
  CHECK(async.wait().has_value());
  CHECK(async_manager.load_latest()->step == 4);
  CHECK_FALSE(async.wait().has_value());

  // Bad arguments fail at save(), in the caller, before any thread starts.
  std::map<std::string, StateDict> bad{{"../up", StateDict()}};
  CHECK(test::error_if_any([&] { async.save(5, bad); }).find("section name '../up'") != std::string::npos);
  CHECK_FALSE(async.pending());
}

TEST_CASE("async checkpoint: SIGKILL during background writes always leaves the previous checkpoint complete") {
  test::ScratchDir dir("async_checkpoint_kill");
  const fs::path run = dir.path() / "run";
  // The child reports each step whose commit returned, in shared memory.
  auto* committed = static_cast<std::atomic<int64_t>*>(
      ::mmap(nullptr, sizeof(std::atomic<int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(committed != MAP_FAILED);
  new (committed) std::atomic<int64_t>(0);
  const auto start = std::chrono::steady_clock::now();
  CheckpointManager(dir.path() / "timing").save(1, state_at(1), meta_at(1));
  const int64_t save_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  const int64_t max_delay_us = std::clamp<int64_t>(6 * save_us, 50'000, 2'000'000);
  std::mt19937 rng(77);
  constexpr int kTrials = 30;
  int64_t previous = 0;
  int advanced = 0;
  test::LatestFileHistory latest_history;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::cout.flush();
    std::cerr.flush();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The snapshot's copies use the thread pool, whose worker threads did not survive fork():
      // one thread runs everything inline.
      set_num_threads(1);
      try {
        CheckpointManager manager(run, 2);
        AsyncCheckpointer async(manager);
        auto latest = manager.load_latest();
        for (int64_t step = latest ? latest->step + 1 : 1;; ++step) {
          async.save(step, state_at(step), meta_at(step));
          // "Training" goes on while the writer writes; each boundary polls for the commit.
          while (!async.poll()) std::this_thread::sleep_for(std::chrono::microseconds(200));
          committed->store(step);
        }
      } catch (const std::exception& e) {
        std::cerr << "async kill-test child failed: " << e.what() << std::endl;
      }
      ::_exit(3);
    }
    const int64_t delay_us = trial % 5 == 0 ? rng() % 5000 : rng() % max_delay_us;
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("trial ", trial, ", killed after ", delay_us, " us");
    REQUIRE_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL), "the child exited on its own (status ",
                    status, ")");
    std::optional<Checkpoint> c;
    const std::string error = test::error_if_any([&] { c = CheckpointManager(run, 2).load_latest(); });
    REQUIRE_MESSAGE(error.empty(), error);
    if (!c) {
      CHECK(previous == 0);
      continue;
    }
    CHECK_MESSAGE(!latest_history.unexpected_fallback(*c), c->note);
    CHECK_MESSAGE(mismatch(*c).empty(), "step ", c->step, ": ", mismatch(*c));
    CHECK(c->step >= committed->load());
    CHECK(c->step >= previous);
    if (c->step > previous) ++advanced;
    previous = c->step;
  }
  MESSAGE("one save takes ", save_us, " us; last step ", previous, ", ", advanced, " of ", kTrials, " trials advanced");
  CHECK(advanced >= kTrials / 4);
}
