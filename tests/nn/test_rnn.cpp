/*
 * RNN, LSTM, GRU and their cells against PyTorch: outputs, final states and gradients in
 * float64 for the same parameters and inputs (tests/nn/rnn_reference.h, written by
 * tests/nn/rnn_reference.py with PyTorch 1.13), parameter names and printing as torch's,
 * float32 against the same values, dropout between layers, a short training run, and errors.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "nn/layers/rnn.h"
#include "nn/layers/rnn_cells.h"
#include "nn/optim/adam.h"
#include "ops/ops.h"
#include "tests/nn/rnn_reference.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
namespace ref = loom::test::rnn_reference;

namespace {

constexpr Tol kReferenceTol{1e-10, 1e-12};

// rnn_reference.py's pattern in float64: sin(seed + 0.61 i) * 0.5.
Tensor pattern(IntArrayRef shape, double seed) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.61 * static_cast<double>(i)) * 0.5;
  return make(v, shape, kFloat64);
}

// The module in `dtype` with parameter k (in registration order, torch's state_dict order)
// set to pattern(seed k + 1).
void set_parameters(nn::Module& m, DType dtype) {
  m.to(dtype);
  NoGradGuard no_grad;
  int k = 0;
  for (auto& [name, p] : m.named_parameters()) p.copy_(pattern(p.sizes(), ++k));
}

// sum(output * pattern(30)) + sum(h * pattern(31)) + sum(c * pattern(32)) (terms for defined tensors).
Tensor reference_loss(const Tensor& output, const Tensor& h, const Tensor& c) {
  Tensor loss = (output * pattern(output.sizes(), 30).to(output.dtype())).sum();
  if (h.defined()) loss = loss + (h * pattern(h.sizes(), 31).to(h.dtype())).sum();
  if (c.defined()) loss = loss + (c * pattern(c.sizes(), 32).to(c.dtype())).sum();
  return loss;
}

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
  return names;
}

// The gradient of parameter `name`.
Tensor grad_of(const nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters())
    if (n == name) return p.grad();
  FAIL("no parameter ", name);
  return {};
}

}  // namespace

TEST_CASE("LSTM (2 layers, bidirectional, batch_first) matches PyTorch: outputs, states and gradients") {
  nn::LSTM lstm(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  CHECK(lstm.extra_repr() == "3, 4, num_layers=2, batch_first=True, bidirectional=True");
  CHECK(names_of(lstm) == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                                   "weight_ih_l0_reverse", "weight_hh_l0_reverse",
                                                   "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1",
                                                   "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
                                                   "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                                   "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  CHECK(lstm.weight_ih[2].sizes() == IntArrayRef{16, 8});  // layer 1 reads both directions
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype);
    const Tol tol = dtype == kFloat64 ? kReferenceTol : Tol{1e-5, 1e-6};
    set_parameters(lstm, dtype);
    lstm.zero_grad();
    Tensor x = pattern({2, 5, 3}, 10).to(dtype).requires_grad_();
    auto [out, state] =
        lstm.forward(x, std::tuple{pattern({4, 2, 4}, 20).to(dtype), pattern({4, 2, 4}, 21).to(dtype)});
    auto [h, c] = state;
    CHECK(out.sizes() == IntArrayRef{2, 5, 8});
    check_close(out, ref::kLstmOutput, tol);
    check_close(h, ref::kLstmH, tol);
    check_close(c, ref::kLstmC, tol);
    reference_loss(out, h, c).backward();
    check_close(x.grad(), ref::kLstmGradInput, tol);
    check_close(grad_of(lstm, "weight_ih_l0"), ref::kLstmGrad_weight_ih_l0, tol);
    check_close(grad_of(lstm, "bias_hh_l1_reverse"), ref::kLstmGrad_bias_hh_l1_reverse, tol);
  }
}

TEST_CASE("GRU on an unbatched sequence from a zero state matches PyTorch") {
  nn::GRU gru(3, 4);
  CHECK(gru.extra_repr() == "3, 4");
  set_parameters(gru, kFloat64);
  Tensor x = pattern({5, 3}, 11).requires_grad_();
  auto [out, h] = gru.forward(x, Tensor());
  CHECK(out.sizes() == IntArrayRef{5, 4});
  CHECK(h.sizes() == IntArrayRef{1, 4});
  check_close(out, ref::kGruOutput, kReferenceTol);
  check_close(h, ref::kGruH, kReferenceTol);
  reference_loss(out, h, Tensor()).backward();
  check_close(x.grad(), ref::kGruGradInput, kReferenceTol);
  check_close(grad_of(gru, "weight_ih_l0"), ref::kGruGrad_weight_ih_l0, kReferenceTol);
  check_close(grad_of(gru, "bias_hh_l0"), ref::kGruGrad_bias_hh_l0, kReferenceTol);
  // The single-tensor forward gives the output.
  check_close(gru.forward(x.detach()), ref::kGruOutput, kReferenceTol);
}

TEST_CASE("RNN with relu, 2 layers and no bias matches PyTorch") {
  nn::RNN rnn(3, 4, {.num_layers = 2, .bias = false, .nonlinearity = "relu"});
  CHECK(rnn.extra_repr() == "3, 4, num_layers=2, bias=False");  // torch prints no nonlinearity
  CHECK(names_of(rnn) ==
        std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "weight_ih_l1", "weight_hh_l1"});
  set_parameters(rnn, kFloat64);
  Tensor x = pattern({5, 2, 3}, 12).requires_grad_();
  auto [out, h] = rnn.forward(x, pattern({2, 2, 4}, 22));
  check_close(out, ref::kRnnOutput, kReferenceTol);
  check_close(h, ref::kRnnH, kReferenceTol);
  reference_loss(out, h, Tensor()).backward();
  check_close(x.grad(), ref::kRnnGradInput, kReferenceTol);
  check_close(grad_of(rnn, "weight_ih_l0"), ref::kRnnGrad_weight_ih_l0, kReferenceTol);
  check_close(grad_of(rnn, "weight_hh_l1"), ref::kRnnGrad_weight_hh_l1, kReferenceTol);
}

TEST_CASE("LSTMCell, GRUCell and RNNCell match PyTorch for one step") {
  nn::LSTMCell lstm(3, 4);
  CHECK(names_of(lstm) == std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  set_parameters(lstm, kFloat64);
  Tensor x = pattern({2, 3}, 13).requires_grad_();
  auto [h, c] = lstm.forward(x, std::tuple{pattern({2, 4}, 23), pattern({2, 4}, 24)});
  check_close(h, ref::kLstmCellOutput, kReferenceTol);
  check_close(c, ref::kLstmCellC, kReferenceTol);
  reference_loss(h, Tensor(), c).backward();
  check_close(x.grad(), ref::kLstmCellGradInput, kReferenceTol);
  check_close(grad_of(lstm, "weight_ih"), ref::kLstmCellGrad_weight_ih, kReferenceTol);
  check_close(grad_of(lstm, "bias_hh"), ref::kLstmCellGrad_bias_hh, kReferenceTol);

  nn::GRUCell gru(3, 4);
  set_parameters(gru, kFloat64);
  Tensor xg = pattern({2, 3}, 14).requires_grad_();
  const Tensor hg = gru.forward(xg, pattern({2, 4}, 25));
  check_close(hg, ref::kGruCellOutput, kReferenceTol);
  reference_loss(hg, Tensor(), Tensor()).backward();
  check_close(xg.grad(), ref::kGruCellGradInput, kReferenceTol);
  check_close(grad_of(gru, "weight_ih"), ref::kGruCellGrad_weight_ih, kReferenceTol);
  check_close(grad_of(gru, "bias_hh"), ref::kGruCellGrad_bias_hh, kReferenceTol);

  nn::RNNCell rnn(3, 4);
  set_parameters(rnn, kFloat64);
  Tensor xr = pattern({3}, 15).requires_grad_();  // unbatched, zero state
  const Tensor hr = rnn.forward(xr);
  CHECK(hr.sizes() == IntArrayRef{4});
  check_close(hr, ref::kRnnCellOutput, kReferenceTol);
  reference_loss(hr, Tensor(), Tensor()).backward();
  check_close(xr.grad(), ref::kRnnCellGradInput, kReferenceTol);
  check_close(grad_of(rnn, "weight_ih"), ref::kRnnCellGrad_weight_ih, kReferenceTol);
  check_close(grad_of(rnn, "bias_hh"), ref::kRnnCellGrad_bias_hh, kReferenceTol);
  CHECK(nn::RNNCell(3, 4, false, "relu").extra_repr() == "3, 4, bias=False, nonlinearity=relu");
}

TEST_CASE("recurrent modules: initialisation bound, dropout between layers, and a zero h_0 by default") {
  nn::GRU gru(5, 16, {.num_layers = 2, .dropout = 0.5});
  CHECK(gru.extra_repr() == "5, 16, num_layers=2, dropout=0.5");
  for (const Tensor& p : gru.parameters()) CHECK(p.abs().max().item<double>() <= 0.25);  // 1/sqrt(16)
  const Tensor x = pattern({6, 3, 5}, 40).to(kFloat32);
  gru.eval();
  const Tensor eval_out = gru.forward(x);
  CHECK(values(gru.forward(x)) == values(eval_out));
  // A zero h_0 given explicitly is the default.
  CHECK(values(std::get<0>(gru.forward(x, zeros({2, 3, 16})))) == values(eval_out));
  gru.train();
  CHECK(values(gru.forward(x)) != values(eval_out));  // dropout on layer 0's output
  nn::GRU no_dropout(5, 16, {.num_layers = 2});
  no_dropout.load_state_dict(gru.state_dict());
  CHECK(values(no_dropout.forward(x)) == values(eval_out));  // training mode without dropout
}

TEST_CASE("an LSTM learns to recall the first element of its sequence") {
  // Sequences of 6 random signs; the target is the first one, which the last step must remember.
  manual_seed(5);
  nn::LSTM lstm(1, 8, {.batch_first = true});
  Tensor head = (randn({1, 8}) * 0.3).requires_grad_();
  std::vector<Tensor> params = lstm.parameters();
  params.push_back(head);
  nn::Adam opt(params, {.lr = 0.05});
  const Tensor x = sign(randn({32, 6, 1}));
  const Tensor target = x.select(1, 0);  // [32, 1]
  auto loss_now = [&] {
    const Tensor out = lstm.forward(x);    // [32, 6, 8]
    const Tensor last = out.select(1, 5);  // [32, 8]
    return ((last.matmul(head.t()) - target) * (last.matmul(head.t()) - target)).mean();
  };
  const double first = loss_now().item<double>();
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = loss_now();
    loss.backward();
    opt.step();
  }
  const double last = loss_now().item<double>();
  INFO("loss ", first, " -> ", last);
  CHECK(last < 0.1 * first);
}

TEST_CASE("recurrent modules refuse bad options and inputs, naming the module and the shapes") {
  CHECK(error_of([] { nn::LSTM(0, 4); }).find("LSTM: expected input_size and hidden_size >= 1") !=
        std::string::npos);
  CHECK(error_of([] { nn::GRU(3, 4, {.num_layers = 0}); }).find("GRU: expected num_layers >= 1") !=
        std::string::npos);
  CHECK(error_of([] {
          nn::RNN(3, 4, {.dropout = 1.5});
        }).find("dropout should be a number in range [0, 1]") != std::string::npos);
  CHECK(error_of([] {
          nn::RNN(3, 4, {.nonlinearity = "gelu"});
        }).find("RNN: nonlinearity must be 'tanh' or 'relu'") != std::string::npos);
  CHECK(error_of([] {
          nn::LSTM(3, 4, {.nonlinearity = "relu"});
        }).find("LSTM: takes no nonlinearity option") != std::string::npos);
  CHECK(error_of([] { nn::RNNCell(3, 4, true, "sigmoid"); }).find("RNNCell: nonlinearity must be") !=
        std::string::npos);
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  CHECK(error_of([&] {
          lstm.forward(zeros({5, 2, 7}));
        }).find("LSTM(3, 4, num_layers=2): expected input of shape [T, B, 3]") != std::string::npos);
  CHECK(error_of([&] { lstm.forward(zeros({1, 5, 2, 3})); }).find("got [1, 5, 2, 3]") != std::string::npos);
  CHECK(error_of([&] { lstm.forward(zeros({0, 2, 3})); }).find("at least one step") != std::string::npos);
  CHECK(error_of([&] {
          lstm.forward(zeros({5, 2, 3}), std::tuple{zeros({2, 2, 4}), zeros({1, 2, 4})});
        }).find("expected c_0 of shape [2, 2, 4], got [1, 2, 4]") != std::string::npos);
  nn::GRU batch_first(3, 4, {.batch_first = true});
  CHECK(error_of([&] {
          batch_first.forward(zeros({2, 5, 4}));
        }).find("expected input of shape [B, T, 3]") != std::string::npos);
  nn::GRUCell cell(3, 4);
  CHECK(error_of([&] {
          cell.forward(zeros({2, 3}), zeros({3, 4}));
        }).find("GRUCell(3, 4): expected hx of shape [2, 4], got [3, 4]") != std::string::npos);
  CHECK(error_of([&] {
          cell.forward(zeros({2, 2, 3}));
        }).find("expected input of shape [B, 3] or [3]") != std::string::npos);
}
