/*
 * StateDict: named tensors in a fixed order — what a module, an optimizer or a checkpoint file
 * holds (torch's OrderedDict[str, Tensor]). Insertion order is kept because it is the order
 * users read in printouts and files; names are unique.
 */
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom::nn {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  StateDict() = default;
  StateDict(std::initializer_list<Item> items) {
    for (const auto& [name, tensor] : items) insert(name, tensor);
  }

  // Throws if `name` is already present: two tensors under one name would lose one of them.
  void insert(std::string name, Tensor tensor) {
    LOOM_CHECK(!index_.contains(name), "StateDict: duplicate key '", name, "'");
    index_.emplace(name, items_.size());
    items_.emplace_back(std::move(name), std::move(tensor));
  }
  // Inserts or replaces.
  void set(const std::string& name, Tensor tensor) {
    if (auto it = index_.find(name); it != index_.end()) {
      items_[it->second].second = std::move(tensor);
    } else {
      insert(name, std::move(tensor));
    }
  }

  bool contains(const std::string& name) const { return index_.contains(name); }
  const Tensor& at(const std::string& name) const {
    auto it = index_.find(name);
    LOOM_CHECK(it != index_.end(), "StateDict: no key '", name, "'");
    return items_[it->second].second;
  }
  // nullptr when absent.
  const Tensor* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  const std::vector<Item>& items() const { return items_; }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(items_.size());
    for (const auto& item : items_) out.push_back(item.first);
    return out;
  }

  // The entries whose names start with `prefix`, with the prefix removed ("model." -> "").
  StateDict sub(std::string_view prefix) const {
    StateDict out;
    for (const auto& [name, tensor] : items_) {
      if (name.starts_with(prefix)) out.insert(name.substr(prefix.size()), tensor);
    }
    return out;
  }
  // Adds every entry of `other` under `prefix` + its name.
  void merge(const StateDict& other, std::string_view prefix = "") {
    for (const auto& [name, tensor] : other) insert(std::string(prefix) + name, tensor);
  }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace loom::nn
