/*
 * RNN, LSTM and GRU (see rnn.h): parameter registration per layer and direction, the shape
 * checks, and the loop over layers, directions and steps that calls the cells' step functions
 * (nn/layers/rnn_cells.h).
 */
#include "nn/layers/rnn.h"

#include <utility>

#include "nn/layers/repr.h"
#include "nn/layers/rnn_cells.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

std::vector<Tensor> rnn_cell_step(const Tensor& gates_x, const std::vector<Tensor>& state, const Tensor& w_hh,
                                  const Tensor& b_hh, bool relu) {
  return {detail::rnn_step(gates_x, state[0], w_hh, b_hh, relu)};
}

std::vector<Tensor> lstm_cell_step(const Tensor& gates_x, const std::vector<Tensor>& state,
                                   const Tensor& w_hh, const Tensor& b_hh, bool /*relu*/) {
  auto [h, c] = detail::lstm_step(gates_x, state[0], state[1], w_hh, b_hh);
  return {h, c};
}

std::vector<Tensor> gru_cell_step(const Tensor& gates_x, const std::vector<Tensor>& state, const Tensor& w_hh,
                                  const Tensor& b_hh, bool /*relu*/) {
  return {detail::gru_step(gates_x, state[0], w_hh, b_hh)};
}

}  // namespace

RNNBase::RNNBase(std::string name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNOptions options)
    : name_(std::move(name)),
      input_size_(input_size),
      hidden_size_(hidden_size),
      options_(std::move(options)) {
  LOOM_CHECK(input_size >= 1 && hidden_size >= 1, name_, ": expected input_size and hidden_size >= 1, got ",
             input_size, " and ", hidden_size);
  LOOM_CHECK(options_.num_layers >= 1, name_, ": expected num_layers >= 1, got ", options_.num_layers);
  LOOM_CHECK(options_.dropout >= 0.0 && options_.dropout <= 1.0, name_,
             ": dropout should be a number in range [0, 1], got ", options_.dropout);
  const bool rnn = name_ == "RNN";
  LOOM_CHECK(options_.nonlinearity == "tanh" || (rnn && options_.nonlinearity == "relu"), name_,
             rnn ? ": nonlinearity must be 'tanh' or 'relu', got '" : ": takes no nonlinearity option, got '",
             options_.nonlinearity, "'");
  const int64_t directions = options_.bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    const int64_t layer_input = layer == 0 ? input_size : hidden_size * directions;
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      weight_ih.push_back(
          register_parameter("weight_ih" + suffix, empty({gates * hidden_size, layer_input})));
      weight_hh.push_back(
          register_parameter("weight_hh" + suffix, empty({gates * hidden_size, hidden_size})));
      bias_ih.push_back(options_.bias ? register_parameter("bias_ih" + suffix, empty({gates * hidden_size}))
                                      : Tensor());
      bias_hh.push_back(options_.bias ? register_parameter("bias_hh" + suffix, empty({gates * hidden_size}))
                                      : Tensor());
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  detail::reset_recurrent_parameters(parameters(false), hidden_size_);
}

