/*
 * loom::nn::Module: the base of every layer and model. It keeps the module's parameters,
 * buffers and child modules under names, which gives the dotted names of the whole tree
 * ("blocks.0.attn.qkv.weight") for state dicts, optimizers and printing.
 *
 * Writing a model needs no macros and no holder types. Layers are ordinary members,
 * registered once by name:
 *
 *   struct Net : loom::nn::Module {
 *     nn::Linear fc1{784, 512};
 *     nn::Linear fc2{512, 10};
 *     Net() { register_module("fc1", fc1); register_module("fc2", fc2); }
 *     Tensor forward(const Tensor& x) override { return fc2(fc1(x).relu()); }
 *   };
 *
 * A registered member is referenced, not owned, so modules are neither copyable nor movable
 * (moving one would leave its parent pointing at the old address). Children made at run time
 * (ModuleList, Sequential, a variable number of blocks) are owned through std::shared_ptr.
 *
 * Parameters and buffers are tensor handles shared between the layer's member (`weight`) and
 * the registry, so an optimizer updating `parameters()` updates the layer. Operations that
 * change a tensor's storage or dtype (to(), load_state_dict) work in place on those handles.
 */
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/state_dict.h"

namespace loom::nn {

class Module;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using NamedModules = std::vector<std::pair<std::string, Module*>>;

// A class's name without namespaces ("Linear" for loom::nn::Linear); template arguments keep
// theirs. Module::type_name() and the containers' error messages use it.
std::string class_name(const std::type_info& type);

// What load_state_dict(…, strict=false) could not match.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // ---- forward -----------------------------------------------------------------------------
  // The single-tensor forward that Sequential chains and operator() calls. A module with
  // another signature adds its own overloads (and `using Module::operator();`).
  // Throws if the module does not define it.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // ---- registration ------------------------------------------------------------------------
  // Registers `tensor` as a parameter (requires_grad is set) and returns the same handle.
  // Names are unique within a module and may not contain '.'.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  // A buffer is state that is saved but not trained (BatchNorm's running mean). A
  // non-persistent buffer is moved by to() but not saved in state_dict().
  Tensor register_buffer(std::string name, Tensor tensor, bool persistent = true);
  // A member submodule: referenced, not owned (see the header comment).
  template <class M>
    requires std::derived_from<M, Module>
  M& register_module(std::string name, M& member) {
    add_child(std::move(name), std::shared_ptr<Module>(std::shared_ptr<Module>(), &member));
    return member;
  }
  // An owned submodule.
  template <class M>
    requires std::derived_from<M, Module>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    LOOM_CHECK(module != nullptr, "register_module('", name, "'): null module");
    add_child(std::move(name), module);
    return module;
  }

  // Swaps the owned child `name` for `module` (fine-tuning a new head, converting layers for
  // quantization). Throws if there is no such child, or if it was registered as a member:
  // the parent's member would still be the old layer, so assign through the member instead.
  // Containers override it to keep their own index in step.
  virtual void replace_module(const std::string& name, std::shared_ptr<Module> module);

  // ---- traversal ---------------------------------------------------------------------------
  // Parameters in registration order: own first, then each child's, depth first. A tensor
  // shared by two modules (a tied embedding) appears once, under its first name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Module*> children() const;
  NamedModules named_children() const;
  // This module (name "") and every descendant, depth first; a module reachable through two
  // parents appears once, under its first name (torch's named_modules).
  std::vector<Module*> modules();
  NamedModules named_modules();
  std::vector<const Module*> modules() const;
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  // Total element count of parameters() (shared tensors counted once).
  int64_t num_parameters(bool trainable_only = false) const;

  // Calls fn on every descendant and then on this module (torch's order).
  void apply(const std::function<void(Module&)>& fn);

  // ---- modes and placement -----------------------------------------------------------------
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves/converts every parameter and buffer in place; to(dtype) converts floating-point
  // tensors only (integer buffers such as BatchNorm's counter stay). Gradients follow.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);

  // set_to_none (the default, as in torch 2) drops the gradients, so the next backward
  // writes them instead of adding; otherwise they are filled with zeros.
  void zero_grad(bool set_to_none = true);

  // ---- state -------------------------------------------------------------------------------
  // Every parameter and persistent buffer under its dotted name. The tensors are detached
  // handles to the module's own storage (no copy): save them, or clone them to keep a snapshot.
  StateDict state_dict() const;
  // Copies the values of `state` into the module's tensors (converting dtype). With strict,
  // any missing or unexpected key throws, listing all of them; a shape mismatch always throws,
  // naming the key and both shapes. Nothing is modified if it throws.
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- printing ----------------------------------------------------------------------------
  // The class name without namespaces ("Linear"), taken from the dynamic type.
  virtual std::string type_name() const;
  // The one-line description inside the parentheses: "in_features=784, out_features=512".
  virtual std::string extra_repr() const { return {}; }
  // The indented tree, each line with its parameter count, like torch's print(model).
  std::string to_string() const;

 protected:
  // Direct access for subclasses that rebuild their children (ModuleList).
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& child_entries() const {
    return children_;
  }

 private:
  struct Entry {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };

  void add_child(std::string name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  void collect_named(NamedTensors& out, const std::string& prefix, bool params, bool recurse,
                     bool persistent_only, std::vector<const TensorImpl*>& seen) const;
  void collect_modules(std::vector<std::pair<std::string, const Module*>>& out, const std::string& prefix) const;
  void print_tree(std::ostream& os, int indent) const;
  void convert(const std::function<Tensor(const Tensor&)>& fn);

  bool training_ = true;
  std::vector<Entry> parameters_;
  std::vector<Entry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace loom::nn
