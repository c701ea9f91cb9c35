/*
 * Intra-op parallelism. Loom's kernels and oneDNN share one thread pool: OpenMP (Debian's
 * oneDNN is built on GOMP), so there are never two pools spinning against each other on the
 * same cores. set_num_threads(n) sets it for both; the default is the number of cores.
 *
 * The cost model lives here, in threads_for(): work is split only while every thread gets at
 * least a grain of it, because waking the pool has a fixed cost (docs/cpu-threads.md has the
 * measured cost of one parallel region per thread count). Small ops run on the calling thread.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>

#include <omp.h>

namespace loom {

void set_num_threads(int n);
// The thread count a process starts with: OMP_NUM_THREADS when set, else the number of physical
// cores in the calling thread's affinity mask (SMT siblings once; taskset and mpirun's binding
// respected).
int default_num_threads();
// The threads an op started on the calling thread may use: set_num_threads's value, lowered by
// a ThreadLimitGuard alive on this thread.
int get_num_threads();

// Caps the calling thread's intra-op threads at `n` while alive. Threads that run ops beside
// the training loop (the data loader's workers) hold one with n = 1: W workers that each opened
// a full team would put W times the cores' worth of threads on the cores.
class ThreadLimitGuard {
 public:
  explicit ThreadLimitGuard(int n);
  ~ThreadLimitGuard();
  ThreadLimitGuard(const ThreadLimitGuard&) = delete;
  ThreadLimitGuard& operator=(const ThreadLimitGuard&) = delete;

 private:
  int saved_;
};

// Below this many elements of simple work an elementwise loop runs on one thread: waking
// the pool costs a few microseconds (PyTorch's at::parallel_for uses the same grain).
inline constexpr int64_t kParallelGrain = 32768;

// The cost model: how many threads `work` units get when each thread must have at least `grain`
// of them: min(get_num_threads(), ceil(work / grain)), and 1 inside a parallel region (no
// nested teams).
inline int threads_for(int64_t work, int64_t grain) {
  if (work <= grain || omp_in_parallel()) return 1;
  const int64_t wanted = (work + grain - 1) / std::max<int64_t>(grain, 1);
  return static_cast<int>(std::min<int64_t>(get_num_threads(), wanted));
}

// Sets the OpenMP team size of the calling thread (what oneDNN and Eigen read through
// omp_get_max_threads) for a scope, so that a library call uses the threads threads_for chose.
class OpenMpTeamSize {
 public:
  explicit OpenMpTeamSize(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OpenMpTeamSize() { omp_set_num_threads(saved_); }
  OpenMpTeamSize(const OpenMpTeamSize&) = delete;
  OpenMpTeamSize& operator=(const OpenMpTeamSize&) = delete;

 private:
  int saved_;
};

// Calls f(begin, end) on disjoint chunks covering [begin, end), in parallel when the range
// is larger than `grain`. Chunks are contiguous and at least `grain` long, so f can vectorise.
// Exceptions thrown by f on a worker are rethrown on the caller's thread.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  const int chunks = threads_for(n, grain);
  if (chunks == 1) {
    f(begin, end);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(chunks)
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
  }  // implicit barrier: waits for every chunk to finish before `error` is read
  if (error) std::rethrow_exception(error);
}

}  // namespace loom
