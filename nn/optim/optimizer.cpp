/*
 * The parts of nn::Optimizer that every optimizer shares (see optimizer.h): parameter groups
 * and their defaults, zero_grad, per-parameter state, and the state dict that checkpoints
 * carry — validated on load so that a checkpoint from another model or another optimizer
 * fails with a message naming what differs instead of corrupting the run.
 */
#include "nn/optim/optimizer.h"

#include <charconv>
#include <set>
#include <sstream>

#include "core/grad_mode.h"
#include "nn/optim/step_common.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

std::string option_list(const std::map<std::string, double>& options) {
  std::ostringstream os;
  bool first = true;
  for (const auto& [name, value] : options) {
    os << (first ? "" : ", ") << name;
    first = false;
  }
  return first ? std::string("(none)") : os.str();
}

// Parses the leading "<index>." of `text`; returns false when it is not there.
bool parse_index(std::string_view text, size_t& index, std::string_view& rest) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (ec != std::errc() || end == text.data() || end == text.data() + text.size() || *end != '.')
    return false;
  rest = text.substr(static_cast<size_t>(end - text.data()) + 1);
  return !rest.empty();
}

// State entries that are one number per parameter rather than one per element.
bool is_scalar_state(std::string_view name) {
  return name == "step";
}

constexpr std::string_view kStatePrefix = "state.";
constexpr std::string_view kGroupPrefix = "param_groups.";
// The entry of a group that lists its parameters' indices (as torch's param_groups[g]["params"]).
constexpr std::string_view kParamsKey = "params";

}  // namespace

double& ParamGroup::option(const std::string& name) {
  auto it = options.find(name);
  LOOM_CHECK(it != options.end(), "ParamGroup::option: the group has no option '", name,
             "'; its options are: ", option_list(options));
  return it->second;
}

double ParamGroup::option(const std::string& name) const {
  return const_cast<ParamGroup*>(this)->option(name);
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults)
    : defaults_(std::move(defaults)) {
  LOOM_CHECK(!groups.empty(), "Optimizer: got an empty list of parameter groups");
  size_t total = 0;
  for (const ParamGroup& group : groups) total += group.params.size();
  LOOM_CHECK(total > 0, "Optimizer: got an empty parameter list (", groups.size(),
             " groups, none with parameters)");
  for (ParamGroup& group : groups) add_param_group(std::move(group));
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t g = groups_.size();
  for (const auto& [name, value] : group.options) {
    LOOM_CHECK(defaults_.contains(name), "Optimizer::add_param_group: group ", g, " sets unknown option '",
               name, "'; this optimizer's options are: ", option_list(defaults_));
  }
  for (const auto& [name, value] : defaults_) group.options.try_emplace(name, value);

  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    LOOM_CHECK(p.defined(), "Optimizer::add_param_group: parameter ", i, " of group ", g, " is undefined");
    LOOM_CHECK(p.is_floating_point(), "Optimizer::add_param_group: parameter ", i, " of group ", g,
               " has dtype ", p.dtype(), " (shape ", p.sizes(),
               "); only floating-point tensors can be optimized");
    LOOM_CHECK(p.is_leaf(), "Optimizer::add_param_group: parameter ", i, " of group ", g, " (shape ",
               p.sizes(),
               ") is not a leaf: it is the result of an operation; optimize the tensor it was computed from");
    LOOM_CHECK(seen.insert(p.impl()).second, "Optimizer::add_param_group: parameter ", i, " of group ", g,
               " (shape ", p.sizes(), ") appears twice in the group");
    for (size_t h = 0; h < groups_.size(); ++h) {
      for (const Tensor& q : groups_[h].params) {
        LOOM_CHECK(!q.is_same(p), "Optimizer::add_param_group: parameter ", i, " of group ", g, " (shape ",
                   p.sizes(), ") is already in group ", h, "; a parameter may belong to one group only");
      }
    }
  }
  groups_.push_back(std::move(group));
}

void Optimizer::step_unless_found_inf(const Tensor&) {
  LOOM_FAIL(
      "Optimizer.step_unless_found_inf: this optimizer cannot skip a step on the device; SGD, Adam and AdamW "
      "can when constructed with capturable = true");
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      if (!p.grad().defined()) continue;
      Tensor& grad = p.mutable_grad();
      if (set_to_none) {
        grad = Tensor();
      } else {
        // A gradient made under create_graph carries history; the zeroed one must not.
        if (grad.grad_fn()) grad = grad.detach();
        grad.zero_();
      }
    }
  }
}

Optimizer::ParamState& Optimizer::state_of(const Tensor& param) {
  return state_[param.impl()];
}

const Optimizer::ParamState* Optimizer::find_state(const Tensor& param) const {
  auto it = state_.find(param.impl());
  return it == state_.end() ? nullptr : &it->second;
}

