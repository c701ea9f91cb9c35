/* Which vector instructions with_vector_isa uses (vector_isa.h). */
#include "ops/cpu/vector_isa.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

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

VectorIsa from_environment(VectorIsa best) {
  const char* env = std::getenv("LOOM_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string_view v(env);
  LOOM_CHECK(v == "baseline" || v == "avx2", "LOOM_CPU_ISA: expected baseline or avx2, got '", v, "'");
  return v == "baseline" ? VectorIsa::Baseline : best;
}

std::atomic<VectorIsa>& chosen() {
  static std::atomic<VectorIsa> isa{from_environment(supported())};
  return isa;
}

}  // namespace

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
