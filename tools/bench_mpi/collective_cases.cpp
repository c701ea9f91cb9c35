/*
 * Bench case `allreduce`: the bus bandwidth of an f32 all-reduce, the backend's native one
 * against the textbook ring (distributed/ring.h), for S = 4 KB, 16 KB, ..., 64 MB.
 *
 * Bandwidths as nccl-tests defines them (nccl-tests/doc/PERFORMANCE.md):
 *   algbw = S / t                       (bytes of the tensor per second of one all-reduce)
 *   busbw = algbw * 2 (N-1) / N         (what each rank's link carries: a ring all-reduce moves
 *                                        2 (N-1)/N * S bytes through every rank)
 * busbw does not depend on N for an optimal algorithm, so it compares with the link's (here:
 * shared memory's) peak bandwidth. t is the median sample of the slowest rank's time.
 */
#include <cstdio>
#include <string>

#include "distributed/process_group.h"
#include "ops/ops.h"
#include "tools/bench_mpi/bench_mpi.h"

namespace loom::bench_mpi {
namespace {

std::string size_name(int64_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "MB" : std::to_string(bytes >> 10) + "KB";
}

std::vector<Metric> allreduce(distributed::ProcessGroup& world, const TimingOptions& options) {
  using distributed::Algorithm;
  const int n = world.size();
  std::vector<Metric> metrics;
  for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    // Zeros: every call sums into the same tensor, and random values would grow by a factor N
    // per call into infinities; an f32 addition takes the same time for any normal value.
    Tensor tensor = zeros({bytes / 4});
    for (Algorithm algorithm : {Algorithm::Native, Algorithm::Ring}) {
      world.set_algorithm(algorithm);
      double seconds = time_collective(world, [&] { world.all_reduce(tensor); }, options);
      double algbw = static_cast<double>(bytes) / seconds / 1e9;
      double busbw = algbw * 2.0 * (n - 1) / n;
      const char* name = algorithm == Algorithm::Native ? "native" : "ring";
      metrics.push_back({"busbw", busbw, "GB/s",
                         {{"algorithm", name},
                          {"bytes", bytes},
                          {"size", size_name(bytes)},
                          {"ranks", n},
                          {"time_us", seconds * 1e6},
                          {"algbw_gbps", algbw}}});
    }
  }
  world.set_algorithm(Algorithm::Native);
  return metrics;
}

}  // namespace

std::vector<DistributedCase> collective_cases() {
  return {
      {"allreduce", "f32 all-reduce bus bandwidth, native vs ring, 4 KB .. 64 MB (nccl-tests busbw)", allreduce},
  };
}

}  // namespace loom::bench_mpi
