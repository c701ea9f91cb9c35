/*
 * The recurrent cells (see rnn_cells.h): the step functions, and the cell modules' checks,
 * initialisation and printing.
 */
#include "nn/layers/rnn_cells.h"

#include <cmath>
#include <utility>

#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

namespace detail {

Tensor rnn_step(const Tensor& gates_x, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu) {
  const Tensor pre = gates_x + linear(h, w_hh, b_hh);
  return relu ? loom::relu(pre) : loom::tanh(pre);
}

std::tuple<Tensor, Tensor> lstm_step(const Tensor& gates_x, const Tensor& h, const Tensor& c,
                                     const Tensor& w_hh, const Tensor& b_hh) {
  const std::vector<Tensor> g = split(gates_x + linear(h, w_hh, b_hh), h.size(-1), -1);  // i, f, g, o
  const Tensor c_next = sigmoid(g[1]) * c + sigmoid(g[0]) * loom::tanh(g[2]);
  return {sigmoid(g[3]) * loom::tanh(c_next), c_next};
}

Tensor gru_step(const Tensor& gates_x, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  const int64_t hidden = h.size(-1);
  const std::vector<Tensor> x = split(gates_x, hidden, -1), s = split(linear(h, w_hh, b_hh), hidden, -1);
  const Tensor r = sigmoid(x[0] + s[0]), z = sigmoid(x[1] + s[1]);
  const Tensor n = loom::tanh(x[2] + r * s[2]);
  return n + z * (h - n);  // (1 - z) n + z h
}

void reset_recurrent_parameters(const std::vector<Tensor>& parameters, int64_t hidden_size) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  for (const Tensor& p : parameters) init::uniform_(p, -bound, bound);
}

}  // namespace detail

RNNCellBase::RNNCellBase(std::string name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias)
    : name_(std::move(name)), input_size_(input_size), hidden_size_(hidden_size), bias_(bias) {
  LOOM_CHECK(input_size >= 1 && hidden_size >= 1, name_, ": expected input_size and hidden_size >= 1, got ",
             input_size, " and ", hidden_size);
  weight_ih = register_parameter("weight_ih", empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden_size, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", empty({gates * hidden_size}));
    bias_hh = register_parameter("bias_hh", empty({gates * hidden_size}));
  }
  reset_parameters();
}

void RNNCellBase::reset_parameters() {
  detail::reset_recurrent_parameters(parameters(false), hidden_size_);
}

std::string RNNCellBase::extra_repr() const {
  std::string s = std::to_string(input_size_) + ", " + std::to_string(hidden_size_);
  if (!bias_) s += ", bias=False";
  return s;
}

std::pair<Tensor, bool> RNNCellBase::batched_input(const Tensor& input) const {
  LOOM_CHECK(input.defined(), name_, ": the input is undefined");
  LOOM_CHECK((input.dim() == 1 || input.dim() == 2) && input.size(-1) == input_size_, name_, "(",
             extra_repr(), "): expected input of shape [B, ", input_size_, "] or [", input_size_, "], got ",
             input.sizes());
  return {input.dim() == 1 ? input.unsqueeze(0) : input, input.dim() == 1};
}

Tensor RNNCellBase::batched_state(const Tensor& state, const Tensor& input, bool unbatched,
                                  const char* what) const {
  if (!state.defined()) return zeros({input.size(0), hidden_size_}, input.options());
  const DimVector want = unbatched ? DimVector{hidden_size_} : DimVector{input.size(0), hidden_size_};
  LOOM_CHECK(state.sizes() == IntArrayRef(want), name_, "(", extra_repr(), "): expected ", what, " of shape ",
             IntArrayRef(want), ", got ", state.sizes());
  return unbatched ? state.unsqueeze(0) : state;
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, std::string nonlinearity)
    : RNNCellBase("RNNCell", 1, input_size, hidden_size, bias), nonlinearity_(std::move(nonlinearity)) {
  LOOM_CHECK(nonlinearity_ == "tanh" || nonlinearity_ == "relu",
             "RNNCell: nonlinearity must be 'tanh' or 'relu', got '", nonlinearity_, "'");
}

Tensor RNNCell::forward(const Tensor& input, const Tensor& hx) {
  auto [x, unbatched] = batched_input(input);
  const Tensor h = batched_state(hx, x, unbatched, "hx");
  const Tensor out =
      detail::rnn_step(linear(x, weight_ih, bias_ih), h, weight_hh, bias_hh, nonlinearity_ == "relu");
  return unbatched ? out.squeeze(0) : out;
}

std::string RNNCell::extra_repr() const {
  std::string s = RNNCellBase::extra_repr();
  if (nonlinearity_ != "tanh") s += ", nonlinearity=" + nonlinearity_;
  return s;
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("LSTMCell", 4, input_size, hidden_size, bias) {}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input,
                                             const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  auto [x, unbatched] = batched_input(input);
  const Tensor h = batched_state(hx ? std::get<0>(*hx) : Tensor(), x, unbatched, "h");
  const Tensor c = batched_state(hx ? std::get<1>(*hx) : Tensor(), x, unbatched, "c");
  auto [h_next, c_next] = detail::lstm_step(linear(x, weight_ih, bias_ih), h, c, weight_hh, bias_hh);
  if (unbatched) return {h_next.squeeze(0), c_next.squeeze(0)};
  return {h_next, c_next};
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("GRUCell", 3, input_size, hidden_size, bias) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) {
  auto [x, unbatched] = batched_input(input);
  const Tensor h = batched_state(hx, x, unbatched, "hx");
  const Tensor out = detail::gru_step(linear(x, weight_ih, bias_ih), h, weight_hh, bias_hh);
  return unbatched ? out.squeeze(0) : out;
}

}  // namespace loom::nn
