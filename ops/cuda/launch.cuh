/*
 * The one way Loom launches a kernel: launch<kernel>(config, args...).
 *
 * With nvcc it is the <<<grid, block, shared, stream>>> launch followed by cudaGetLastError().
 * In the emulated build (core/cuda/emulated) it runs the kernel on the CPU emulator, after
 * checking that every pointer argument is device memory. Op code never writes <<<>>> itself,
 * so both builds share every line of kernel code.
 *
 * config.threads says whether the threads of a block communicate (barriers, shared memory,
 * warp intrinsics: kCooperative, the default) or not (kIndependent, e.g. grid-stride
 * elementwise loops). It changes nothing on a GPU; the emulator runs independent blocks much
 * faster, and reports a barrier or warp intrinsic in a kernel launched as independent.
 */
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace loom::cuda {

enum class BlockThreads { kIndependent, kCooperative };

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;  // dynamic shared memory per block
  cudaStream_t stream = nullptr;
  BlockThreads threads = BlockThreads::kCooperative;
};

// Blocks for a grid-stride loop over n elements: enough to fill an H100 several times over
// (132 SMs x 2048 threads / 256 = 1056 blocks), not more.
inline unsigned grid_for(int64_t n, int64_t block = 256, int64_t max_blocks = 4096) {
  int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// A grid-stride loop over n elements whose threads never communicate: `block` threads a block,
// grid_for's blocks.
inline LaunchConfig grid_stride(int64_t n, cudaStream_t stream, int block = 256) {
  return LaunchConfig{grid_for(n, block), static_cast<unsigned>(block), 0, stream, BlockThreads::kIndependent};
}

#if defined(LOOM_CUDA_EMULATED)
namespace detail {
// "copy_kernel<float, double>" out of this function's signature, for messages.
template <auto Kernel>
const char* kernel_name() {
  static const std::string name = [] {
    std::string s = __PRETTY_FUNCTION__;
    auto begin = s.find("Kernel = ");
    begin = begin == std::string::npos ? 0 : begin + 9;
    auto end = s.find_first_of(";]", begin);
    return s.substr(begin, end - begin);
  }();
  return name.c_str();
}
}  // namespace detail
#endif

template <auto Kernel, class... Args>
cudaError_t launch(const LaunchConfig& config, const Args&... args) {
#if defined(LOOM_CUDA_EMULATED)
  const char* name = detail::kernel_name<Kernel>();
  int index = 0;
  (
      [&] {
        if constexpr (std::is_pointer<Args>::value) loom_emu::check_kernel_pointer(name, index, args);
        ++index;
      }(),
      ...);
  // The arguments are copied, as a launch copies them: a captured launch runs again at each
  // replay of its graph, long after this call's arguments are gone.
  auto body = [args...] { Kernel(args...); };
  loom_emu::LaunchSpec spec{name,
                            reinterpret_cast<const void*>(Kernel),
                            config.grid,
                            config.block,
                            config.shared_bytes,
                            config.stream,
                            config.threads == BlockThreads::kIndependent ? loom_emu::BlockThreads::kIndependent
                                                                         : loom_emu::BlockThreads::kCooperative};
  return loom_emu::launch(spec, std::move(body));
#else
  Kernel<<<config.grid, config.block, config.shared_bytes, config.stream>>>(args...);
  return cudaGetLastError();
#endif
}

}  // namespace loom::cuda
