/*
 * The typed op table, generated from op_list.def: the Op enum, op names, each op's kernel
 * signature and gradient attributes, and register/get functions that check the signature at
 * compile time.
 * get_kernel throws "gelu has no CUDA kernel" (etc.) for a missing (op, device) pair.
 */
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "core/dispatch.h"
#include "ops/kernel_types.h"
#include "ops/op_attrs.h"

namespace loom {

enum class Op : uint16_t {
#define LOOM_OP(name, signature, attrs) name,
#include "ops/op_list.def"
#undef LOOM_OP
  kCount
};

inline constexpr size_t kNumOps = static_cast<size_t>(Op::kCount);

inline constexpr std::array<std::string_view, kNumOps> kOpNames = {
#define LOOM_OP(name, signature, attrs) #name,
#include "ops/op_list.def"
#undef LOOM_OP
};

// True for ops that have kernels (everything but views).
inline constexpr std::array<bool, kNumOps> kOpHasKernel = {
#define LOOM_OP(name, signature, attrs) !std::is_same_v<signature, NoKernel>,
#include "ops/op_list.def"
#undef LOOM_OP
};

static_assert(kOpNames.size() == kNumOps && kOpHasKernel.size() == kNumOps,
              "op_list.def expanded into tables of different lengths");
static_assert(kNumOps <= KernelTable::kMaxOps, "raise KernelTable::kMaxOps");

constexpr std::string_view op_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }

template <Op op>
struct OpTraits;
#define LOOM_OP(name, signature, attributes) \
  template <>                                \
  struct OpTraits<Op::name> {                \
    using Kernel = signature;                \
    using Attrs = attributes;                \
  };
#include "ops/op_list.def"
#undef LOOM_OP

template <Op op>
void register_kernel(DeviceType device, typename OpTraits<op>::Kernel kernel) {
  kernel_table().set(static_cast<size_t>(op), device, reinterpret_cast<KernelTable::RawKernel>(kernel));
}

// Registers every CPU kernel (and, when built, every CUDA kernel). Called once, lazily, by the
// first lookup of a kernel; safe to call again.
void ensure_kernels_registered();

bool has_kernel(Op op, DeviceType device);

[[noreturn]] void throw_missing_kernel(Op op, DeviceType device);

template <Op op>
typename OpTraits<op>::Kernel get_kernel(Device device) {
  auto raw = kernel_table().get(static_cast<size_t>(op), device.type());
  if (!raw) [[unlikely]] {
    ensure_kernels_registered();  // first use: fill the table, then look again
    raw = kernel_table().get(static_cast<size_t>(op), device.type());
    if (!raw) throw_missing_kernel(op, device.type());
  }
  return reinterpret_cast<typename OpTraits<op>::Kernel>(raw);
}


}  // namespace loom
