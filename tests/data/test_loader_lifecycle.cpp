/*
 * Loader lifecycle: workers are started and joined, never leaked, whether a pass runs to the
 * end, is abandoned mid-epoch, fails in a worker, is restarted, or the loader is destroyed
 * while workers are blocked on a full prefetch window or busy in a slow read. Threads are
 * counted in /proc/self/task. Built with -DLOOM_SANITIZE=thread (or address) this test is the
 * sanitizer check of the loader (see docs/data.md).
 */
#include <dirent.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;

namespace {

int thread_count() {
  // ThreadSanitizer starts a helper thread of its own when the first thread is created: create
  // one first, so that baselines include it.
  static const bool warmed = [] {
    pid_t tid = 0;
    std::thread([&] { tid = gettid(); }).join();
    // join() returns a moment before the kernel removes the thread's task: wait until it has,
    // or a baseline taken now counts it and the test's end finds one thread fewer.
    const std::string task = "/proc/self/task/" + std::to_string(tid);
    for (int i = 0; i < 1000 && access(task.c_str(), F_OK) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  }();
  (void)warmed;
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// The thread count once it has settled at `expected`, or after a second. A joined thread can
// stay listed in /proc for a moment after pthread_join returns (the kernel reaps it just
// after waking the joiner); a leaked thread stays forever.
int threads_settled_at(int expected) {
  int n = thread_count();
  for (int i = 0; i < 1000 && n != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = thread_count();
  }
  return n;
}

// Examples [index, index, index]; throws at `bad`; sleeps `delay_us` in every get().
class SlowDataset : public Dataset {
 public:
  SlowDataset(int64_t n, int64_t bad = -1, int delay_us = 0) : n_(n), bad_(bad), delay_us_(delay_us) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    LOOM_CHECK(index != bad_, "bad sample ", index);
    return {full({3}, static_cast<double>(index), kFloat32), scalar_tensor(index, kInt64)};
  }

 private:
  int64_t n_, bad_;
  int delay_us_;
};

}  // namespace

TEST_CASE("no worker thread outlives its pass or its loader") {
  const int baseline = thread_count();
  auto ds = std::make_shared<SlowDataset>(400);
  auto failing = std::make_shared<SlowDataset>(400, 250);
  auto options = DataLoaderOptions().batch_size(16).shuffle(true).workers(4).prefetch(4);
  for (int round = 0; round < 20; ++round) {
    {  // full passes
      DataLoader loader(ds, options);
      for (int epoch = 0; epoch < 2; ++epoch)
        for (Batch& b : loader) CHECK(b.size() > 0);
    }
    CHECK(threads_settled_at(baseline) == baseline);
    {  // abandoned mid-epoch, restarted, abandoned again, destroyed mid-pass
      DataLoader loader(ds, options);
      for (Batch& b : loader)
        if (b.index == 2) break;
      auto it = loader.begin();
      CHECK(it->index == 3);
      CHECK(threads_settled_at(baseline + 4) == baseline + 4);
      loader.load_state({5, 7, 0});
      CHECK(threads_settled_at(baseline) == baseline);
      it = loader.begin();
      CHECK(it->index == 7);
    }
    CHECK(threads_settled_at(baseline) == baseline);
    {  // a worker fails: the error arrives, all workers are joined before it does
      DataLoader loader(failing, DataLoaderOptions(options).shuffle(false));
      CHECK_THROWS_AS(
          [&] {
            for (Batch& b : loader) (void)b;
          }(),
          Error);
      CHECK(threads_settled_at(baseline) == baseline);
      CHECK_THROWS_AS(loader.begin(), Error);  // and again, from the failed batch
    }
    CHECK(threads_settled_at(baseline) == baseline);
  }
}

TEST_CASE("destroying a loader whose workers are blocked or busy joins them promptly") {
  const int baseline = thread_count();
  {  // workers blocked: the window is full and the consumer never asks for more
    DataLoader loader(std::make_shared<SlowDataset>(10000),
                      DataLoaderOptions().batch_size(8).workers(3).prefetch(2));
    auto it = loader.begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(threads_settled_at(baseline) == baseline);
  const auto start = std::chrono::steady_clock::now();
  {  // workers busy in slow reads (2 ms per example)
    DataLoader loader(std::make_shared<SlowDataset>(10000, -1, 2000),
                      DataLoaderOptions().batch_size(4).workers(4).prefetch(8));
    auto it = loader.begin();
  }
  // Each worker finishes the one batch it is making (4 x 2 ms), no more.
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 2.0);
  CHECK(threads_settled_at(baseline) == baseline);
}

TEST_CASE("loaders in several threads at once, sharing one dataset") {
  const int baseline = thread_count();
  test::ScratchDir dir("shared");
  const std::string path =
      test::write_synthetic(dir, "s.h5", 256, 1, 8, 8, {.chunk_rows = 16, .deflate_level = 1});
  auto ds = std::make_shared<Hdf5ImageDataset>(path, Hdf5ImageOptions{.chunk_cache_bytes = 4 * 16 * 64});
  auto cached = std::make_shared<CachedDataset>(ds, 8 * 1024);
  std::atomic<int64_t> rows{0};
  std::vector<std::thread> users;
  for (int u = 0; u < 3; ++u) {
    users.emplace_back([&, u] {
      DataLoader loader(
          u == 0 ? std::shared_ptr<const Dataset>(cached) : ds,
          DataLoaderOptions().batch_size(32).shuffle(true).seed(static_cast<uint64_t>(u)).workers(2));
      for (int epoch = 0; epoch < 3; ++epoch)
        for (Batch& b : loader) rows += b.size();
    });
  }
  for (auto& t : users) t.join();
  CHECK(rows == 3 * 3 * 256);
  CHECK(threads_settled_at(baseline) == baseline);
}
