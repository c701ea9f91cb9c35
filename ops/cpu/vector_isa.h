/*
 * Run-time choice of the vector instructions for Loom's own loops, so that a portable build
 * (-DLOOM_NATIVE=OFF: the x86-64 baseline, SSE2) still runs AVX2 code on a CPU that has it.
 *
 * with_vector_isa(body) calls body() from a function compiled for AVX2 + FMA when the CPU has
 * them. That function is `flatten`: GCC inlines the whole call tree of body (the elementwise
 * loop, its functor) into it and vectorises it for AVX2; the same source also runs unchanged on
 * older CPUs. Only auto-vectorised loops gain: Eigen chooses its packets when it is compiled.
 *
 * The dispatch exists where LOOM_VECTOR_DISPATCH is defined (portable optimised builds; see the
 * top-level CMakeLists.txt) and the baseline lacks AVX2. Native builds already compile for this
 * CPU, and sanitizer builds skip it. A CPU with AVX-512 (F, BW, VL and DQ) gets a third copy,
 * compiled for it: GCC then uses 512-bit vectors, as a native build on that CPU does. On a Zen 5
 * VM they ran the softmax and the tanh GELU 1.35x faster than the AVX2 copy, level with the
 * native build (docs/cpu-threads.md).
 */
#pragma once

#include <ostream>
#include <string>
#include <utility>

namespace loom::cpu {

// In increasing order: each includes the ones before it.
enum class VectorIsa { Baseline, Avx2, Avx512 };

// The instructions with_vector_isa uses: the best the CPU has, capped by LOOM_CPU_ISA
// (baseline, avx2 or avx512) in the environment and by set_vector_isa.
VectorIsa vector_isa();
const char* vector_isa_name(VectorIsa isa);
// The choice LOOM_CPU_ISA = setting (null or empty: unset) makes on a CPU whose best is `best`:
// the setting, or best where that is less. Any other value is written to `warnings` and ignored (as PyTorch
// does with ATEN_CPU_CAPABILITY): the variable is first read inside a kernel, where an exception
// would end the process.
VectorIsa vector_isa_from_setting(const char* setting, VectorIsa best, std::ostream& warnings);
// For reports (bench's "isa" field): in a portable build the choice above, e.g. "avx512 (run-time)";
// in any other build the vector instructions the compiler was told to use, e.g. "avx512 (compiled)",
// since with_vector_isa then changes nothing.
std::string vector_isa_description();
// Caps the choice for the whole process, e.g. to compare AVX2 and baseline code in one run.
// Returns the ISA now in use (never more than the CPU has or this build can dispatch to).
VectorIsa set_vector_isa(VectorIsa wanted);

#if defined(LOOM_VECTOR_DISPATCH) && !defined(__AVX2__) && defined(__x86_64__)
#define LOOM_VECTOR_DISPATCH_ACTIVE 1
template <class Body>
__attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt"), flatten)) decltype(auto) run_avx2(const Body& body) {
  return body();
}
template <class Body>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2,popcnt"),
               flatten)) decltype(auto)
run_avx512(const Body& body) {
  return body();
}
#endif

template <class Body>
inline decltype(auto) with_vector_isa(const Body& body) {
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  const VectorIsa isa = vector_isa();
  if (isa == VectorIsa::Avx512) return run_avx512(body);
  if (isa == VectorIsa::Avx2) return run_avx2(body);
#endif
  return body();
}

}  // namespace loom::cpu
