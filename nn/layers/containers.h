/*
 * The container modules, as torch.nn.Sequential, ModuleList and ModuleDict: modules built at
 * run time (a variable number of blocks, a model read from a config) and registered under
 * their index ("0", "1", ...) or key, so that their parameters get the dotted names torch
 * gives them ("blocks.0.attn.qkv.weight").
 *
 * Modules are neither copyable nor movable (nn/module.h), so a container owns its elements
 * through std::shared_ptr:
 *
 *   nn::Sequential mlp(std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::ReLU>(),
 *                      std::make_shared<nn::Linear>(512, 10));
 *   auto& head = mlp.emplace_back<nn::Linear>(10, 10);   // built in place, returned by reference
 *   mlp.at<nn::Linear>(0).weight                          // checked downcast
 */
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

namespace detail {

// What Sequential and ModuleList share: an indexed list of owned modules, registered as
// children "0", "1", ... in order.
class IndexedModules : public Module {
 public:
  using Iterator = std::vector<std::shared_ptr<Module>>::const_iterator;

  // Appends `module` under the name str(size()). Throws if it is null.
  void push_back(std::shared_ptr<Module> module);
  // Builds an M from `args` and appends it; returns it.
  template <class M, class... Args>
  requires std::derived_from<M, Module> M& emplace_back(Args&&... args) {
    auto module = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *module;
    push_back(std::move(module));
    return ref;
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // Element i; negative i counts from the end, as in Python. Throws if out of range.
  Module& operator[](int64_t index) const { return *modules_[checked_index(index)]; }
  std::shared_ptr<Module> ptr(int64_t index) const { return modules_[checked_index(index)]; }
  // Element i as an M. Throws if out of range or if it is not an M (naming both types).
  template <class M>
  requires std::derived_from<M, Module> M& at(int64_t index) const {
    Module& module = (*this)[index];
    auto* typed = dynamic_cast<M*>(&module);
    if (!typed) throw_wrong_type(index, module, class_name(typeid(M)));
    return *typed;
  }
  Iterator begin() const { return modules_.begin(); }
  Iterator end() const { return modules_.end(); }
  void replace_module(const std::string& name, std::shared_ptr<Module> module) override;

 protected:
  IndexedModules() = default;

 private:
  size_t checked_index(int64_t index) const;
  [[noreturn]] void throw_wrong_type(int64_t index, const Module& module, const std::string& wanted) const;

  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace detail

// Runs its modules in order, each one's output the next one's input. On CUDA it runs a Linear
// and the ReLU or tanh GELU after it as one linear_activation, and Linear, tanh GELU, Linear as
// one linear_activation_linear (ops/linalg.h): the same numbers, fewer passes over memory.
class Sequential : public detail::IndexedModules {
 public:
  Sequential() = default;
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           (std::derived_from<Ms, Module> && ...)) explicit Sequential(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  // The input through every module's forward(const Tensor&), in order; the input itself when
  // empty. Throws what a module throws (a module without a single-tensor forward says so).
  Tensor forward(const Tensor& input) override;
};

// A list of modules whose forward the owner writes (a model's blocks, run in a loop).
class ModuleList : public detail::IndexedModules {
 public:
  ModuleList() = default;
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           (std::derived_from<Ms, Module> && ...)) explicit ModuleList(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules);
};

// Modules under string keys, in insertion order (each registered as a child under its key).
class ModuleDict : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  using Iterator = std::vector<Item>::const_iterator;

  ModuleDict() = default;
  explicit ModuleDict(const std::vector<Item>& items);

  // Adds `module` under `key`. Throws if the module is null, or the key is empty, contains '.'
  // or is already present (a registered child cannot be replaced).
  void insert(std::string key, std::shared_ptr<Module> module);
  // Builds an M from `args` under `key`; returns it.
  template <class M, class... Args>
  requires std::derived_from<M, Module> M& emplace(std::string key, Args&&... args) {
    auto module = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *module;
    insert(std::move(key), std::move(module));
    return ref;
  }

  bool contains(const std::string& key) const { return index_.contains(key); }
  // The module under `key`. Throws if absent, listing the keys.
  Module& operator[](const std::string& key) const { return *items_[checked_index(key)].second; }
  std::shared_ptr<Module> ptr(const std::string& key) const { return items_[checked_index(key)].second; }
  // The module under `key` as an M. Throws if absent or not an M (naming both types).
  template <class M>
  requires std::derived_from<M, Module> M& at(const std::string& key) const {
    Module& module = (*this)[key];
    auto* typed = dynamic_cast<M*>(&module);
    if (!typed) throw_wrong_type(key, module, class_name(typeid(M)));
    return *typed;
  }
  std::vector<std::string> keys() const;
  void replace_module(const std::string& name, std::shared_ptr<Module> module) override;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  Iterator begin() const { return items_.begin(); }
  Iterator end() const { return items_.end(); }

 private:
  size_t checked_index(const std::string& key) const;
  [[noreturn]] void throw_wrong_type(const std::string& key, const Module& module,
                                     const std::string& wanted) const;

  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace loom::nn
