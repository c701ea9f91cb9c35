/*
 * The recurrent cells, as torch.nn.RNNCell, LSTMCell and GRUCell: one time step, the same
 * parameter names, shapes, gate order, initialisation and printing, so that a state dict moves
 * between the two frameworks unchanged. The step functions are composed of linear and
 * elementwise ops, so they run on every device and autograd differentiates them.
 *
 * Gates (W_ih [G * H, I], W_hh [G * H, H], b_ih and b_hh [G * H], gate blocks in this order):
 *   RNN  (G = 1): h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)   (or relu)
 *   LSTM (G = 4, i f g o): i, f, o = sigmoid(.), g = tanh(.), c' = f c + i g, h' = o tanh(c')
 *   GRU  (G = 3, r z n):   r, z = sigmoid(x_r + h_r), n = tanh(x_n + r h_n), h' = (1 - z) n + z h
 * where x_k and h_k are the input's and the state's projections of gate block k, biases
 * included (GRU keeps b_hn inside the r product, as torch and cuDNN do).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

// One step of each cell from the input's projection gates_x = x W_ih^T + b_ih ([B, G * H]; the
// sequence modules project all time steps with one product) and the state [B, H].
namespace detail {
Tensor rnn_step(const Tensor& gates_x, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu);
std::tuple<Tensor, Tensor> lstm_step(const Tensor& gates_x, const Tensor& h, const Tensor& c,
                                     const Tensor& w_hh, const Tensor& b_hh);
Tensor gru_step(const Tensor& gates_x, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh);
// torch's initialisation of every recurrent weight and bias: U(-1/sqrt(H), 1/sqrt(H)).
void reset_recurrent_parameters(const std::vector<Tensor>& parameters, int64_t hidden_size);
}  // namespace detail

// The parameters and checks that the three cells share. gates: 1 (RNN), 4 (LSTM), 3 (GRU).
class RNNCellBase : public Module {
 public:
  // weight_ih [G * H, I], weight_hh [G * H, H], bias_ih and bias_hh [G * H] (none when !bias),
  // all U(-1/sqrt(H), 1/sqrt(H)) as torch. Throws if a size is below 1.
  RNNCellBase(std::string name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);

  void reset_parameters();
  std::string extra_repr() const override;
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }

  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  // input [B, I] or unbatched [I] as [B, I] (and whether it was unbatched); throws naming the
  // cell for another shape.
  std::pair<Tensor, bool> batched_input(const Tensor& input) const;
  // A state [B, H] (or [H] for an unbatched input), zeros when undefined; throws naming `what`.
  Tensor batched_state(const Tensor& state, const Tensor& input, bool unbatched, const char* what) const;
  std::string name_;
  int64_t input_size_, hidden_size_;
  bool bias_;
};

class RNNCell : public RNNCellBase {
 public:
  // nonlinearity "tanh" or "relu"; throws for another.
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, std::string nonlinearity = "tanh");
  // input [B, I] (or [I]), hx [B, H] (or [H]; zeros when undefined) -> h' [B, H] (or [H]).
  Tensor forward(const Tensor& input, const Tensor& hx);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  std::string extra_repr() const override;

 private:
  std::string nonlinearity_;
};

class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // input [B, I] (or [I]), hx = (h, c) each [B, H] (or [H]; zeros when absent) -> (h', c').
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     const std::optional<std::tuple<Tensor, Tensor>>& hx);
  // h' from a zero state.
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, std::nullopt)); }
};

class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // input [B, I] (or [I]), hx [B, H] (or [H]; zeros when undefined) -> h' [B, H] (or [H]).
  Tensor forward(const Tensor& input, const Tensor& hx);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
};

}  // namespace loom::nn
