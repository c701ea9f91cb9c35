/*
 * CUDA graphs (core/cuda_graph.h): the runtime's stream-capture rules, the caching allocator's
 * graph pools, and training steps replayed from a graph against the same steps run eagerly.
 * On emulated CUDA these check the emulator's capture (core/cuda/emulated/streams.cpp) as well
 * as Loom's use of it; on a GPU the runtime cases hold CUDA itself to the same rules.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "core/random.h"
#include "nn/loss.h"
#include "nn/models/mlp.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

#if LOOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/stream.h"
#endif

using namespace loom;

TEST_CASE("CUDA graph: a captured op runs at each replay, not during the capture") {
  LOOM_REQUIRE_GPU();
  Tensor x = zeros({1000}, Device::cuda());
  Tensor step = full({1000}, 0.5, Device::cuda());
  cuda::CudaGraph graph;
  cuda::capture(graph, [&] { x.add_(step); });
  CHECK(graph.captured());
  CHECK(graph.num_nodes() >= 1);
  CHECK(x.to(kCPU).sum().item<double>() == 0.0);  // recorded, not run
  for (int i = 0; i < 3; ++i) graph.replay();
  CHECK(x.to(kCPU).sum().item<double>() == 1500.0);
  // A static input: new values copied into it are what the next replay reads.
  step.fill_(1.0);
  graph.replay();
  CHECK(x.to(kCPU).sum().item<double>() == 2500.0);
}

TEST_CASE("CUDA graph: a host synchronisation inside the capture is refused, and the capture is lost") {
  LOOM_REQUIRE_GPU();
  Tensor x = ones({8}, Device::cuda());
  cuda::CudaGraph graph;
  CHECK_THROWS_WITH_AS(cuda::capture(graph, [&] { (void)x.mul(2).sum().item<double>(); }),
                       doctest::Contains("CUDA graph capture"), Error);
  CHECK_FALSE(graph.capturing());
  CHECK_FALSE(graph.captured());
  CHECK_FALSE(cuda::current_stream_capturing());  // the thread's stream is the default one again
  CHECK_THROWS_WITH_AS(graph.replay(), doctest::Contains("nothing was captured"), Error);
  // The graph can capture again.
  cuda::capture(graph, [&] { x.mul_(3); });
  graph.replay();
  CHECK(x.to(kCPU).sum().item<double>() == 24.0);
}

TEST_CASE("CUDA graph: capture_end names an invalidated capture; reset() makes it usable again") {
  LOOM_REQUIRE_GPU();
  Tensor x = ones({8}, Device::cuda());
  cuda::CudaGraph graph;
  graph.capture_begin();
  CHECK(cuda::current_stream_capturing());
  CHECK_THROWS_AS(cuda::synchronize(), Error);  // cudaDeviceSynchronize: refused, capture invalidated
  CHECK_THROWS_WITH_AS(graph.capture_end(), doctest::Contains("cudaErrorStreamCaptureInvalidated"), Error);
  CHECK_FALSE(graph.captured());
  CHECK_THROWS_WITH_AS(graph.capture_end(), doctest::Contains("capture_begin was not called"), Error);
  graph.capture_begin();
  CHECK_THROWS_WITH_AS(graph.capture_begin(), doctest::Contains("already capturing"), Error);
  x.add_(1);
  graph.capture_end();
  CHECK_THROWS_WITH_AS(graph.capture_begin(), doctest::Contains("reset() it first"), Error);
  graph.reset();
  CHECK_FALSE(graph.captured());
}

TEST_CASE("CUDA graph: SGD training steps replayed from a graph equal the same steps run eagerly") {
  LOOM_REQUIRE_GPU();
  manual_seed(11);
  const Tensor data = randn({6, 32, 784});
  const Tensor labels = randint(0, 10, {6, 32}, DType::Int64);
  manual_seed(5);
  nn::MLP eager({784, 64, 10});
  manual_seed(5);
  nn::MLP graphed({784, 64, 10});
  eager.to(Device::cuda());
  graphed.to(Device::cuda());
  nn::SGD eager_opt(eager.parameters(), {.lr = 0.05, .momentum = 0.9});
  nn::SGD graphed_opt(graphed.parameters(), {.lr = 0.05, .momentum = 0.9});
  auto step = [](nn::MLP& model, nn::SGD& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor static_x = empty({32, 784}, Device::cuda());
  Tensor static_y = empty({32}, TensorOptions(DType::Int64).device(Device::cuda()));
  // Warm-up (the momentum buffers start), then one captured step that must not run at capture.
  for (int64_t i = 0; i < 2; ++i) {
    static_x.copy_(data[i]);
    static_y.copy_(labels[i]);
    step(graphed, graphed_opt, static_x, static_y);
  }
  const Tensor before = graphed.parameters()[0].to(kCPU);
  cuda::CudaGraph graph;
  Tensor static_loss;
  cuda::capture(graph, [&] { static_loss = step(graphed, graphed_opt, static_x, static_y); });
  CHECK(equal(graphed.parameters()[0].to(kCPU), before));
  MESSAGE("one MLP training step captured as ", graph.num_nodes(), " graph nodes");

  double worst = 0;
  for (int64_t i = 0; i < 6; ++i) {
    Tensor eager_loss = step(eager, eager_opt, data[i].to(Device::cuda()), labels[i].to(Device::cuda()));
    if (i < 2) continue;  // the graphed model's warm-up steps
    static_x.copy_(data[i]);
    static_y.copy_(labels[i]);
    graph.replay();
    const double a = eager_loss.item<double>(), b = static_loss.item<double>();
    worst = std::max(worst, std::abs(a - b));
  }
  MESSAGE("largest loss difference, eager against replayed: ", worst);
  CHECK(worst <= 1e-6);
  auto ep = eager.parameters(), gp = graphed.parameters();
  REQUIRE(ep.size() == gp.size());
  for (size_t i = 0; i < ep.size(); ++i) {
    CAPTURE(i);
    const Tensor diff = ep[i].to(kCPU).sub(gp[i].to(kCPU)).abs().max();
    CHECK(diff.item<double>() <= 1e-6);
  }
}

TEST_CASE("CUDA graph: a bad class index met by a replay is reported at the next synchronisation") {
  LOOM_REQUIRE_GPU();
  manual_seed(4);
  nn::MLP model({16, 10});
  model.to(Device::cuda());
  Tensor x = randn({6, 16}).to(Device::cuda());
  Tensor y = tensor<int64_t>({1, 2, 3, 4, 5, 6}, {6}).to(Device::cuda());
  Tensor loss;
  cuda::CudaGraph graph;
  cuda::capture(graph, [&] {
    loss = nn::functional::cross_entropy(model.forward(x), y);
    loss.backward();
  });
  graph.replay();
  CHECK(std::isfinite(loss.item<double>()));
  y.copy_(tensor<int64_t>({1, 2, 3, 10, 5, 12}, {6}));  // 10 and 12 are not classes of 10
  graph.replay();
  CHECK_THROWS_WITH_AS(
      (void)loss.item<double>(),
      doctest::Contains("out of bounds for 10 classes (at batch index 3), in a replay of a CUDA graph"),
      Error);
  y.copy_(tensor<int64_t>({0, 9, 3, 4, 5, 6}, {6}));
  graph.replay();
  cuda::synchronize();  // the error was reported once; the graph runs on
  CHECK(std::isfinite(loss.item<double>()));
}

TEST_CASE(
    "CUDA graph: an embedding index out of range met by a replay is reported at the next synchronisation") {
  LOOM_REQUIRE_GPU();
  manual_seed(3);
  Tensor weight = randn({6, 4}).to(Device::cuda());
  Tensor tokens = tensor<int64_t>({0, 5, 2}, {3}).to(Device::cuda());
  Tensor rows;
  cuda::CudaGraph graph;
  cuda::capture(graph, [&] { rows = embedding(weight, tokens); });  // no host check: a device one
  graph.replay();
  CHECK(equal(rows.to(kCPU), embedding(weight.to(kCPU), tensor<int64_t>({0, 5, 2}, {3}))));
  tokens.copy_(tensor<int64_t>({0, 6, 2}, {3}));  // 6 is not a row of 6
  graph.replay();
  CHECK_THROWS_WITH_AS(
      (void)rows.to(kCPU),
      doctest::Contains("index_select: an index out of range for dim 0 with size 6 (at index "
                        "position 1), in a replay of a CUDA graph"),
      Error);
  // Eagerly, the same check is reported at the next wait, as one of the eager stream's.
  rows = embedding(weight, tokens);
  CHECK_THROWS_WITH_AS(
      (void)rows.to(kCPU),
      doctest::Contains("index_select: an index out of range for dim 0 with size 6 (at index "
                        "position 1); the check ran on the GPU"),
      Error);
}

TEST_CASE("CUDA graph: optimizers whose step depends on host state refuse to be captured") {
  LOOM_REQUIRE_GPU();
  manual_seed(2);
  nn::MLP model({8, 4});
  model.to(Device::cuda());
  Tensor x = randn({3, 8}).to(Device::cuda());
  auto backward = [&] { model.forward(x).sum().backward(); };
  nn::AdamW adamw(model.parameters(), {});
  backward();
  adamw.step();  // eager steps are fine
  cuda::CudaGraph graph;
  CHECK_THROWS_WITH_AS(cuda::capture(graph, [&] { adamw.step(); }),
                       doctest::Contains("step count lives on the host"), Error);
  nn::SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH_AS(cuda::capture(graph, [&] { sgd.step(); }), doctest::Contains("warm-up"), Error);
  sgd.step();
  cuda::capture(graph, [&] { sgd.step(); });  // with its momentum buffers, SGD captures
  CHECK(graph.captured());
}

#if LOOM_WITH_CUDA
namespace {

// Runs f while `stream` is captured; returns cudaStreamEndCapture's result (any graph is destroyed).
template <class F>
cudaError_t capture_on(cudaStream_t stream, F&& f) {
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  f();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  return end;
}

}  // namespace

TEST_CASE("CUDA graph: the runtime's stream-capture rules") {
  LOOM_REQUIRE_GPU();
  cuda::OwnedCudaStream owned;
  cudaStream_t s = owned.stream().handle();
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 1024) == cudaSuccess);
  cudaGraph_t graph = nullptr;

  // Where a capture may begin and end.
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorIllegalState);
  (void)cudaGetLastError();

  // Work is recorded, and the graph's launches run it.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  CHECK(cudaMemsetAsync(device, 7, 1024, s) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 1);
  unsigned char host[4] = {0, 0, 0, 0};
  REQUIRE(cudaMemset(device, 0, 1024) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemcpy(host, device, 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host[0] == 7);
  CHECK(host[3] == 7);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);

  // Waiting for a capturing stream, or making an unsafe call, invalidates the capture.
  CHECK(capture_on(s, [&] { CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported); }) ==
        cudaErrorStreamCaptureInvalidated);
  CHECK(capture_on(s, [&] {
          void* p = nullptr;
          CHECK(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported);
          CHECK(cudaMemsetAsync(device, 1, 16, s) == cudaErrorStreamCaptureInvalidated);
        }) == cudaErrorStreamCaptureInvalidated);
  // cudaMalloc in relaxed mode is allowed (Loom's allocator does this).
  CHECK(capture_on(s, [&] {
          cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
          REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
          void* p = nullptr;
          CHECK(cudaMalloc(&p, 256) == cudaSuccess);
          CHECK(cudaFree(p) == cudaSuccess);
          REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
          CHECK(mode == cudaStreamCaptureModeRelaxed);
        }) == cudaSuccess);

  // Events: one recorded in the capture cannot be queried; waiting on one recorded outside is
  // a dependency the graph cannot hold.
  cuda::CudaEvent inside, outside;
  outside.record(cuda::CudaStream(s));
  (void)capture_on(s, [&] {
    REQUIRE(cudaEventRecord(inside.handle(), s) == cudaSuccess);
    CHECK(cudaEventQuery(inside.handle()) == cudaErrorCapturedEvent);
  });
  (void)capture_on(
      s, [&] { CHECK(cudaStreamWaitEvent(s, outside.handle(), 0) == cudaErrorStreamCaptureIsolation); });

  // A fork must be joined back into the origin stream before the capture ends.
  cuda::OwnedCudaStream side_owned;
  cudaStream_t side = side_owned.stream().handle();
  cuda::CudaEvent fork, join;
  CHECK(capture_on(s, [&] {
          REQUIRE(cudaEventRecord(fork.handle(), s) == cudaSuccess);
          REQUIRE(cudaStreamWaitEvent(side, fork.handle(), 0) == cudaSuccess);
          CHECK(cudaMemsetAsync(device, 2, 16, side) == cudaSuccess);
          CHECK(cudaStreamEndCapture(side, &graph) == cudaErrorStreamCaptureUnmatched);
        }) == cudaErrorStreamCaptureUnjoined);
  CHECK(capture_on(s, [&] {
          REQUIRE(cudaEventRecord(fork.handle(), s) == cudaSuccess);
          REQUIRE(cudaStreamWaitEvent(side, fork.handle(), 0) == cudaSuccess);
          CHECK(cudaMemsetAsync(device, 2, 16, side) == cudaSuccess);
          REQUIRE(cudaEventRecord(join.handle(), side) == cudaSuccess);
          REQUIRE(cudaStreamWaitEvent(s, join.handle(), 0) == cudaSuccess);
        }) == cudaSuccess);
  CHECK(cudaStreamIsCapturing(side, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);  // the forked stream left the capture with it

  // The legacy stream waits for blocking streams: work on it while one is captured is refused.
  cudaStream_t blocking = nullptr;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
  CHECK(capture_on(blocking, [&] {
          CHECK(cudaMemsetAsync(device, 3, 16, nullptr) == cudaErrorStreamCaptureImplicit);
        }) == cudaErrorStreamCaptureInvalidated);
  CHECK(cudaStreamDestroy(blocking) == cudaSuccess);
  (void)cudaGetLastError();
  CHECK(cudaFree(device) == cudaSuccess);
}

TEST_CASE("CUDA graph: allocations during a capture come from the graph's pool, which outlives it") {
  LOOM_REQUIRE_GPU();
  const cuda::MemoryStats start = cuda::memory_stats();
  Tensor outside = empty({256}, Device::cuda());
  Tensor made_inside;
  void* freed_inside = nullptr;
  {
    cuda::CudaGraph graph;
    cuda::capture(graph, [&] {
      {
        Tensor temporary = outside.mul(2);  // freed during the capture
        freed_inside = temporary.data_ptr();
      }
      made_inside = outside.add(1);  // outlives the capture: the graph's output
      // Stream order lets the capture reuse what it freed, as eager work on one stream does.
      CHECK(made_inside.data_ptr() == freed_inside);
    });
    // Eager allocations after the capture never receive the pool's addresses, which replays write.
    for (int i = 0; i < 4; ++i) {
      Tensor t = empty({256}, Device::cuda());
      CHECK(t.data_ptr() != made_inside.data_ptr());
    }
    outside.fill_(1.0);
    graph.replay();
    CHECK(made_inside.to(kCPU).sum().item<double>() == 256.0 * 2);
  }
  // The graph is gone; its pool's segment goes back once the last tensor made in it is freed.
  const size_t reserved_with_output = cuda::memory_stats().reserved_bytes;
  made_inside = Tensor();
  CHECK(cuda::memory_stats().reserved_bytes < reserved_with_output);
  outside = Tensor();
  CHECK(cuda::memory_stats().allocated_bytes == start.allocated_bytes);
}
#endif
