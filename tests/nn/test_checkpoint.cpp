/*
 * Crash-safe files and training checkpoints: write_file_atomically's failure behaviour, the
 * checkpoint directory layout, keep_last pruning, the fallback when `latest` is missing or
 * names something broken, and the point of it all — a child process saving in a loop is
 * SIGKILLed at random moments, and every time load_latest() must still return a complete
 * checkpoint whose contents match its step, never going backwards.
 */
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>
#include <utility>

#include "nn/serialize/serialize.h"
#include "tests/nn/checkpoint_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::nn;
namespace fs = std::filesystem;

namespace {


std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The error's message, "" when none is thrown (some checks expect success).
template <class F>
std::string error_of(F&& f) {
  return test::error_if_any(std::forward<F>(f));
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// A small training state whose every value is derived from `step`.
std::map<std::string, StateDict> state_for(int64_t step) {
  StateDict model, optimizer;
  model.insert("fc.weight", full({3, 4}, static_cast<double>(step), kFloat32));
  model.insert("fc.bias", full({4}, static_cast<double>(-step), kFloat64));
  optimizer.insert("step", scalar_tensor(step, kInt64));
  return {{"model", model}, {"optimizer", optimizer}};
}

void check_state(const Checkpoint& c, int64_t step) {
  INFO("checkpoint ", c.path.string());
  CHECK(c.step == step);
  REQUIRE(c.sections.size() == 2);
  CHECK(c.sections.at("model").keys() == std::vector<std::string>{"fc.weight", "fc.bias"});
  CHECK(c.sections.at("model").at("fc.weight").to_vector<float>() ==
        std::vector<float>(12, static_cast<float>(step)));
  CHECK(c.sections.at("model").at("fc.bias").to_vector<double>() ==
        std::vector<double>(4, static_cast<double>(-step)));
  CHECK(c.sections.at("optimizer").at("step").item<int64_t>() == step);
  CHECK(c.metadata == "{\"step\":" + std::to_string(step) + "}");
}

std::string meta_for(int64_t step) {
  return "{\"step\": " + std::to_string(step) + "}";
}

}  // namespace

TEST_CASE("atomic_file: writes, replaces, and leaves the old file on failure") {
  test::ScratchDir dir("checkpoint");
  const fs::path file = dir.path() / "data.bin";
  write_file_atomically(file, std::string("first"));
  CHECK(read_file(file) == "first");
  write_file_atomically(file, [](FileSink& sink) {
    sink.write("sec", 3);
    sink.write(std::string_view("ond"));
    CHECK(sink.bytes_written() == 6);
  });
  CHECK(read_file(file) == "second");
  CHECK(entries(dir.path()) == std::vector<std::string>{"data.bin"});  // no temporary left

  // A writer that fails half-way: its exception comes through, the old content stays, the
  // temporary file is gone.
  CHECK_THROWS_WITH_AS(write_file_atomically(file,
                                             [](FileSink& sink) {
                                               sink.write(std::string_view("partial"));
                                               throw std::runtime_error("writer gave up");
                                             }),
                       "writer gave up", std::runtime_error);
  CHECK(read_file(file) == "second");
  CHECK(entries(dir.path()) == std::vector<std::string>{"data.bin"});

  const std::string missing =
      error_of([&] { write_file_atomically(dir.path() / "nope" / "x", std::string("x")); });
  CHECK(contains(missing, (dir.path() / "nope").string()));
  CHECK(contains(missing, "No such file or directory"));

  CHECK(contains(error_of([&] { read_file(dir.path() / "absent"); }), "No such file or directory"));
  CHECK(contains(error_of([&] { read_file(dir.path()); }), "is not a regular file"));
  write_file_atomically(dir.path() / "empty", std::string());
  CHECK(read_file(dir.path() / "empty").empty());
}

TEST_CASE("checkpoint: save writes the documented layout and load_latest returns it") {
  test::ScratchDir dir("checkpoint");
  CheckpointManager manager(dir.path() / "run");
  CHECK_FALSE(manager.load_latest().has_value());  // a fresh run: nothing, and no error
  CHECK(manager.steps().empty());

  const fs::path saved = manager.save(123, state_for(123), meta_for(123));
  CHECK(saved == dir.path() / "run" / "step-00000123");
  CHECK(entries(dir.path() / "run") == std::vector<std::string>{"latest", "step-00000123"});
  CHECK(read_file(dir.path() / "run" / "latest") == "step-00000123\n");
  CHECK(entries(saved) ==
        std::vector<std::string>{"meta.json", "model.safetensors", "optimizer.safetensors"});
  // Each section is a plain safetensors file.
  CHECK(load_safetensors(saved / "model.safetensors").tensors.keys() ==
        std::vector<std::string>{"fc.weight", "fc.bias"});

  auto latest = manager.load_latest();
  REQUIRE(latest.has_value());
  check_state(*latest, 123);
  CHECK(latest->note.empty());
  CHECK(latest->path == saved);
  check_state(manager.load(123), 123);
  CHECK(contains(error_of([&] { manager.load(7); }), "no checkpoint for step 7"));

  // Metadata is any JSON value, handed back compact with its key order kept.
  manager.save(124, state_for(124), R"({"z": [1, 2.5, "x"], "a": {"nested": true}})");
  CHECK(manager.load_latest()->metadata == R"({"z":[1,2.5,"x"],"a":{"nested":true}})");
  CHECK(manager.steps() == std::vector<int64_t>{123, 124});
}

TEST_CASE("checkpoint: keep_last prunes the oldest, and only older than the one saved") {
  test::ScratchDir dir("checkpoint");
  CheckpointManager manager(dir.path(), 2);
  for (int64_t step : {10, 20, 30, 40}) manager.save(step, state_for(step), meta_for(step));
  CHECK(manager.steps() == std::vector<int64_t>{30, 40});
  check_state(*manager.load_latest(), 40);

  // Resumed from step 30 (say 40 diverged): saving 35 keeps 30 and 35; 40 is not older than
  // 35, so it is not this save's to delete, but `latest` no longer names it.
  manager.save(35, state_for(35), meta_for(35));
  CHECK(manager.steps() == std::vector<int64_t>{30, 35, 40});
  check_state(*manager.load_latest(), 35);

  CheckpointManager keep_all(dir.path() / "all", 0);
  for (int64_t step = 0; step < 5; ++step) keep_all.save(step, state_for(step), meta_for(step));
  CHECK(keep_all.steps().size() == 5);
  CheckpointManager keep_one(dir.path() / "one", 1);
  for (int64_t step = 0; step < 3; ++step) keep_one.save(step, state_for(step), meta_for(step));
  CHECK(keep_one.steps() == std::vector<int64_t>{2});
}

TEST_CASE("checkpoint: load_latest falls back to the newest complete checkpoint and says why") {
  test::ScratchDir dir("checkpoint");
  CheckpointManager manager(dir.path(), 5);
  for (int64_t step : {1, 2, 3}) manager.save(step, state_for(step), meta_for(step));

  SUBCASE("latest missing") {
    fs::remove(dir.path() / "latest");
    auto c = manager.load_latest();
    REQUIRE(c.has_value());
    check_state(*c, 3);
    CHECK(contains(c->note, "'latest' is missing"));
    CHECK(contains(c->note, "loaded step-00000003, the newest complete checkpoint"));
  }
  SUBCASE("latest names a deleted checkpoint") {
    fs::remove_all(dir.path() / "step-00000003");
    auto c = manager.load_latest();
    REQUIRE(c.has_value());
    check_state(*c, 2);
    CHECK(contains(c->note, "'latest' names step-00000003, which is incomplete"));
    CHECK(contains(c->note, "meta.json"));
  }
  SUBCASE("latest holds garbage") {
    write_file_atomically(dir.path() / "latest", std::string("../../etc\n"));
    auto c = manager.load_latest();
    REQUIRE(c.has_value());
    check_state(*c, 3);
    CHECK(contains(c->note, "'latest' does not name a step directory"));
  }
  SUBCASE("the newest has a truncated section, the one before it no meta.json") {
    const fs::path model = dir.path() / "step-00000003" / "model.safetensors";
    fs::resize_file(model, fs::file_size(model) - 4);
    fs::remove(dir.path() / "step-00000002" / "meta.json");
    auto c = manager.load_latest();
    REQUIRE(c.has_value());
    check_state(*c, 1);
    CHECK(contains(c->note, "'latest' names step-00000003, which is incomplete"));
    CHECK(contains(c->note, "meta.json recorded"));
    CHECK(contains(c->note, "loaded step-00000001"));
  }
  SUBCASE("a section file replaced by one of the same size but corrupt content") {
    const fs::path model = dir.path() / "step-00000003" / "model.safetensors";
    std::string bytes = read_file(model);
    bytes[8] = '#';  // the header's opening brace
    write_file_atomically(model, bytes);
    auto c = manager.load_latest();
    REQUIRE(c.has_value());
    check_state(*c, 2);
    CHECK(contains(c->note, "not valid JSON"));
  }
  SUBCASE("nothing complete is an error, not a fresh start") {
    for (const char* step : {"step-00000001", "step-00000002", "step-00000003"})
      fs::remove(dir.path() / step / "meta.json");
    const std::string message = error_of([&] { manager.load_latest(); });
    CHECK(contains(message, "holds checkpoints but none is complete"));
    CHECK(contains(message, "step-00000001 is incomplete"));
  }
}

TEST_CASE("checkpoint: re-saving a step replaces it; leftovers of interrupted saves are removed") {
  test::ScratchDir dir("checkpoint");
  CheckpointManager manager(dir.path());
  manager.save(5, state_for(5), meta_for(5));
  // What an interrupted save, prune and pointer update leave behind.
  fs::create_directories(dir.path() / ".tmp-step-00000006-999-0");
  write_file_atomically(dir.path() / ".tmp-step-00000006-999-0" / "model.safetensors", std::string("partial"));
  fs::create_directories(dir.path() / ".tmp-delete-step-00000001-999-1");
  write_file_atomically(dir.path() / ".latest.tmp-999-2", std::string("step-0000"));

  // Re-saving step 5 with different content (same step, e.g. after resuming from 4).
  auto replacement = state_for(5);
  replacement["model"].set("fc.weight", full({3, 4}, 55.0, kFloat32));
  manager.save(5, replacement, meta_for(5));
  CHECK(entries(dir.path()) == std::vector<std::string>{"latest", "step-00000005"});
  auto c = manager.load_latest();
  REQUIRE(c.has_value());
  CHECK(c->sections.at("model").at("fc.weight").to_vector<float>() == std::vector<float>(12, 55.0f));
}

TEST_CASE("checkpoint: bad arguments are rejected before anything is written") {
  test::ScratchDir dir("checkpoint");
  CHECK(contains(error_of([&] { CheckpointManager(dir.path(), -1); }), "keep_last must be >= 0"));
  CheckpointManager manager(dir.path() / "run");
  CHECK(contains(error_of([&] { manager.save(-1, state_for(1)); }), "step must be >= 0, got -1"));
  CHECK(contains(error_of([&] {
                   manager.save(1, {{"../escape", StateDict()}});
                 }),
                 "section name '../escape'"));
  CHECK(contains(error_of([&] { manager.save(1, {{".hidden", StateDict()}}); }), "section name '.hidden'"));
  CHECK(contains(error_of([&] { manager.save(1, {{"", StateDict()}}); }), "section name ''"));
  CHECK(
      contains(error_of([&] { manager.save(1, state_for(1), "{oops"); }), "metadata_json is not valid JSON"));
  CHECK_FALSE(fs::exists(dir.path() / "run"));
  // A section that cannot be written leaves no trace either.
  StateDict broken;
  broken.insert("w", Tensor());
  CHECK(contains(error_of([&] { manager.save(1, {{"model", broken}}); }), "tensor 'w' is undefined"));
  CHECK(entries(dir.path() / "run").empty());
  CHECK_FALSE(manager.load_latest().has_value());
}

namespace {

constexpr int64_t kKillFloats = 1 << 20;  // 4 MiB of float32 per checkpoint: saves take a while
constexpr int kKillKeepLast = 2;

// The kill test's training state for `step`. Filled through raw pointers, not ops: the
// child of fork() has only this thread, and the parent's OpenMP pool must not be touched.
std::map<std::string, StateDict> kill_test_state(int64_t step) {
  Tensor weight = empty({kKillFloats}, kFloat32);
  std::fill_n(weight.data_ptr<float>(), kKillFloats, static_cast<float>(step));
  Tensor moments = empty({kKillFloats / 4}, kFloat64);
  std::fill_n(moments.data_ptr<double>(), kKillFloats / 4, -static_cast<double>(step));
  Tensor counter = empty({}, kInt64);
  *counter.data_ptr<int64_t>() = step;
  StateDict model, optimizer;
  model.insert("weight", weight);
  optimizer.insert("exp_avg", moments);
  optimizer.insert("step", counter);
  return {{"model", model}, {"optimizer", optimizer}};
}

// The child of the kill test: resumes from the latest checkpoint and saves step after step
// until it is killed. It never returns into doctest: it leaves by _exit (or by SIGKILL).
[[noreturn]] void kill_test_child(const fs::path& dir) {
  try {
    CheckpointManager manager(dir, kKillKeepLast);
    auto latest = manager.load_latest();
    for (int64_t step = latest ? latest->step + 1 : 1;; ++step)
      manager.save(step, kill_test_state(step), meta_for(step));
  } catch (const std::exception& e) {
    std::cerr << "kill-test child failed: " << e.what() << std::endl;
  }
  ::_exit(3);
}

// The checks of the parent: every value derived from the step, exactly.
std::string kill_test_mismatch(const Checkpoint& c) {
  const auto& model = c.sections.at("model");
  const auto& optimizer = c.sections.at("optimizer");
  const Tensor& w = model.at("weight");
  const Tensor& m = optimizer.at("exp_avg");
  if (w.numel() != kKillFloats || m.numel() != kKillFloats / 4) return "wrong sizes";
  const float* wp = w.data_ptr<float>();
  const double* mp = m.data_ptr<double>();
  for (int64_t i = 0; i < kKillFloats; ++i)
    if (wp[i] != static_cast<float>(c.step))
      return "weight[" + std::to_string(i) + "] = " + std::to_string(wp[i]);
  for (int64_t i = 0; i < kKillFloats / 4; ++i)
    if (mp[i] != -static_cast<double>(c.step))
      return "exp_avg[" + std::to_string(i) + "] = " + std::to_string(mp[i]);
  if (optimizer.at("step").item<int64_t>() != c.step) return "step tensor differs";
  if (c.metadata != "{\"step\":" + std::to_string(c.step) + "}") return "metadata " + c.metadata;
  return "";
}

}  // namespace

TEST_CASE("checkpoint: SIGKILL at random moments always leaves a complete, matching checkpoint") {
  test::ScratchDir dir("checkpoint");
  const fs::path run = dir.path() / "run";
  CheckpointManager manager(run, kKillKeepLast);
  // Kill delays scale with how long a save takes here (fsync speed varies a lot between
  // machines), so that the kills land at every phase of the save and the child progresses.
  const auto start = std::chrono::steady_clock::now();
  CheckpointManager(dir.path() / "timing").save(1, kill_test_state(1), meta_for(1));
  const int64_t save_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  const int64_t max_delay_us = std::clamp<int64_t>(8 * save_us, 100'000, 3'000'000);
  std::mt19937 rng(4242);
  constexpr int kTrials = 40;
  int64_t previous_step = 0;
  test::LatestFileHistory latest_history;
  int fallbacks = 0, advanced = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::cout.flush();
    std::cerr.flush();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) kill_test_child(run);

    // Mostly delays of a few saves; some very short, to kill during start-up and the first save.
    const int64_t delay_us = trial % 5 == 0 ? rng() % 3000 : rng() % max_delay_us;
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    INFO("trial ", trial, ", killed after ", delay_us, " us");
    REQUIRE_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL),
                    "the child exited on its own (status ", status, "): it failed to save");

    std::optional<Checkpoint> c;
    const std::string error = error_of([&] { c = manager.load_latest(); });
    REQUIRE_MESSAGE(error.empty(), error);
    if (!c) {
      // Only possible while nothing was ever saved.
      CHECK(previous_step == 0);
      continue;
    }
    if (latest_history.unexpected_fallback(*c)) ++fallbacks;
    const std::string bad = kill_test_mismatch(*c);
    CHECK_MESSAGE(bad.empty(), "step ", c->step, ": ", bad);
    CHECK(c->step >= previous_step);
    if (c->step > previous_step) ++advanced;
    previous_step = c->step;
    // Pruning keeps the directory bounded whatever the moment of the kill: at most the kept
    // ones plus one just renamed into place before `latest` moved.
    CHECK(manager.steps().size() <= static_cast<size_t>(kKillKeepLast) + 1);
  }
  MESSAGE("one save takes ", save_us, " us; last step ", previous_step, ", ", advanced, " trials advanced, ",
          fallbacks, " fallbacks");
  // `latest` only ever names complete checkpoints, so no kill should have needed a fallback.
  CHECK(fallbacks == 0);
  // The child made progress, so the kills did land during saves.
  CHECK(advanced >= kTrials / 4);

  // One clean save removes every leftover of the killed ones.
  auto state = state_for(previous_step + 1);
  manager.save(previous_step + 1, state, meta_for(previous_step + 1));
  for (const std::string& name : entries(run)) CHECK_FALSE(name.starts_with("."));
}
