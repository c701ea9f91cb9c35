/* The formula table and the op nodes built from it (see formula.h). */
#include "autograd/formula.h"

#include <array>

namespace loom::autograd {

namespace {
std::array<FormulaEntry, kNumOps>& table() {
  static std::array<FormulaEntry, kNumOps> entries;
  return entries;
}
}  // namespace

const FormulaEntry& formula_entry(Op op) { return table()[static_cast<size_t>(op)]; }
void set_formula_entry(Op op, FormulaEntry entry) { table()[static_cast<size_t>(op)] = entry; }
bool has_formula(Op op) { return formula_entry(op).make_node != nullptr; }

std::string backward_name(Op op) {
  std::string name;
  bool upper = true;
  for (char ch : op_name(op)) {
    if (ch == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(ch)) : ch;
    upper = false;
  }
  return name + "Backward";
}

std::string OpNodeBase::name() const { return backward_name(op_); }

void OpNodeBase::save(std::span<const Tensor> inputs, std::span<const Tensor> outputs, Save spec) {
  spec_ = spec;
  if (spec.inputs) {
    saved_inputs_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (spec.inputs >> i & 1) saved_inputs_[i] = SavedTensor(inputs[i], /*is_output=*/false);
  }
  if (spec.outputs) {
    saved_outputs_.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      if (spec.outputs >> i & 1) saved_outputs_[i] = SavedTensor(outputs[i], /*is_output=*/true);
  }
}

void OpNodeBase::release_saved() {
  for (SavedTensor& s : saved_inputs_) s.release();
  for (SavedTensor& s : saved_outputs_) s.release();
}

void OpNodeBase::collect_saved(std::vector<Tensor>& out) const {
  for (const auto* list : {&saved_inputs_, &saved_outputs_})
    for (const SavedTensor& s : *list)
      if (s.data().defined()) out.push_back(s.data());
}

void OpNodeBase::move_saved_out(std::vector<Tensor>& out) {
  for (auto* list : {&saved_inputs_, &saved_outputs_}) {
    for (SavedTensor& s : *list) out.push_back(s.take());
    list->clear();
  }
}

Tensor OpNodeBase::saved_input(size_t i) const {
  LOOM_CHECK(i < saved_inputs_.size() && (spec_.inputs >> i & 1), "autograd: ", name(), " reads input ", i,
             " which its formula did not declare in Save::inputs");
  return saved_inputs_[i].unpack(*this);
}

Tensor OpNodeBase::saved_output(size_t i) const {
  LOOM_CHECK(i < saved_outputs_.size() && (spec_.outputs >> i & 1), "autograd: ", name(), " reads output ", i,
             " which its formula did not declare in Save::outputs");
  return saved_outputs_[i].unpack(*this);
}

}  // namespace loom::autograd
