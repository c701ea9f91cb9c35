/*
 * Module's registry, traversal, conversion, state dict and printing.
 */
#include "nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <sstream>
#include <typeinfo>
#include <utility>

#include "core/grad_mode.h"

namespace loom::nn {
namespace {

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string shape_string(IntArrayRef sizes) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "]";
  return os.str();
}

std::string with_thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + ("'" + keys[i] + "'");
  return out;
}

}  // namespace

Tensor Module::forward(const Tensor&) {
  LOOM_FAIL(type_name(), " has no forward(const Tensor&); call the forward it defines");
}

void Module::check_new_name(const std::string& name, const char* what) const {
  LOOM_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(), ": ", what, " name '", name,
             "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) {
      if constexpr (requires { e.name; }) {
        return e.name == name;
      } else {
        return e.first == name;
      }
    });
  };
  LOOM_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name(), ": cannot register ",
             what, " '", name, "': the name is already used");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  LOOM_CHECK(tensor.defined(), type_name(), ": parameter '", name, "' is an undefined tensor");
  if (requires_grad) {
    LOOM_CHECK(tensor.is_floating_point(), type_name(), ": parameter '", name,
               "' must be floating point to require grad, got ", tensor.dtype());
  }
  tensor.requires_grad_(requires_grad);
  parameters_.push_back({std::move(name), tensor, true});
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor, bool persistent) {
  check_new_name(name, "buffer");
  buffers_.push_back({std::move(name), tensor, persistent});
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> child) {
  check_new_name(name, "module");
  LOOM_CHECK(child.get() != this, type_name(), ": a module cannot be its own child ('", name, "')");
  children_.emplace_back(std::move(name), std::move(child));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  LOOM_CHECK(module != nullptr, type_name(), "::replace_module('", name, "'): null module");
  LOOM_CHECK(module.get() != this, type_name(), ": a module cannot be its own child ('", name, "')");
  for (auto& [child_name, child] : children_) {
    if (child_name != name) continue;
    // A member's entry is a non-owning pointer (no control block, use_count 0).
    LOOM_CHECK(child.use_count() > 0, type_name(), "::replace_module('", name, "'): '", name,
               "' is a member registered by reference; assign through the member instead");
    child = std::move(module);
    return;
  }
  LOOM_FAIL(type_name(), "::replace_module: no child named '", name, "'");
}

// ---- traversal ----------------------------------------------------------------------------

void Module::collect_named(NamedTensors& out, const std::string& prefix, bool params, bool recurse,
                           bool persistent_only, std::vector<const TensorImpl*>& seen) const {
  for (const Entry& e : params ? parameters_ : buffers_) {
    if (!e.tensor.defined() || (persistent_only && !e.persistent)) continue;
    if (std::find(seen.begin(), seen.end(), e.tensor.impl()) != seen.end()) continue;
    seen.push_back(e.tensor.impl());
    out.emplace_back(join_name(prefix, e.name), e.tensor);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) {
    child->collect_named(out, join_name(prefix, name), params, true, persistent_only, seen);
  }
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect_named(out, "", true, recurse, false, seen);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect_named(out, "", false, recurse, false, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const auto& [name, child] : children_) out.push_back(child.get());
  return out;
}

NamedModules Module::named_children() const {
  NamedModules out;
  for (const auto& [name, child] : children_) out.emplace_back(name, child.get());
  return out;
}

void Module::collect_modules(std::vector<std::pair<std::string, const Module*>>& out,
                             const std::string& prefix) const {
  for (const auto& [name, m] : out)
    if (m == this) return;
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_) child->collect_modules(out, join_name(prefix, name));
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  collect_modules(out, "");
  return out;
}

