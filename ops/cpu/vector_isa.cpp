/* Which vector instructions with_vector_isa uses (vector_isa.h). */
#include "ops/cpu/vector_isa.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <string_view>

namespace loom::cpu {

namespace {

// The best this CPU and build can use.
VectorIsa supported() {
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return VectorIsa::Avx512;
  if (avx2) return VectorIsa::Avx2;
#endif
  return VectorIsa::Baseline;
}

std::atomic<VectorIsa>& chosen() {
  // First read inside a kernel, often on a worker thread of a parallel region, where an
  // exception would end the process: a bad setting is reported and ignored instead.
  static std::atomic<VectorIsa> isa{
      vector_isa_from_setting(std::getenv("LOOM_CPU_ISA"), supported(), std::cerr)};
  return isa;
}

}  // namespace

VectorIsa vector_isa_from_setting(const char* setting, VectorIsa best, std::ostream& warnings) {
  if (setting == nullptr || *setting == '\0') return best;
  const std::string_view v(setting);
  for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512})
    if (v == vector_isa_name(isa)) return std::min(isa, best);
  warnings << "loom: LOOM_CPU_ISA='" << v << "' is none of baseline, avx2 and avx512; ignored, using "
           << vector_isa_name(best) << "\n";
  return best;
}

VectorIsa vector_isa() {
  return chosen().load(std::memory_order_relaxed);
}

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::Avx512:
      return "avx512";
    case VectorIsa::Avx2:
      return "avx2";
    case VectorIsa::Baseline:
      break;
  }
  return "baseline";
}

std::string vector_isa_description() {
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  return std::string(vector_isa_name(vector_isa())) + " (run-time)";
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  return "avx512 (compiled)";
#elif defined(__AVX2__)
  return "avx2 (compiled)";
#else
  return "baseline (compiled)";
#endif
}

VectorIsa set_vector_isa(VectorIsa wanted) {
  const VectorIsa isa = std::min(wanted, supported());
  chosen().store(isa, std::memory_order_relaxed);
  return isa;
}

}  // namespace loom::cpu
