/*
 * CPU kernel of amp_unscale_and_check_ (ops/amp_ops.h): one pass over all the values. They are
 * laid end to end as one index space and split among the threads, each reading every value
 * once to test it for inf/NaN and scale it (torch's _amp_foreach_non_finite_check_and_unscale_).
 * One pass matters because it reads as many bytes as the optimizer step itself.
 */
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

// inf and NaN are the values whose exponent bits are all ones. Testing the bits rather than
// std::isfinite keeps the test correct under -ffinite-math-only and lets the loop vectorise.
template <class Bits, Bits kExponentMask, class T, class Compute>
bool scale_span(T* p, int64_t n, Compute inv_scale) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, &p[i], sizeof(Bits));
    bad |= (bits & kExponentMask) == kExponentMask;
    p[i] = static_cast<T>(static_cast<Compute>(p[i]) * inv_scale);
  }
  return bad;
}

bool scale_range(const Tensor& t, int64_t begin, int64_t end, float inv_scale) {
  const int64_t n = end - begin;
  switch (t.dtype()) {
    case kFloat32:
      return scale_span<uint32_t, 0x7f800000u>(t.data_ptr<float>() + begin, n, inv_scale);
    case kFloat64:  // computed in double, times the float32 1/scale (torch's opmath)
      return scale_span<uint64_t, 0x7ff0000000000000ull>(t.data_ptr<double>() + begin, n,
                                                         static_cast<double>(inv_scale));
    case kBFloat16:
      return scale_span<uint16_t, uint16_t{0x7f80}>(t.data_ptr<BFloat16>() + begin, n, inv_scale);
    default:
      LOOM_FAIL("amp_unscale_and_check_: unsupported dtype ", t.dtype());
  }
}

void amp_unscale_and_check_kernel(const std::vector<Tensor>& values, const Tensor& found_inf,
                                  const Tensor& inv_scale_tensor) {
  const float inv_scale = inv_scale_tensor.data_ptr<float>()[0];
  std::vector<int64_t> starts(values.size() + 1, 0);  // value i covers [starts[i], starts[i+1])
  for (size_t i = 0; i < values.size(); ++i) starts[i + 1] = starts[i] + values[i].numel();
  std::atomic<bool> found{false};
  // Grain: reading and writing one value is a few cycles, so chunks need to be long enough to
  // pay for waking the pool (the same rule as the elementwise kernels).
  parallel_for(0, starts.back(), kParallelGrain, [&](int64_t begin, int64_t end) {
    size_t i =
        static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
    bool bad = false;
    for (int64_t pos = begin; pos < end; ++i) {
      const int64_t stop = std::min(end, starts[i + 1]);
      bad |= scale_range(values[i], pos - starts[i], stop - starts[i], inv_scale);
      pos = stop;
    }
    if (bad) found.store(true, std::memory_order_relaxed);
  });
  if (found.load(std::memory_order_relaxed)) *found_inf.data_ptr<float>() = 1.0f;
}

// torch's _amp_update_scale_cpu_: the products in double, stored in float32.
void amp_update_scale_kernel(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  float& current = scale.data_ptr<float>()[0];
  int32_t& tracker = growth_tracker.data_ptr<int32_t>()[0];
  if (found_inf.data_ptr<float>()[0] != 0.0f) {
    current = static_cast<float>(static_cast<double>(current) * backoff_factor);
    tracker = 0;
  } else if (tracker + 1 == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(current) * growth_factor);
    if (std::isfinite(grown)) current = grown;
    tracker = 0;
  } else {
    ++tracker;
  }
}

}  // namespace

void register_amp_kernels() {
  register_kernel<Op::amp_unscale_and_check_>(DeviceType::CPU, amp_unscale_and_check_kernel);
  register_kernel<Op::amp_update_scale_>(DeviceType::CPU, amp_update_scale_kernel);
}

}  // namespace loom::cpu
