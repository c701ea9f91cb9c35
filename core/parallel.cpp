/* Thread count of the shared OpenMP pool (also used by oneDNN). */
#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"

namespace loom {

namespace {
// The cores this process may run on: distinct (package, core) pairs among the CPUs of its
// affinity mask, so that SMT siblings count once and `taskset`, a container's CPU set or
// mpirun's binding are respected. 0 when the topology cannot be read.
int cores_in_affinity_mask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 0;
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    const std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    long package = -1, core = -1;
    std::ifstream(topology + "physical_package_id") >> package;
    std::ifstream(topology + "core_id") >> core;
    if (core < 0) return CPU_COUNT(&mask);  // no topology (some containers): every CPU counts
    cores.emplace(package, core);
  }
  return static_cast<int>(cores.size());
}
}  // namespace

int default_num_threads() {
  // Respect OMP_NUM_THREADS when set; otherwise one thread per core this process may use (not
  // half the CPUs, as PyTorch 1.13 assumes SMT and gets 1 thread on a 2-core VM; not every
  // logical CPU, as a second thread on a core's SMT sibling slows the vector kernels down).
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
  const int cores = cores_in_affinity_mask();
  return cores > 0 ? cores : std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

namespace {
// Atomic: parallel_for reads it on every call, from any thread (the data loader's workers run
// ops too), while another thread may call set_num_threads; a plain int made that a data race
// (ThreadSanitizer: tests/core/test_parallel.cpp).
std::atomic<int>& configured_threads() {
  static std::atomic<int> n = [] {
    const int chosen = default_num_threads();
    omp_set_num_threads(chosen);
    return chosen;
  }();
  return n;
}

// 0: no cap on this thread.
thread_local int thread_limit = 0;
}  // namespace

void set_num_threads(int n) {
  LOOM_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  configured_threads().store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

int get_num_threads() {
  const int n = configured_threads().load(std::memory_order_relaxed);
  return thread_limit > 0 ? std::min(n, thread_limit) : n;
}

ThreadLimitGuard::ThreadLimitGuard(int n) : saved_(thread_limit) {
  LOOM_CHECK(n >= 1, "ThreadLimitGuard: expected a limit of at least 1 thread, got ", n);
  thread_limit = saved_ > 0 ? std::min(saved_, n) : n;
}

ThreadLimitGuard::~ThreadLimitGuard() {
  thread_limit = saved_;
}

}  // namespace loom
