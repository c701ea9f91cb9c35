/*
 * Intra-op parallelism. Loom's kernels and oneDNN share one thread pool: OpenMP (Debian's
 * oneDNN is built on GOMP), so there are never two pools spinning against each other on the
 * same cores. set_num_threads(n) sets it for both; the default is the number of cores.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>

#include <omp.h>

namespace loom {

void set_num_threads(int n);
int get_num_threads();

// Below this many elements of simple work an elementwise loop runs on one thread: waking
// the pool costs a few microseconds.
inline constexpr int64_t kParallelGrain = 32768;

// Calls f(begin, end) on disjoint chunks covering [begin, end), in parallel when the range
// is larger than `grain`. Chunks are contiguous and at least `grain` long, so f can vectorise.
// Exceptions thrown by f on a worker are rethrown on the caller's thread.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int threads = get_num_threads();
  if (n <= grain || threads == 1 || omp_in_parallel()) {
    f(begin, end);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
#pragma omp critical(loom_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace loom
