/*
 * Sequential, ModuleList and ModuleDict: ownership, indexing with Python's negative indices,
 * checked downcasts whose errors name the types, and Sequential's chained forward.
 */
#include "nn/layers/containers.h"

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

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& module : *this) x = module->forward(x);
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
