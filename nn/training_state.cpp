/* Generator and counter state as StateDicts (see training_state.h). */
#include "nn/training_state.h"

#include <bit>

#include "ops/ops.h"

namespace loom::nn {
namespace {

Tensor int64_scalar(int64_t value) { return scalar_tensor(value, TensorOptions(DType::Int64)); }

int64_t int64_of(const StateDict& state, const std::string& key, const char* what) {
  const Tensor* t = state.find(key);
  LOOM_CHECK(t != nullptr, what, ": missing key '", key, "'");
  LOOM_CHECK(t->defined() && t->numel() == 1 && t->dtype() == DType::Int64, what, ": '", key,
             "' must be a one-element int64 tensor, got ", t->defined() ? t->sizes() : IntArrayRef{}, " ",
             t->defined() ? t->dtype() : DType::Int64);
  return t->to(kCPU).contiguous().data_ptr<int64_t>()[0];
}

}  // namespace

StateDict rng_state_dict(const Generator& generator) {
  return StateDict{{"seed", int64_scalar(std::bit_cast<int64_t>(generator.seed()))},
                   {"offset", int64_scalar(std::bit_cast<int64_t>(generator.offset()))}};
}

void load_rng_state_dict(const StateDict& state, Generator& generator) {
  const int64_t seed = int64_of(state, "seed", "load_rng_state_dict");
  const int64_t offset = int64_of(state, "offset", "load_rng_state_dict");
  generator.set_state(std::bit_cast<uint64_t>(seed), std::bit_cast<uint64_t>(offset));
}

StateDict counters_to_state_dict(const std::map<std::string, int64_t>& counters) {
  StateDict out;
  for (const auto& [name, value] : counters) out.insert(name, int64_scalar(value));
  return out;
}

std::map<std::string, int64_t> counters_from_state_dict(const StateDict& state) {
  std::map<std::string, int64_t> out;
  for (const auto& [name, tensor] : state) out[name] = int64_of(state, name, "counters_from_state_dict");
  return out;
}

}  // namespace loom::nn
