/*
 * Sequential, ModuleList and ModuleDict: ownership, indexing with Python's negative indices,
 * checked downcasts whose errors name the types, and Sequential's chained forward.
 */
#include "nn/layers/containers.h"

#include <optional>
#include <typeinfo>

#include "nn/layers/activation.h"
#include "nn/layers/linear.h"
#include "ops/ops.h"

namespace loom::nn {
namespace detail {

void IndexedModules::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_module(name, module);
  modules_[std::stoul(name)] = std::move(module);  // children are named "0", "1", ...
}

void IndexedModules::push_back(std::shared_ptr<Module> module) {
  LOOM_CHECK(module != nullptr, type_name(), "::push_back: null module (at index ", modules_.size(), ")");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

size_t IndexedModules::checked_index(int64_t index) const {
  const auto n = static_cast<int64_t>(modules_.size());
  LOOM_CHECK(index >= -n && index < n, type_name(), ": index ", index, " is out of range for ", n, " module",
             n == 1 ? "" : "s");
  return static_cast<size_t>(index < 0 ? index + n : index);
}

void IndexedModules::throw_wrong_type(int64_t index, const Module& module, const std::string& wanted) const {
  LOOM_FAIL(type_name(), "::at<", wanted, ">(", index, "): the module at that index is a ",
            module.type_name(), ", not a ", wanted);
}

}  // namespace detail

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& module : modules) push_back(module);
}

namespace {

// The activations linear_activation fuses on CUDA: the tanh GELU, in cuBLASLt's epilogue, and
// ReLU, in place on the GEMM's output (not the erf GELU).
std::optional<Activation> epilogue_activation(const Module& m) {
  if (typeid(m) == typeid(ReLU)) return Activation::Relu;
  if (typeid(m) == typeid(GELU) && static_cast<const GELU&>(m).approximate() == "tanh")
    return Activation::GeluTanh;
  return std::nullopt;
}

// A plain Linear followed by a ReLU or a tanh GELU, on a CUDA input that fits the Linear: one
// linear_activation, whose bias cuBLASLt adds in the GEMM's epilogue, with the tanh GELU there
// too (GELU_AUX_BIAS) and ReLU in place on the output (cuBLASLt's RELU epilogue would turn NaN
// into 0), instead of a second op with its own output and autograd node. Elsewhere (the CPU, whose
// linear_activation is the same ops unfused; the erf GELU, which cuBLASLt has no epilogue for;
// subclasses of Linear, which may do more) nothing to fuse.
std::optional<Activation> fusable_activation(const Module& layer, const Module& next, const Tensor& x) {
  if (!x.defined() || !x.is_cuda() || typeid(layer) != typeid(Linear)) return std::nullopt;
  const auto& linear = static_cast<const Linear&>(layer);
  if (x.dim() < 1 || x.size(-1) != linear.in_features()) return std::nullopt;  // Linear names the error
  return epilogue_activation(next);
}

// Linear, tanh GELU, Linear (a transformer's MLP) fuse further into one linear_activation_linear,
// whose backward computes the first layer's pre-activation gradient and bias gradient in the
// second GEMM's epilogue (DGELU_BGRAD). Not when the second Linear is itself followed by an
// activation it could fuse with (the next triple or pair takes it), nor for ReLU: cuBLASLt's
// ReLU backward reads a bit mask Loom does not keep, so the pair is as fast.
bool fuses_with_next_linear(const Sequential& seq, size_t i, Activation activation) {
  if (activation != Activation::GeluTanh || i + 2 >= seq.size()) return false;
  const Module& second = *seq.ptr(static_cast<int64_t>(i + 2));
  if (typeid(second) != typeid(Linear)) return false;
  const auto& first = static_cast<const Linear&>(*seq.ptr(static_cast<int64_t>(i)));
  if (static_cast<const Linear&>(second).in_features() != first.out_features())
    return false;  // Linear names it
  return i + 3 >= seq.size() || !epilogue_activation(*seq.ptr(static_cast<int64_t>(i + 3)));
}

}  // namespace

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  const size_t n = size();
  for (size_t i = 0; i < n; ++i) {
    Module& layer = *ptr(static_cast<int64_t>(i));
    if (i + 1 < n) {
      if (auto activation = fusable_activation(layer, *ptr(static_cast<int64_t>(i + 1)), x)) {
        const auto& linear = static_cast<const Linear&>(layer);
        if (fuses_with_next_linear(*this, i, *activation)) {
          const auto& second = static_cast<const Linear&>(*ptr(static_cast<int64_t>(i + 2)));
          x = linear_activation_linear(x, linear.weight, linear.bias, second.weight, second.bias,
                                       *activation);
          i += 2;
          continue;
        }
        x = linear_activation(x, linear.weight, linear.bias, *activation);
        ++i;
        continue;
      }
    }
    x = layer.forward(x);
  }
  return x;
}

ModuleList::ModuleList(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& module : modules) push_back(module);
}

ModuleDict::ModuleDict(const std::vector<Item>& items) {
  for (const auto& [key, module] : items) insert(key, module);
}

void ModuleDict::insert(std::string key, std::shared_ptr<Module> module) {
  LOOM_CHECK(module != nullptr, "ModuleDict::insert('", key, "'): null module");
  LOOM_CHECK(!index_.contains(key), "ModuleDict::insert: key '", key,
             "' is already present (a registered module cannot be replaced)");
  register_module(key, module);  // checks the name (non-empty, no '.')
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(module));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& item : items_) out.push_back(item.first);
  return out;
}

size_t ModuleDict::checked_index(const std::string& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) {
    std::string keys;
    for (const auto& item : items_) keys += (keys.empty() ? "'" : ", '") + item.first + "'";
    LOOM_FAIL("ModuleDict: no key '", key, "' (keys: ", keys.empty() ? "none" : keys, ")");
  }
  return it->second;
}

void ModuleDict::throw_wrong_type(const std::string& key, const Module& module,
                                  const std::string& wanted) const {
  LOOM_FAIL("ModuleDict::at<", wanted, ">('", key, "'): the module under that key is a ", module.type_name(),
            ", not a ", wanted);
}

void ModuleDict::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_module(name, module);
  items_[index_.at(name)].second = std::move(module);
}

}  // namespace loom::nn
