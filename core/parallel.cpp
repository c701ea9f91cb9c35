/* Thread count of the shared OpenMP pool (also used by oneDNN). */
#include "core/parallel.h"

#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace loom {

namespace {
int& configured_threads() {
  static int n = [] {
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
  configured_threads() = n;
  omp_set_num_threads(n);
}

int get_num_threads() { return configured_threads(); }

}  // namespace loom