std::vector<const Module*> Module::modules() const {
  std::vector<const Module*> out;
  for (const auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

// The non-const forms hand out mutable pointers to the modules this one owns or references.
NamedModules Module::named_modules() {
  NamedModules out;
  for (const auto& [name, m] : std::as_const(*this).named_modules()) out.emplace_back(name, const_cast<Module*>(m));
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (const auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

// ---- modes and placement ------------------------------------------------------------------

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::convert(const std::function<Tensor(const Tensor&)>& fn) {
  NoGradGuard no_grad;
  for (Entry* e : [&] {
         std::vector<Entry*> all;
         for (auto& p : parameters_) all.push_back(&p);
         for (auto& b : buffers_) all.push_back(&b);
         return all;
       }()) {
    if (!e->tensor.defined()) continue;
    Tensor converted = fn(e->tensor);
    if (converted.is_same(e->tensor)) continue;
    Tensor& grad = e->tensor.mutable_grad();
    Tensor converted_grad = grad.defined() ? fn(grad) : Tensor();
    e->tensor.set_data(converted);
    grad = converted_grad;
  }
  for (auto& [name, child] : children_) child->convert(fn);
}

void Module::to(Device device) {
  convert([&](const Tensor& t) { return t.device() == device ? t : t.to(device); });
}

void Module::to(DType dtype) {
  convert([&](const Tensor& t) { return t.is_floating_point() && t.dtype() != dtype ? t.to(dtype) : t; });
}

void Module::to(Device device, DType dtype) {
  to(device);
  to(dtype);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    Tensor& grad = p.mutable_grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      grad = Tensor();
    } else {
      grad.zero_();
    }
  }
}

// ---- state --------------------------------------------------------------------------------

StateDict Module::state_dict() const {
  StateDict out;
  NamedTensors entries;
  std::vector<const TensorImpl*> seen;
  // torch's order: each module's parameters, then its buffers, then its children.
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    m.collect_named(entries, prefix, true, false, true, seen);
    m.collect_named(entries, prefix, false, false, true, seen);
    for (const auto& [name, child] : m.children_) walk(*child, join_name(prefix, name));
  };
  walk(*this, "");
  for (auto& [name, t] : entries) out.insert(name, t.detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  // Every name of every persistent tensor, aliases included: a tensor shared by two modules
  // (a tied embedding) is saved once, under its first name, but a torch state dict has it under
  // both, and either name is accepted.
  NamedTensors all_names;
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m, const std::string& prefix) {
    for (const Entry& e : m.parameters_)
      if (e.tensor.defined()) all_names.emplace_back(join_name(prefix, e.name), e.tensor);
    for (const Entry& e : m.buffers_)
      if (e.tensor.defined() && e.persistent) all_names.emplace_back(join_name(prefix, e.name), e.tensor);
    for (const auto& [name, child] : m.children_) walk(*child, join_name(prefix, name));
  };
  walk(*this, "");
  StateDict targets;
  for (auto& [name, t] : all_names) targets.set(name, t);

  LoadStateDictResult result;
  std::vector<std::string> mismatches;
  for (const auto& [name, dst] : own) {
    if (!state.contains(name)) result.missing_keys.push_back(name);
  }
  for (const auto& [name, src] : state) {
    const Tensor* dst = targets.find(name);
    if (!dst) {
      result.unexpected_keys.push_back(name);
    } else if (!src.defined() || src.sizes() != dst->sizes()) {
      mismatches.push_back("'" + name + "': the checkpoint has shape " +
                           (src.defined() ? shape_string(src.sizes()) : std::string("<undefined>")) +
                           ", the module has " + shape_string(dst->sizes()));
    }
  }
  std::string problems;
  for (const auto& m : mismatches) problems += "\n  size mismatch for " + m;
  if (strict && !result.missing_keys.empty()) problems += "\n  missing keys: " + join_keys(result.missing_keys);
  if (strict && !result.unexpected_keys.empty()) {
    problems += "\n  unexpected keys: " + join_keys(result.unexpected_keys);
  }
  LOOM_CHECK(problems.empty(), "Error(s) in loading state_dict for ", type_name(), ":", problems);

  NoGradGuard no_grad;
  for (const auto& [name, src] : state) {
    if (const Tensor* dst = targets.find(name)) {
      Tensor target = *dst;
      if (!target.is_same(src)) target.copy_(src);
    }
  }
  return result;
}

// ---- printing -----------------------------------------------------------------------------

std::string class_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? demangled.get() : type.name();
  // "loom::nn::Linear" -> "Linear"; template arguments keep their namespaces.
  size_t template_start = name.find('<');
  size_t cut = name.rfind("::", template_start);
  return cut == std::string::npos ? name : name.substr(cut + 2);
}

std::string Module::type_name() const { return class_name(typeid(*this)); }

void Module::print_tree(std::ostream& os, int indent) const {
  os << type_name() << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [name, child] : children_) {
      os << std::string(indent + 2, ' ') << "(" << name << "): ";
      child->print_tree(os, indent + 2);
      os << "\n";
    }
    os << std::string(indent, ' ');
  }
  os << ")";
  if (int64_t n = num_parameters(); n > 0) os << "  # " << with_thousands(n) << " params";
}

std::string Module::to_string() const {
  std::ostringstream os;
  print_tree(os, 0);
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.to_string(); }

}  // namespace loom::nn
