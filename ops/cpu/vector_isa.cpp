/* Which vector instructions with_vector_isa uses (vector_isa.h). */
#include "ops/cpu/vector_isa.h"

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
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
      __builtin_cpu_supports("bmi2"))
    return VectorIsa::Avx2;
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
  if (v == "baseline") return VectorIsa::Baseline;
  if (v == "avx2") return best;
  warnings << "loom: LOOM_CPU_ISA='" << v << "' is neither baseline nor avx2; ignored, using "
           << vector_isa_name(best) << "\n";
  return best;
}

VectorIsa vector_isa() {
  return chosen().load(std::memory_order_relaxed);
}

const char* vector_isa_name(VectorIsa isa) {
  return isa == VectorIsa::Avx2 ? "avx2" : "baseline";
}

VectorIsa set_vector_isa(VectorIsa wanted) {
  const VectorIsa isa = wanted == VectorIsa::Avx2 ? supported() : VectorIsa::Baseline;
  chosen().store(isa, std::memory_order_relaxed);
  return isa;
}

}  // namespace loom::cpu
