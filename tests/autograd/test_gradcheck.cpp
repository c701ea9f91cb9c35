/*
 * gradcheck for every differentiable op of the table (the cases are in cases/, one file per
 * family) and the coverage rule: an op of ops/op_list.def must have a gradcheck case here or
 * be in the reviewed list of non-differentiable ops below, with the reason.
 */
#include <map>
#include <set>

#include "autograd/formula.h"
#include "tests/autograd/cases/gradcheck_case.h"

using namespace loom;
using namespace loom::test;

namespace loom::test {
std::vector<GradcheckCase>& gradcheck_cases() {
  static std::vector<GradcheckCase> cases;
  return cases;
}
}  // namespace loom::test

namespace {

// Ops that have no gradient formula, reviewed one by one.
const std::map<Op, const char*> kNonDifferentiable = {
    {Op::fill, "writes a constant; fill_ on a tensor in the graph is recorded as a copy of that constant"},
    {Op::arange, "factory: no tensor input"},
    {Op::uniform, "random factory: no tensor input"},
    {Op::normal, "random factory: no tensor input"},
    {Op::randint, "random factory: integer output"},
    {Op::bernoulli, "random factory: the probability is a number, not a tensor"},
    {Op::logical_not, "bool output"},
    {Op::eq, "bool output"},
    {Op::ne, "bool output"},
    {Op::lt, "bool output"},
    {Op::le, "bool output"},
    {Op::gt, "bool output"},
    {Op::ge, "bool output"},
    {Op::logical_and, "bool output"},
    {Op::logical_or, "bool output"},
    {Op::amp_unscale_and_check_, "GradScaler's in-place pass over the gradients, outside the graph"},
    {Op::amp_update_scale_, "GradScaler's in-place update of its scale, outside the graph"},
    {Op::flash_attention_backward,
     "the fused attention's backward; a second derivative goes through the "
     "written-out attention (its call refuses create_graph)"},
    {Op::linear_input_grad_activation,
     "linear_activation_linear's backward at its hidden layer; a second "
     "derivative goes through the unfused ops (its call refuses to be recorded)"},
    {Op::fused_adam_, "the optimizer's in-place step, outside the graph"},
    {Op::fused_sgd_, "the optimizer's in-place step, outside the graph"},
    {Op::foreach_norm_reduce, "clip_grad_norm_'s pass over the gradients, outside the graph"},
    {Op::foreach_mul_, "clip_grad_norm_'s in-place scaling of the gradients, outside the graph"},
    {Op::int8_linear, "INT8 inference (QuantizedModel): integer inputs, rounded output"},
    {Op::int8_im2col, "INT8 inference: gathers uint8 values"},
    {Op::int8_max_pool2d, "INT8 inference: integer input and output"},
    {Op::quantize_per_tensor, "rounds to integers (QAT's gradient is fake_quantize's, in quant/)"},
    {Op::dequantize_per_tensor, "integer input"},
};

}  // namespace

TEST_CASE("gradcheck: every case of every family, in float64") {
  REQUIRE_FALSE(gradcheck_cases().empty());
  for (const GradcheckCase& c : gradcheck_cases()) {
    CAPTURE(c.name);
    Inputs in = c.make_inputs();
    auto first = autograd::gradcheck(c.fn, in, c.options);
    CHECK_MESSAGE(first.ok, name_of(c.op), " / ", c.name, ": ", first.message);
    if (c.order == kSecondOrder) {
      auto second = autograd::gradgradcheck(c.fn, in, c.options);
      CHECK_MESSAGE(second.ok, name_of(c.op), " / ", c.name, " (second order): ", second.message);
    }
  }
}

TEST_CASE("gradcheck coverage: every op has a case or a reviewed reason not to") {
  std::set<Op> covered;
  int second_order = 0;
  for (const GradcheckCase& c : gradcheck_cases()) {
    CAPTURE(c.name);
    // The case must really go through its op.
    std::vector<Tensor> out = c.fn(c.make_inputs());
    std::string graph = autograd::graph_to_string(out);
    CHECK_MESSAGE(graph.find(autograd::backward_name(c.op)) != std::string::npos, c.name, " does not record ",
                  name_of(c.op), "; its graph is:\n", graph);
    covered.insert(c.op);
    second_order += c.order == kSecondOrder;
  }
  int differentiable = 0;
  for (size_t i = 0; i < kNumOps; ++i) {
    Op op = static_cast<Op>(i);
    bool listed = kNonDifferentiable.count(op) > 0;
    CHECK_MESSAGE((covered.count(op) > 0) != listed, name_of(op),
                  std::string(listed ? " is listed as non-differentiable but has a gradcheck case"
                                     : " has neither a gradcheck case nor a place in the non-differentiable list"));
    CHECK_MESSAGE(autograd::has_formula(op) != listed, name_of(op),
                  std::string(listed ? " is listed as non-differentiable but has a formula" : " has no gradient formula"));
    differentiable += !listed;
  }
  MESSAGE("gradcheck covers ", covered.size(), " of ", differentiable, " differentiable ops (", kNumOps,
          " ops in the table, ", kNonDifferentiable.size(), " reviewed as non-differentiable) with ",
          gradcheck_cases().size(), " cases, ", second_order, " of them also second order");
}