bool Optimizer::can_skip_this_step_on_device() const {
  if (!can_skip_on_device()) return false;
  for (const ParamGroup& group : groups_)
    for (const Tensor& p : group.params)
      if (p.grad().defined() && !optim_detail::fusable(p)) return false;
  return true;
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  int64_t index = 0;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      if (auto it = state_.find(p.impl()); it != state_.end()) {
        for (const auto& [name, value] : it->second)
          out.insert(std::string(kStatePrefix) + std::to_string(index) + "." + name, value);
      }
      ++index;
    }
  }
  index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = std::string(kGroupPrefix) + std::to_string(g) + ".";
    const int64_t n = static_cast<int64_t>(groups_[g].params.size());
    out.insert(prefix + std::string(kParamsKey), arange(index, index + n, 1, kInt64));
    index += n;
    for (const auto& [name, value] : groups_[g].options)
      out.insert(prefix + name, scalar_tensor(value, kFloat64));
  }
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  // Everything is checked before anything changes: a failed load leaves the optimizer as it was.
  std::vector<const Tensor*> params;
  for (const ParamGroup& group : groups_)
    for (const Tensor& p : group.params) params.push_back(&p);

  std::vector<std::map<std::string, double>> options(groups_.size());
  std::vector<bool> has_params_entry(groups_.size(), false);
  std::vector<ParamState> new_state(params.size());

  for (const auto& [key, value] : state) {
    std::string_view rest;
    size_t index = 0;
    if (key.starts_with(kStatePrefix)) {
      LOOM_CHECK(parse_index(std::string_view(key).substr(kStatePrefix.size()), index, rest),
                 "Optimizer::load_state_dict: malformed key '", key,
                 "'; expected 'state.<param index>.<name>'");
      LOOM_CHECK(index < params.size(), "Optimizer::load_state_dict: '", key, "' refers to parameter ", index,
                 " but this optimizer has ", params.size(), " parameters");
      LOOM_CHECK(value.defined(), "Optimizer::load_state_dict: '", key, "' is an undefined tensor");
      const Tensor& p = *params[index];
      Tensor restored;
      if (is_scalar_state(rest)) {
        LOOM_CHECK(value.numel() == 1, "Optimizer::load_state_dict: '", key,
                   "' should hold one number, got shape ", value.sizes());
        const double v = value.to(kCPU).to(kFloat64).item<double>();
        LOOM_CHECK(v >= 0 && v == static_cast<double>(static_cast<int64_t>(v)),
                   "Optimizer::load_state_dict: '", key, "' should be a non-negative whole count, got ", v);
        restored = scalar_tensor(static_cast<int64_t>(v), kInt64);
      } else {
        LOOM_CHECK(value.sizes() == p.sizes(), "Optimizer::load_state_dict: '", key, "' has shape ",
                   value.sizes(), " but parameter ", index, " has shape ", p.sizes());
        LOOM_CHECK(value.is_floating_point(), "Optimizer::load_state_dict: '", key, "' has dtype ",
                   value.dtype(), "; optimizer state is floating-point");
        // A copy in the parameter's dtype and device, owned by this optimizer: the source
        // may be another optimizer's live state or a checkpoint's buffer.
        restored = empty(p.sizes(), p.options());
        restored.copy_(value);
      }
      new_state[index][std::string(rest)] = restored;
    } else if (key.starts_with(kGroupPrefix)) {
      LOOM_CHECK(parse_index(std::string_view(key).substr(kGroupPrefix.size()), index, rest),
                 "Optimizer::load_state_dict: malformed key '", key,
                 "'; expected 'param_groups.<group index>.<option>'");
      LOOM_CHECK(index < groups_.size(), "Optimizer::load_state_dict: the state has a group ", index, " ('",
                 key, "') but this optimizer has ", groups_.size(), " groups");
      if (rest == kParamsKey) {
        const int64_t expected = static_cast<int64_t>(groups_[index].params.size());
        LOOM_CHECK(value.defined() && value.dim() == 1 && value.numel() == expected,
                   "Optimizer::load_state_dict: group ", index, " of the state has ", value.numel(),
                   " parameters ('", key, "' has shape ", value.sizes(), ") but group ", index,
                   " of this optimizer has ", expected);
        has_params_entry[index] = true;
        continue;
      }
      const std::string name(rest);
      LOOM_CHECK(defaults_.contains(name), "Optimizer::load_state_dict: '", key, "' sets unknown option '",
                 name, "'; this optimizer's options are: ", option_list(defaults_),
                 " (was the state saved by a different optimizer?)");
      LOOM_CHECK(value.defined() && value.numel() == 1, "Optimizer::load_state_dict: '", key,
                 "' should hold one number");
      options[index][name] = value.to(kCPU).to(kFloat64).item<double>();
    } else {
      LOOM_FAIL("Optimizer::load_state_dict: unexpected key '", key,
                "'; expected 'state.<param index>.<name>' or 'param_groups.<group index>.<option>'");
    }
  }

  for (size_t g = 0; g < groups_.size(); ++g) {
    LOOM_CHECK(has_params_entry[g], "Optimizer::load_state_dict: the state has no 'param_groups.", g, ".",
               kParamsKey, "': it describes fewer groups than this optimizer's ", groups_.size());
    for (const auto& [name, value] : defaults_) {
      LOOM_CHECK(options[g].contains(name), "Optimizer::load_state_dict: the state has no 'param_groups.", g,
                 ".", name, "'");
    }
  }

  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!new_state[i].empty()) state_[params[i]->impl()] = std::move(new_state[i]);
  }
}

}  // namespace loom::nn
