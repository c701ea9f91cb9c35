/*
 * quantize --device cuda end to end (on emulated CUDA in CI, on a GPU where there is one): a
 * model trained by `train`, quantized, and measured on CUDA, where the INT8 layers run through
 * cuBLASLt's INT8 GEMM. Calibration runs on the CPU, so the INT8 model is the same on both
 * devices, and its logits on CUDA equal the CPU's (oneDNN's) bit for bit: the INT8 accuracy
 * must be exactly the CPU's. The float model's accuracy may differ by a sample at most (float32
 * sums in another order). Also: --device is checked, and a grouped convolution (no CUDA path)
 * is an error that names its stage.
 */
#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "core/error.h"
#include "data/data.h"
#include "quant/quant.h"
#include "tests/gpu_test.h"
#include "tests/test_util.h"
#include "tests/tools/quantize_fixtures.h"
#include "tools/quantize/options.h"
#include "tools/quantize/quantizer.h"

namespace loom::test {
namespace {

// bits < 8 (the CNN here) adds the clamp of sub-8-bit ranges to the stages on CUDA.
quantize::QuantizeOptions options_for(const fs::path& model, const fs::path& calib, const fs::path& out,
                                      const std::string& device, int64_t bits) {
  quantize::QuantizeOptions o;
  o.model = model.string();
  o.calib = calib.string();
  o.out = out.string();
  o.batch = 32;
  o.calib_batches = 4;
  o.per_channel = true;
  o.device = device;
  o.bits = bits;
  return o;
}

TEST_CASE("quantize --device: cpu and cuda are the choices") {
  const char* argv[] = {"quantize", "--model", "m", "--calib", "c", "--out", "o", "--device", "gpu"};
  CHECK_THROWS_WITH(quantize::parse_options(9, argv), doctest::Contains("--device"));
  argv[8] = "cuda";
  CHECK(quantize::parse_options(9, argv).options->device == "cuda");
}

TEST_CASE("quantize --device cuda: the INT8 model gives the CPU's logits and accuracy on CUDA") {
  LOOM_REQUIRE_GPU();
  ScratchDir dir("quantize_cuda");
  const fs::path train_set = quadrant_dataset(dir.path(), "train", 256, 1, 8, 11);
  const fs::path test_set = quadrant_dataset(dir.path(), "test", 96, 1, 8, 12);
  for (const std::string model : {"mlp", "cnn"}) {
    CAPTURE(model);
    const fs::path float_file = trained_model(dir.path(), model, train_set, test_set);
    const int64_t bits = model == "cnn" ? 7 : 8;
    std::ostringstream cpu_log, cuda_log;
    const quantize::QuantizeSummary cpu = quantize::run_quantize(
        options_for(float_file, train_set, dir.path() / (model + ".cpu.st"), "cpu", bits), cpu_log);
    const quantize::QuantizeSummary gpu = quantize::run_quantize(
        options_for(float_file, train_set, dir.path() / (model + ".cuda.st"), "cuda", bits), cuda_log);
    INFO(cuda_log.str());
    CHECK(cuda_log.str().find("measuring accuracy and latency on cuda:0") != std::string::npos);
    CHECK(cuda_log.str().find("accuracy (96 test)") != std::string::npos);
    CHECK(cpu.ptq.accuracy > 0.9);
    CHECK(gpu.ptq.accuracy == cpu.ptq.accuracy);
    CHECK(std::abs(gpu.f32.accuracy - cpu.f32.accuracy) <= 1.0 / 96 + 1e-12);
    CHECK(gpu.ptq.file_bytes == cpu.ptq.file_bytes);
    CHECK(gpu.ptq.latency_b1_ms > 0);
    CHECK(gpu.ptq.latency_batch_ms > 0);

    // Logits: the written model on CUDA against itself on the CPU, on the whole test set.
    auto int8 = quant::QuantizedModel::load(dir.path() / (model + ".cuda.st"));
    auto int8_cuda = int8->to(Device::cuda());
    CHECK(int8_cuda->device() == Device::cuda());
    data::DataLoader loader(std::make_shared<data::Hdf5ImageDataset>(test_set.string()),
                            data::DataLoaderOptions().batch_size(48).workers(0),
                            std::make_shared<data::Normalize>(std::vector<float>{0.2f}, std::vector<float>{0.3f}));
    for (data::Batch& batch : loader) {
      Tensor on_cpu = int8->forward(batch.data), on_cuda = int8_cuda->forward(batch.data.to(Device::cuda()));
      CHECK(on_cuda.is_cuda());
      CHECK(on_cuda.to(kCPU).ne(on_cpu).sum().item<int64_t>() == 0);
    }
    CHECK_THROWS_WITH(int8_cuda->forward(test::pat({2, 1, 8, 8}, 0.1)), doctest::Contains("the input is on cpu"));
  }
}

TEST_CASE("QuantizedModel::to(cuda): a grouped convolution has no CUDA path, and the error names its stage") {
  LOOM_REQUIRE_GPU();
  quant::QuantizedModel::Stage conv;
  conv.kind = quant::StageKind::Conv2d;
  conv.source = "grouped";
  conv.conv = std::make_shared<quant::Int8Conv2d>(
      zeros({4, 1, 3, 3}, kInt8), full({4}, 0.01f), Tensor(), 0.02f, 0, quant::Int8ConvOptions{.groups = 2},
      quant::Int8Output{.dtype = kFloat32});
  quant::QuantizedModel model({conv});
  CHECK_THROWS_WITH(model.to(Device::cuda()), doctest::Contains("stage 0 (from 'grouped')"));
  CHECK_THROWS_WITH(model.to(Device::cuda()), doctest::Contains("groups 2"));
}

}  // namespace
}  // namespace loom::test
