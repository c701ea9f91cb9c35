/*
 * Random ops in CUDA graphs (core/cuda_graph.h, capture_philox_args): a captured draw reads its
 * Philox seed and first counter on the device, and each replay reserves them from the generator,
 * so replay k draws what the same ops would draw eagerly at that point. The reference is the CPU,
 * whose Philox fills give the same numbers for the same (seed, counter): a graph that baked the
 * capture's counters would repeat one mask at every replay, and one that lost track of the
 * generator would drift from the CPU after an eager draw or a reseed between replays.
 */
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "core/cuda_graph.h"
#include "core/random.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

using namespace loom;

namespace {

const Device kGpu = Device::cuda();

// The draws one captured step makes, on `device`, from `gen`.
std::vector<Tensor> draws(Device device, Generator& gen) {
  return {rand({37}, device, &gen), randn({50}, device, &gen),
          randint(0, 1000, {9}, TensorOptions(DType::Int64).device(device), &gen)};
}

void check_equal_on_cpu(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    CAPTURE(i);
    CHECK(equal(gpu[i].to(kCPU), cpu[i]));
  }
}

}  // namespace

TEST_CASE("CUDA graph: a captured dropout draws at each replay the mask the CPU draws at that step") {
  LOOM_REQUIRE_GPU();
  const Tensor x = ones({1000}, kGpu);
  manual_seed(21);
  std::vector<Tensor> cpu;
  for (int step = 0; step < 3; ++step) cpu.push_back(dropout(ones({1000}), 0.5, /*training=*/true));
  const uint64_t offset_after_three = default_generator().offset();
  REQUIRE_FALSE(equal(cpu[0], cpu[1]));  // fresh masks, so a repeated one would show

  manual_seed(21);
  cuda::CudaGraph graph;
  Tensor out;
  cuda::capture(graph, [&] { out = dropout(x, 0.5, /*training=*/true); });
  CHECK(default_generator().offset() == 0);  // the capture ran nothing: its draws are the replays'
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    graph.replay();
    CHECK(equal(out.to(kCPU), cpu[step]));
  }
  CHECK(default_generator().offset() == offset_after_three);
}

TEST_CASE("CUDA graph: replays draw from each generator as eager ops would, across eager draws and reseeds") {
  LOOM_REQUIRE_GPU();
  // Two generators in one capture, drawn from in turn: each keeps its own counters.
  Generator gpu_a(5), cpu_a(5), gpu_b(6), cpu_b(6);
  auto step = [](Device device, Generator& a, Generator& b) {
    std::vector<Tensor> out = draws(device, a);
    out.push_back(rand({21}, device, &b));
    out.push_back(rand({4}, device, &a));
    return out;
  };
  cuda::CudaGraph graph;
  std::vector<Tensor> captured;
  cuda::capture(graph, [&] { captured = step(kGpu, gpu_a, gpu_b); });

  graph.replay();
  check_equal_on_cpu(captured, step(kCPU, cpu_a, cpu_b));
  // An eager draw between replays takes its counters from the same stream.
  CHECK(equal(rand({10}, kGpu, &gpu_a).to(kCPU), rand({10}, kCPU, &cpu_a)));
  graph.replay();
  check_equal_on_cpu(captured, step(kCPU, cpu_a, cpu_b));
  // A reseed between replays: the next replay reads the new seed.
  gpu_b.manual_seed(99);
  cpu_b.manual_seed(99);
  graph.replay();
  check_equal_on_cpu(captured, step(kCPU, cpu_a, cpu_b));
  CHECK(gpu_a.offset() == cpu_a.offset());
  CHECK(gpu_b.offset() == cpu_b.offset());
}

TEST_CASE("CUDA graph: the graph keeps drawing from a generator that is gone") {
  LOOM_REQUIRE_GPU();
  cuda::CudaGraph graph;
  Tensor out;
  {
    Generator gen(7);
    cuda::capture(graph, [&] { out = rand({64}, kGpu, &gen); });
  }
  Generator reference(7);
  for (int step = 0; step < 2; ++step) {
    graph.replay();
    CHECK(equal(out.to(kCPU), rand({64}, kCPU, &reference)));
  }
}

TEST_CASE(
    "CUDA graph: a generator reseeded inside the capture is refused, and a lost capture draws nothing") {
  LOOM_REQUIRE_GPU();
  Generator gen(3);
  (void)rand({100}, kGpu, &gen);
  const uint64_t before = gen.offset();
  cuda::CudaGraph graph;
  CHECK_THROWS_WITH_AS(cuda::capture(graph,
                                     [&] {
                                       (void)rand({8}, kGpu, &gen);
                                       gen.manual_seed(3);
                                       (void)rand({8}, kGpu, &gen);
                                     }),
                       doctest::Contains("its generator was reseeded or rewound during the capture"), Error);
  CHECK_FALSE(graph.captured());

  gen.set_state(3, before);
  CHECK_THROWS_AS(cuda::capture(graph,
                                [&] {
                                  (void)rand({8}, kGpu, &gen);
                                  throw std::runtime_error("the step failed");
                                }),
                  std::runtime_error);
  CHECK(gen.offset() == before);  // the discarded capture's draw never happens
  Generator reference(3);
  (void)rand({100}, kCPU, &reference);
  CHECK(equal(rand({8}, kGpu, &gen).to(kCPU), rand({8}, kCPU, &reference)));
}

TEST_CASE(
    "CUDA graph: dropout under activation checkpointing recomputes the forward's mask at every replay") {
  LOOM_REQUIRE_GPU();
  // loss = sum(dropout(x * w) * x) with the dropout inside checkpoint(): the backward recomputes
  // the block, and its mask must be the forward's (checkpoint restores the generator's counter).
  // No saturating function: the gradient, mask * x^2 / (1 - p), is exact to a rounding or two.
  const Tensor x_cpu = linspace(-2.0, 2.0, 256);
  auto step = [](const Tensor& x, const Tensor& w) {
    auto block = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{dropout(in[0] * in[1], 0.3, /*training=*/true) * in[0]};
    };
    Tensor loss = autograd::checkpoint(block, {x, w})[0].sum();
    return std::vector<Tensor>{loss, autograd::grad({loss}, {w})[0]};
  };
  manual_seed(17);
  const Tensor w_cpu = randn({256}).requires_grad_(true);
  std::vector<std::vector<Tensor>> cpu;
  for (int i = 0; i < 3; ++i) cpu.push_back(step(x_cpu, w_cpu));

  manual_seed(17);
  const Tensor w = randn({256}).to(kGpu).requires_grad_(true);
  const Tensor x = x_cpu.to(kGpu);
  cuda::CudaGraph graph;
  std::vector<Tensor> captured;
  cuda::capture(graph, [&] { captured = step(x, w); });
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    graph.replay();
    CHECK(captured[0].item<double>() == doctest::Approx(cpu[i][0].item<double>()).epsilon(1e-5));
    CHECK(allclose(captured[1].to(kCPU), cpu[i][1], 1e-5, 1e-6));
  }
}
