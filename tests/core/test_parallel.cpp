/*
 * parallel_for and the shared thread count (core/parallel.h). The thread count is read by
 * every kernel on whatever thread runs it (a data loader worker, the training loop), so it
 * is also checked under concurrent use: the ThreadSanitizer build (tools/check-sanitizers)
 * reports a data race there if it is not atomic.
 */
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

using namespace loom;

namespace {
// Restores the thread count a test changed.
struct ThreadCountGuard {
  int saved = get_num_threads();
  ~ThreadCountGuard() { set_num_threads(saved); }
};
}  // namespace

TEST_CASE("parallel_for: every index of the range exactly once, on 1 to 4 threads") {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 4}) {
    CAPTURE(threads);
    set_num_threads(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1001}}) {
      CAPTURE(n);
      std::vector<int> hits(static_cast<size_t>(n) + 10, 0);
      // Chunks are disjoint, so each element has one writer; begin 5 checks the offset.
      parallel_for(5, 5 + n, /*grain=*/16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)] += 1;
      });
      for (int64_t i = 0; i < static_cast<int64_t>(hits.size()); ++i)
        CHECK(hits[static_cast<size_t>(i)] == (i >= 5 && i < 5 + n ? 1 : 0));
    }
  }
}

TEST_CASE("parallel_for: an exception on a worker reaches the caller") {
  ThreadCountGuard guard;
  set_num_threads(2);
  auto run = [] {
    parallel_for(0, 1000, 10, [](int64_t b, int64_t e) {
      if (b <= 999 && 999 < e) LOOM_FAIL("chunk [", b, ", ", e, ") failed");
    });
  };
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("failed"), Error);
}

TEST_CASE("parallel_for: a nested call runs on the calling thread") {
  ThreadCountGuard guard;
  set_num_threads(2);
  std::vector<int> inner_calls(2, 0);
  parallel_for(0, 2, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      // Inside a parallel region the inner loop must not start a team of its own: one call.
      parallel_for(0, 1000, 10, [&](int64_t, int64_t) { inner_calls[static_cast<size_t>(i)] += 1; });
  });
  CHECK(inner_calls == std::vector<int>{1, 1});
}

TEST_CASE("set_num_threads while other threads read the thread count") {
  ThreadCountGuard guard;
  set_num_threads(1);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  // Readers as a data loader's workers are: threads of their own asking for the thread count.
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&] {
      while (!stop.load()) {
        const int n = get_num_threads();
        if (n != 1 && n != 2) bad.fetch_add(1);
      }
    });
  for (int i = 0; i < 2000; ++i) set_num_threads(1 + i % 2);
  stop.store(true);
  for (auto& t : readers) t.join();  // waits for the readers to see `stop`
  CHECK(bad.load() == 0);
  CHECK_THROWS_WITH_AS(set_num_threads(0), doctest::Contains("at least 1 thread"), Error);
}
