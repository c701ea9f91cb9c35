/*
 * A full disk (ENOSPC) or a failing device (EIO) at each durable-storage call of a checkpoint
 * save (nn/serialize/io_faults.h): for every k, the k-th write, fsync or rename of one save
 * fails, until the save has fewer than k of them. After each failure the save threw an error
 * naming the path and strerror, the previous checkpoint is still the one that loads (with its
 * contents), and nothing of the failed save is left in the run directory; after each success
 * the new one loads. Synchronous and asynchronous saves alike.
 */
#include <doctest/doctest.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "nn/serialize/io_faults.h"
#include "nn/serialize/serialize.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::nn;
namespace fs = std::filesystem;

namespace {

std::map<std::string, StateDict> state_at(int64_t step) {
  Tensor weight = full({64}, static_cast<double>(step), kFloat32);
  Tensor counter = full({}, static_cast<double>(step), kInt64);
  StateDict model, optimizer;
  model.insert("weight", weight);
  optimizer.insert("step", counter);
  return {{"model", model}, {"optimizer", optimizer}};
}

std::string meta_at(int64_t step) { return "{\"step\":" + std::to_string(step) + "}"; }

void check_holds(const Checkpoint& c, int64_t step) {
  CHECK(c.step == step);
  CHECK(c.note.empty());
  CHECK(c.metadata == meta_at(step));
  CHECK(equal(c.sections.at("model").at("weight"), full({64}, static_cast<double>(step), kFloat32)));
  CHECK(c.sections.at("optimizer").at("step").item<int64_t>() == step);
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// Steps 1 and 2 saved (keep_last 2: saving step 3 then prunes step 1). With `stale_step_3`, also
// a step 3 that `latest` does not name (a run resumed from step 2), which saving step 3 replaces
// by exchanging the two directories.
CheckpointManager fresh_run(const fs::path& dir, bool stale_step_3 = false) {
  fs::remove_all(dir);
  CheckpointManager manager(dir, 2);
  manager.save(1, state_at(1), meta_at(1));
  manager.save(2, state_at(2), meta_at(2));
  if (stale_step_3) {
    CheckpointManager(dir, 0).save(3, state_at(1), meta_at(3));  // keep_last 0: prunes nothing
    write_file_atomically(dir / "latest", "step-00000002\n");
  }
  return manager;
}

struct Outcome {
  int failures = 0;   // saves that threw
  int absorbed = 0;   // faults that hit the prune after the commit (a warning, not a failure)
  int64_t calls = 0;  // the save's calls of the kind: the first k that did not fire, less one
};

// Saves step 3 with the k-th call of `op` failing with `error`, for k = 1, 2, ... until the save
// makes fewer than k such calls. `save` runs one save of step 3 (synchronous or not).
template <class Save>
Outcome fail_each_call(const fs::path& dir, IoOp op, int error, Save save, bool stale_step_3 = false) {
  Outcome out;
  const std::string text = std::strerror(error);
  for (int64_t k = 1;; ++k) {
    CAPTURE(k);
    CheckpointManager manager = fresh_run(dir, stale_step_3);
    arm_io_fault({op, k, error});
    std::string message;
    try {
      save(manager);
    } catch (const Error& e) {
      message = e.what();
    }
    const bool fired = io_fault_fired();
    disarm_io_fault();
    if (!fired) {
      REQUIRE(message.empty());
      check_holds(*manager.load_latest(), 3);
      out.calls = k - 1;
      return out;
    }
    if (message.empty()) {
      // Only the clean-up after the commit may absorb the fault: step 3 is committed.
      ++out.absorbed;
      CHECK(manager.last_save_warning().find(text) != std::string::npos);
      check_holds(*manager.load_latest(), 3);
      continue;
    }
    ++out.failures;
    CAPTURE(message);
    CHECK(message.find(text) != std::string::npos);
    CHECK(message.find(dir.string()) != std::string::npos);
    check_holds(*manager.load_latest(), 2);
    // Nothing of the failed save remains: no step-3 directory (but the stale one, when the
    // failure came before it was replaced), no temporary file or directory.
    std::set<std::string> expected{"latest", "step-00000001", "step-00000002"};
    if (stale_step_3 && fs::exists(dir / "step-00000003")) {
      CHECK(manager.load(3).sections.at("optimizer").at("step").item<int64_t>() == 1);  // the stale one
      expected.insert("step-00000003");
    }
    CHECK(entries(dir) == expected);
    // And the next save, with the disk healthy again, succeeds.
    save(manager);
    check_holds(*manager.load_latest(), 3);
  }
}

void sync_save(CheckpointManager& m) { m.save(3, state_at(3), meta_at(3)); }

void async_save(CheckpointManager& m) {
  AsyncCheckpointer async(m);
  async.save(3, state_at(3), meta_at(3));
  async.wait();
}

}  // namespace

TEST_CASE("checkpoint faults: ENOSPC and EIO at every write, fsync and rename of a save keep the previous checkpoint") {
  test::ScratchDir scratch("ckpt_faults_sync");
  const fs::path dir = scratch.path() / "run";
  for (IoOp op : {IoOp::kWrite, IoOp::kFsync, IoOp::kRename}) {
    for (int error : {ENOSPC, EIO}) {
      CAPTURE(io_op_name(op));
      CAPTURE(error);
      const Outcome o = fail_each_call(dir, op, error, sync_save);
      // A save of two sections writes at least: 2 sections + meta.json + latest; fsyncs each
      // of them and the directories; renames each into place, the step directory too.
      CHECK(o.calls >= 4);
      CHECK(o.failures + o.absorbed == o.calls);
      CHECK(o.failures >= 4);
      CHECK(o.absorbed <= 1);  // the prune of step 1: its rename, or the fsync after it
    }
  }
}

TEST_CASE("checkpoint faults: the k-th system call of any kind, synchronous and asynchronous saves") {
  test::ScratchDir scratch("ckpt_faults_any");
  const fs::path dir = scratch.path() / "run";
  const Outcome sync = fail_each_call(dir, IoOp::kAny, EIO, sync_save);
  const Outcome async = fail_each_call(dir, IoOp::kAny, ENOSPC, async_save);
  CHECK(sync.calls == async.calls);  // the same protocol, on another thread
  CHECK(sync.failures >= 12);
  CHECK(async.failures == sync.failures);
}

TEST_CASE("checkpoint faults: arm_io_fault rejects a count below 1 and a non-positive errno") {
  CHECK_THROWS_WITH_AS(arm_io_fault({IoOp::kWrite, 0, EIO}), doctest::Contains("nth must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(arm_io_fault({IoOp::kWrite, 1, 0}), doctest::Contains("positive errno"), Error);
  CHECK(io_op_from_name("fsync") == IoOp::kFsync);
  CHECK(!io_op_from_name("sync").has_value());
}

TEST_CASE("checkpoint faults: re-saving a step that exists (the directories exchanged) keeps the previous checkpoint") {
  test::ScratchDir scratch("ckpt_faults_resave");
  const fs::path dir = scratch.path() / "run";
  for (int error : {ENOSPC, EIO}) {
    CAPTURE(error);
    const Outcome o = fail_each_call(dir, IoOp::kAny, error, sync_save, /*stale_step_3=*/true);
    CHECK(o.failures >= 12);
    CHECK(o.absorbed <= 2);
  }
}

namespace {

// Two "ranks" of a group as threads of this process, agreeing through a barrier (what the
// all-reduce of train's ranks is over MPI).
struct ThreadBarrier {
  std::mutex mutex;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  bool all = true, verdict = true;

  bool all_ok(bool ok) {
    std::unique_lock<std::mutex> lock(mutex);
    const int64_t g = generation;
    all = all && ok;
    if (++arrived == 2) {
      verdict = all;
      all = true;
      arrived = 0;
      ++generation;
      cv.notify_all();
      return verdict;
    }
    // The next generation cannot complete before this rank arrives again: verdict stays.
    cv.wait(lock, [&] { return generation != g; });
    return verdict;
  }
};

// Runs `body(manager)` on both ranks at once; returns each rank's error ("" if none).
template <class Body>
std::array<std::string, 2> on_both_ranks(const fs::path& dir, ThreadBarrier& barrier, Body body) {
  std::array<std::string, 2> errors;
  auto rank = [&](int r) {
    CheckpointManager manager(dir, 2, {r, 2, [&](bool ok) { return barrier.all_ok(ok); }});
    try {
      body(manager, r);
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  return errors;
}

std::map<std::string, StateDict> rank_state(int64_t step, int rank) { return state_at(step * 10 + rank); }

}  // namespace

TEST_CASE("checkpoint faults: a group's save failing on either rank keeps the previous checkpoint on both") {
  test::ScratchDir scratch("ckpt_faults_group");
  const fs::path dir = scratch.path() / "run";
  ThreadBarrier barrier;
  int failures = 0;
  for (int64_t k = 1;; ++k) {
    CAPTURE(k);
    fs::remove_all(dir);
    on_both_ranks(dir, barrier, [](CheckpointManager& m, int r) {
      m.save(1, rank_state(1, r), meta_at(1));
      m.save(2, rank_state(2, r), meta_at(2));
    });
    // Counted over both ranks: which rank's call is the k-th varies, the outcome may not.
    arm_io_fault({IoOp::kAny, k, ENOSPC});
    const auto errors = on_both_ranks(dir, barrier, [](CheckpointManager& m, int r) {
      m.save(3, rank_state(3, r), meta_at(3));
    });
    const bool fired = io_fault_fired();
    disarm_io_fault();
    const int64_t expected = errors[0].empty() ? 3 : 2;
    CHECK(errors[0].empty() == errors[1].empty());  // all or nothing
    if (!fired) {
      CHECK(errors[0].empty());
      break;
    }
    if (!errors[0].empty()) {
      ++failures;
      // The rank whose call failed names the path and the error; the other says it failed elsewhere.
      const std::string both = errors[0] + errors[1];
      CHECK(both.find(std::strerror(ENOSPC)) != std::string::npos);
      CHECK(both.find("failed on another rank") != std::string::npos);
      std::set<std::string> left = entries(dir);
      CHECK(left == std::set<std::string>{"latest", "step-00000001", "step-00000002"});
    }
    on_both_ranks(dir, barrier, [&](CheckpointManager& m, int r) {
      const Checkpoint c = *m.load_latest();
      CHECK(c.step == expected);
      CHECK(c.note.empty());
      CHECK(c.sections.at("optimizer").at("step").item<int64_t>() == expected * 10 + r);
    });
  }
  CHECK(failures >= 12);
}
