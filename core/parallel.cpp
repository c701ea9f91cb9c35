/* Thread count of the shared OpenMP pool (also used by oneDNN). */
#include "core/parallel.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace loom {

namespace {
// Atomic: parallel_for reads it on every call, from any thread (the data loader's workers run
// ops too), while another thread may call set_num_threads; a plain int made that a data race
// (ThreadSanitizer: tests/core/test_parallel.cpp).
std::atomic<int>& configured_threads() {
  static std::atomic<int> n = [] {
    // Respect OMP_NUM_THREADS when set; otherwise one thread per core (not half, as PyTorch
    // 1.13 assumes SMT and gets 1 thread on a 2-core VM).
    int from_env = 0;
    if (const char* env = std::getenv("OMP_NUM_THREADS")) from_env = std::atoi(env);
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    int chosen = from_env > 0 ? from_env : std::max(cores, 1);
    omp_set_num_threads(chosen);
    return chosen;
  }();
  return n;
}
}  // namespace

void set_num_threads(int n) {
  LOOM_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  configured_threads().store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

int get_num_threads() { return configured_threads().load(std::memory_order_relaxed); }

}  // namespace loom
