/*
 * parallel_for and the shared thread count (core/parallel.h). The thread count is read by
 * every kernel on whatever thread runs it (a data loader worker, the training loop), so it
 * is also checked under concurrent use: the ThreadSanitizer build (tools/check-sanitizers)
 * reports a data race there if it is not atomic.
 */
#include <doctest/doctest.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
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

TEST_CASE("threads_for: the cost model gives each thread at least a grain, up to the thread count") {
  ThreadCountGuard guard;
  set_num_threads(4);
  CHECK(threads_for(0, 100) == 1);
  CHECK(threads_for(100, 100) == 1);  // one grain: the calling thread
  CHECK(threads_for(101, 100) == 2);  // a little more than a grain: two threads
  CHECK(threads_for(350, 100) == 4);
  CHECK(threads_for(100000, 100) == 4);  // never more than set_num_threads
  set_num_threads(1);
  CHECK(threads_for(100000, 100) == 1);
  set_num_threads(4);
  int inside = 0;
  parallel_for(0, 2, 1, [&](int64_t b, int64_t) {
    if (b == 0) inside = threads_for(100000, 100);  // no team inside a team
  });
  CHECK(inside == 1);
}

TEST_CASE("ThreadLimitGuard caps the calling thread only, nests, and restores") {
  ThreadCountGuard guard;
  set_num_threads(4);
  {
    ThreadLimitGuard two(2);
    CHECK(get_num_threads() == 2);
    {
      ThreadLimitGuard eight(8);  // a wider inner limit does not lift the outer one
      CHECK(get_num_threads() == 2);
      ThreadLimitGuard one(1);
      CHECK(get_num_threads() == 1);
    }
    CHECK(get_num_threads() == 2);
    int other = 0;
    std::thread([&] { other = get_num_threads(); }).join();
    CHECK(other == 4);  // another thread is not capped
    // A chunked loop on the capped thread splits in at most 2.
    std::atomic<int> chunks{0};
    parallel_for(0, 1000, 1, [&](int64_t, int64_t) { chunks.fetch_add(1); });
    CHECK(chunks.load() <= 2);
  }
  CHECK(get_num_threads() == 4);
  CHECK_THROWS_WITH_AS(ThreadLimitGuard(0), doctest::Contains("at least 1 thread"), Error);
}

TEST_CASE("OpenMpTeamSize sets the calling thread's OpenMP team size for a scope") {
  ThreadCountGuard guard;
  set_num_threads(3);
  const int before = omp_get_max_threads();
  {
    OpenMpTeamSize team(1);
    CHECK(omp_get_max_threads() == 1);
    int seen = 0;
#pragma omp parallel
    {
#pragma omp single
      seen = omp_get_num_threads();
    }  // implicit barrier: the team has finished before `seen` is read
    CHECK(seen == 1);
  }
  CHECK(omp_get_max_threads() == before);
}

TEST_CASE("the default thread count is the cores of the affinity mask") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  const char* env = std::getenv("OMP_NUM_THREADS");
  const std::string saved_env = env ? env : "";
  unsetenv("OMP_NUM_THREADS");
  const int all = default_num_threads();
  CHECK(all >= 1);
  CHECK(all <= CPU_COUNT(&saved));  // SMT siblings count once
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);  // as `taskset -c <first>` would
  CHECK(default_num_threads() == 1);
  setenv("OMP_NUM_THREADS", "3", 1);
  CHECK(default_num_threads() == 3);  // the environment wins
  REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);
  if (env) {
    setenv("OMP_NUM_THREADS", saved_env.c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
}
