/*
 * RNN, LSTM, GRU and the cells on CUDA against the CPU, forward and backward (outputs, final
 * states, the gradients of the inputs, the initial states and every parameter) in float32,
 * float64 and bfloat16, over bidirectional, multi-layer, batch_first and unbatched layouts. (The modules are
 * composites of linear and elementwise ops, so this checks that nothing in them is CPU-only.)
 */
#include <string>
#include <vector>

#include "nn/layers/rnn.h"
#include "nn/layers/rnn_cells.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::pat;

// Runs `run` on a module in `dtype` and on its copy on CUDA, with the same inputs (which require
// grad), and compares the outputs, then the gradients of the inputs and of every parameter for
// loss = sum(out_k * w_k) with fixed weights w_k.
template <class M, class Run>
void check_module(M& cpu, M& gpu, const std::vector<Tensor>& data, const Run& run, DType dtype) {
  cpu.to(dtype);
  gpu.to(dtype);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(Device::cuda());
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : data) {
    cpu_in.push_back(t.to(dtype).detach().clone().requires_grad_());
    gpu_in.push_back(t.to(dtype).detach().to(Device::cuda()).requires_grad_());
  }
  const std::vector<Tensor> cpu_out = run(cpu, cpu_in), gpu_out = run(gpu, gpu_in);
  REQUIRE(cpu_out.size() == gpu_out.size());
  const test::Tol tol = test::cuda_tol_for(dtype);
  Tensor cpu_loss = zeros({}, TensorOptions(kFloat64)),
         gpu_loss = zeros({}, TensorOptions(kFloat64).device(Device::cuda()));
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    test::check_same(gpu_out[k], cpu_out[k], tol, "output " + std::to_string(k));
    const Tensor w = pat(cpu_out[k].sizes(), 0.37 + static_cast<double>(k)).to(dtype);
    cpu_loss = cpu_loss + (cpu_out[k] * w).sum().to(kFloat64);
    gpu_loss = gpu_loss + (gpu_out[k] * w.to(Device::cuda())).sum().to(kFloat64);
  }
  cpu_loss.backward();
  gpu_loss.backward();
  for (size_t i = 0; i < data.size(); ++i)
    test::check_same(gpu_in[i].grad(), cpu_in[i].grad(), tol, "gradient of input " + std::to_string(i));
  const auto cpu_params = cpu.named_parameters(), gpu_params = gpu.named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i)
    test::check_same(gpu_params[i].second.grad(), cpu_params[i].second.grad(), tol,
                     "gradient of " + cpu_params[i].first);
}

TEST_CASE("LSTM, GRU and RNN on CUDA match the CPU, forward and backward") {
  LOOM_REQUIRE_GPU();
  const nn::RNNOptions bidirectional{.num_layers = 2, .batch_first = true, .bidirectional = true};
  nn::LSTM lstm(3, 5, bidirectional), lstm_gpu(3, 5, bidirectional);
  check_module(
      lstm, lstm_gpu, {pat({2, 4, 3}, 1.0), pat({4, 2, 5}, 2.0), pat({4, 2, 5}, 3.0)},
      [](nn::LSTM& m, const std::vector<Tensor>& in) {
        auto [out, state] = m.forward(in[0], std::tuple{in[1], in[2]});
        return std::vector<Tensor>{out, std::get<0>(state), std::get<1>(state)};
      },
      kFloat32);
  nn::GRU gru(3, 4, {.num_layers = 2}), gru_gpu(3, 4, {.num_layers = 2});
  check_module(
      gru, gru_gpu, {pat({5, 3}, 4.0)},  // unbatched
      [](nn::GRU& m, const std::vector<Tensor>& in) {
        auto [out, h] = m.forward(in[0], Tensor());
        return std::vector<Tensor>{out, h};
      },
      kFloat32);
  const nn::RNNOptions relu{.bias = false, .nonlinearity = "relu"};
  nn::RNN rnn(3, 4, relu), rnn_gpu(3, 4, relu);
  check_module(
      rnn, rnn_gpu, {pat({4, 2, 3}, 5.0), pat({1, 2, 4}, 6.0)},
      [](nn::RNN& m, const std::vector<Tensor>& in) {
        auto [out, h] = m.forward(in[0], in[1]);
        return std::vector<Tensor>{out, h};
      },
      kBFloat16);
}

TEST_CASE("LSTMCell, GRUCell and RNNCell on CUDA match the CPU, forward and backward") {
  LOOM_REQUIRE_GPU();
  nn::LSTMCell lstm(3, 4), lstm_gpu(3, 4);
  check_module(
      lstm, lstm_gpu, {pat({2, 3}, 7.0), pat({2, 4}, 8.0), pat({2, 4}, 9.0)},
      [](nn::LSTMCell& m, const std::vector<Tensor>& in) {
        auto [h, c] = m.forward(in[0], std::tuple{in[1], in[2]});
        return std::vector<Tensor>{h, c};
      },
      kFloat32);
  nn::GRUCell gru(3, 4), gru_gpu(3, 4);
  check_module(
      gru, gru_gpu, {pat({2, 3}, 10.0), pat({2, 4}, 11.0)},
      [](nn::GRUCell& m, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{m.forward(in[0], in[1])};
      },
      kFloat64);
  nn::RNNCell rnn(3, 4), rnn_gpu(3, 4);
  check_module(
      rnn, rnn_gpu, {pat({3}, 12.0)},
      [](nn::RNNCell& m, const std::vector<Tensor>& in) { return std::vector<Tensor>{m.forward(in[0])}; },
      kFloat32);
}

}  // namespace
}  // namespace loom