std::string RNNBase::extra_repr() const {
  // torch's RNNBase.extra_repr (which prints no nonlinearity).
  std::string s = std::to_string(input_size_) + ", " + std::to_string(hidden_size_);
  if (options_.num_layers != 1) s += ", num_layers=" + std::to_string(options_.num_layers);
  if (!options_.bias) s += ", bias=False";
  if (options_.batch_first) s += ", batch_first=True";
  if (options_.dropout != 0) s += ", dropout=" + detail::python_float(options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=True";
  return s;
}

std::pair<Tensor, std::vector<Tensor>> RNNBase::run(const Tensor& input, std::vector<Tensor> states,
                                                    Step step) {
  LOOM_CHECK(input.defined(), name_, ": the input is undefined");
  LOOM_CHECK((input.dim() == 2 || input.dim() == 3) && input.size(-1) == input_size_, name_, "(",
             extra_repr(), "): expected input of shape ", options_.batch_first ? "[B, T, " : "[T, B, ",
             input_size_, "] or [T, ", input_size_, "], got ", input.sizes());
  const bool unbatched = input.dim() == 2;
  // Sequence-first and batched inside: x [T, B, I].
  const Tensor x = unbatched ? input.unsqueeze(1) : (options_.batch_first ? input.transpose(0, 1) : input);
  const int64_t steps = x.size(0), batch = x.size(1), hidden = hidden_size_;
  LOOM_CHECK(steps > 0, name_, ": expected a sequence of at least one step, got input of shape ",
             input.sizes());
  const int64_t directions = options_.bidirectional ? 2 : 1, layers = options_.num_layers;
  const DimVector state_shape =
      unbatched ? DimVector{layers * directions, hidden} : DimVector{layers * directions, batch, hidden};
  const char* state_names[] = {"h_0", "c_0"};
  for (size_t s = 0; s < states.size(); ++s) {
    if (!states[s].defined()) {
      states[s] = zeros({layers * directions, batch, hidden}, x.options());
      continue;
    }
    LOOM_CHECK(states[s].sizes() == IntArrayRef(state_shape), name_, "(", extra_repr(), "): expected ",
               state_names[s], " of shape ", IntArrayRef(state_shape), ", got ", states[s].sizes());
    if (unbatched) states[s] = states[s].unsqueeze(1);
  }
  const bool relu = options_.nonlinearity == "relu";
  std::vector<std::vector<Tensor>> finals(states.size());  // per state tensor, per layer and direction
  Tensor layer_input = x;
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<Tensor> outputs;  // per direction, [T, B, H]
    for (int64_t d = 0; d < directions; ++d) {
      const auto k = static_cast<size_t>(layer * directions + d);
      const Tensor gates_x = linear(layer_input, weight_ih[k], bias_ih[k]);  // every step at once
      std::vector<Tensor> state;
      for (const Tensor& s : states) state.push_back(s.select(0, static_cast<int64_t>(k)));
      std::vector<Tensor> h_per_step(static_cast<size_t>(steps));
      for (int64_t i = 0; i < steps; ++i) {
        const int64_t t = d == 0 ? i : steps - 1 - i;
        state = step(gates_x.select(0, t), state, weight_hh[k], bias_hh[k], relu);
        h_per_step[static_cast<size_t>(t)] = state[0];
      }
      outputs.push_back(stack(h_per_step, 0));
      for (size_t s = 0; s < state.size(); ++s) finals[s].push_back(state[s]);
    }
    layer_input = directions == 2 ? cat(outputs, 2) : outputs[0];
    if (options_.dropout > 0 && is_training() && layer + 1 < layers)
      layer_input = dropout(layer_input, options_.dropout, true);
  }
  const Tensor output = unbatched
                            ? layer_input.squeeze(1)
                            : (options_.batch_first ? layer_input.transpose(0, 1).contiguous() : layer_input);
  std::vector<Tensor> final_states;
  for (const std::vector<Tensor>& f : finals) {
    const Tensor stacked = stack(f, 0);
    final_states.push_back(unbatched ? stacked.squeeze(1) : stacked);
  }
  return {output, final_states};
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("RNN", 1, input_size, hidden_size, std::move(options)) {}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& h0) {
  auto [output, states] = run(input, {h0}, rnn_cell_step);
  return {output, states[0]};
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("LSTM", 4, input_size, hidden_size, std::move(options)) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(
    const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  auto [output, states] =
      run(input, {hx ? std::get<0>(*hx) : Tensor(), hx ? std::get<1>(*hx) : Tensor()}, lstm_cell_step);
  return {output, {states[0], states[1]}};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase("GRU", 3, input_size, hidden_size, std::move(options)) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0) {
  auto [output, states] = run(input, {h0}, gru_cell_step);
  return {output, states[0]};
}

}  // namespace loom::nn
