/*
 * Multi-layer recurrent networks over a sequence, as torch.nn.RNN, LSTM and GRU: the same
 * options, parameter names (weight_ih_l0, ..., bias_hh_l1_reverse), shapes, initialisation,
 * input and state layouts and printing, so that a state dict moves between the two frameworks
 * unchanged. Each layer projects the whole sequence's input with one matrix product, then
 * runs its cell (nn/layers/rnn_cells.h) step by step; a bidirectional layer runs a second
 * cell from the last step to the first and concatenates the two outputs per step.
 *
 * Shapes (T steps, B sequences, I = input_size, H = hidden_size, D = 2 if bidirectional else
 * 1, L = num_layers):
 *   input  [T, B, I] ([B, T, I] with batch_first; unbatched [T, I])
 *   output [T, B, D * H] (the last layer's h at every step; [B, T, D * H]; [T, D * H])
 *   h_0, h_n (and LSTM's c_0, c_n)  [L * D, B, H] ([L * D, H] unbatched), layer-major:
 *   index l * D + d, d = 1 the reverse direction. A missing h_0/c_0 is zeros.
 * LSTM's proj_size is not supported.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nn/module.h"

namespace loom::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;  // on each layer's output but the last's, in training
  bool bidirectional = false;
  std::string nonlinearity = "tanh";  // RNN only: "tanh" or "relu"
};

// The parameters, checks and the layer-by-layer loop that RNN, LSTM and GRU share.
class RNNBase : public Module {
 public:
  void reset_parameters();  // every parameter U(-1/sqrt(H), 1/sqrt(H)), as torch
  std::string extra_repr() const override;
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  const RNNOptions& options() const { return options_; }

  // Per layer and direction, index l * D + d (torch's all_weights); biases undefined without bias.
  std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  // gates: 1 (RNN), 4 (LSTM), 3 (GRU). Throws if a size or num_layers is below 1, dropout is
  // outside [0, 1], or nonlinearity is not one the module takes.
  RNNBase(std::string name, int64_t gates, int64_t input_size, int64_t hidden_size, RNNOptions options);

  // One step of a cell: from the step's input projection [B, G * H] and the state tensors
  // (h, or h and c), with the direction's W_hh and b_hh, the next state (its first tensor is
  // the step's output).
  using Step = std::vector<Tensor> (*)(const Tensor& gates_x, const std::vector<Tensor>& state,
                                       const Tensor& w_hh, const Tensor& b_hh, bool relu);
  // The network over `input` (any of the layouts above) from `states` (h_0, or h_0 and c_0, each
  // undefined or of the state shape): the output and the final states, in the caller's layout.
  std::pair<Tensor, std::vector<Tensor>> run(const Tensor& input, std::vector<Tensor> states, Step step);

  std::string name_;
  int64_t input_size_, hidden_size_;
  RNNOptions options_;
};

class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  // (output, h_n) from h_0 (zeros when undefined).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0);
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, Tensor())); }
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  // (output, (h_n, c_n)) from (h_0, c_0) (zeros when absent).
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input,
                                                         const std::optional<std::tuple<Tensor, Tensor>>& hx);
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, std::nullopt)); }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  // (output, h_n) from h_0 (zeros when undefined).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0);
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, Tensor())); }
};

}  // namespace loom::nn
