/*
 * Training parity with PyTorch: the same model, from the same initial weights, fed the same
 * batches in the same order, must learn the same way, step by step.
 *
 * tests/nn/parity/make_parity_data.py (run once with Debian's PyTorch 1.13) chose the initial
 * weights and the batch order and wrote PyTorch's loss at every one of 200 steps, for the zoo
 * GPT on Genesis (character level) and SmallCNN on Fashion-MNIST, each with AdamW and with SGD
 * plus momentum, under a cosine schedule with warm-up, with and without gradient clipping.
 * Here Loom trains the same four runs through the library a user calls (nn::GPT, nn::SmallCNN,
 * nn::AdamW / nn::SGD, nn::CosineWithWarmup, nn::clip_grad_norm_, cross_entropy) and
 * compares every step's loss.
 *
 * The tolerance. Two float32 implementations that sum in different orders agree to about 1e-7
 * relative in a single step; training then amplifies the difference, slowly for the GPT and
 * fast for the CNN (a ReLU or a max-pool choice that flips changes a gradient outright). The
 * script measures that amplification for each run: PyTorch's own float32 run against its
 * float64 run from the same start differs only by rounding. So step s may differ from
 * PyTorch's float32 loss by
 *
 *     4 * max_{s' <= s} |loss_f32(s') - loss_f64(s')|  +  2e-5 * (1 + |loss(s)|)
 *
 * — four times the rounding noise PyTorch itself grows by step s (Loom's and PyTorch's float32
 * errors are independent, and a gap is a one-off draw of a heavy-tailed quantity), plus a
 * floor for the first steps, where that noise is still below float32's resolution of a summed
 * loss. The bound still sees a formula that differs: L2 in place of decoupled decay, or the
 * warm-up one step late, leaves it within the first steps (test "parity: the tolerance
 * catches a wrong optimizer detail").
 */
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/idx_reader.h"
#include "nn/nn.h"
#include "tests/test_util.h"

using namespace loom;

namespace {

const std::string kParityDir = std::string(LOOM_SOURCE_DIR) + "/tests/nn/parity/";

nlohmann::json parity_data() {
  std::ifstream in(kParityDir + "parity.json");
  REQUIRE_MESSAGE(in.good(), "cannot open ", kParityDir, "parity.json");
  return nlohmann::json::parse(in);
}

using Batch = std::pair<Tensor, Tensor>;  // input, target

// What a training run varies between the four cases.
struct Run {
  std::string name, optimizer;
  double lr = 0, weight_decay = 0, momentum = 0, clip = 0;
  int64_t warmup = 0;
  std::vector<double> loss, loss_f64;
};

Run read_run(const nlohmann::json& j) {
  Run r;
  r.name = j.at("name");
  r.optimizer = j.at("optimizer");
  r.lr = j.at("lr");
  r.weight_decay = j.at("weight_decay");
  r.momentum = j.value("momentum", 0.0);
  r.clip = j.at("clip");
  r.warmup = j.at("warmup");
  r.loss = j.at("loss").get<std::vector<double>>();
  r.loss_f64 = j.at("loss_f64").get<std::vector<double>>();
  return r;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const Run& run, std::vector<Tensor> params) {
  if (run.optimizer == "adamw")
    return std::make_unique<nn::AdamW>(std::move(params),
                                       nn::AdamWOptions{.lr = run.lr, .weight_decay = run.weight_decay});
  REQUIRE(run.optimizer == "sgd");
  return std::make_unique<nn::SGD>(
      std::move(params), nn::SGDOptions{.lr = run.lr, .momentum = run.momentum, .weight_decay = run.weight_decay});
}

// Trains `model` (already holding the initial weights) on `batches` as the script does and
// returns every step's loss. `optimizer_step` replaces the optimizer's step in the negative
// controls.
std::vector<double> train(nn::Module& model, const std::vector<Batch>& batches, const Run& run,
                          const std::function<void(nn::Optimizer&)>& optimizer_step = nullptr) {
  auto optimizer = make_optimizer(run, model.parameters());
  nn::CosineWithWarmup schedule(*optimizer, run.warmup, static_cast<int64_t>(batches.size()));
  std::vector<double> losses;
  for (const auto& [input, target] : batches) {
    Tensor logits = model.forward(input);
    Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
    optimizer->zero_grad();
    loss.backward();
    if (run.clip > 0) nn::clip_grad_norm_(model.parameters(), run.clip);
    if (optimizer_step)
      optimizer_step(*optimizer);
    else
      optimizer->step();
    schedule.step();
    losses.push_back(loss.item<float>());
  }
  return losses;
}

// How Loom's curve compares with PyTorch's: the first step outside the tolerance (-1 when
// none), and the largest gap and the largest gap / tolerance over all steps.
struct Comparison {
  int64_t first_outside = -1;
  std::string first_outside_text;
  double max_gap = 0, max_gap_over_tolerance = 0;
};

Comparison compare(const std::vector<double>& loom, const Run& run) {
  REQUIRE(loom.size() == run.loss.size());
  Comparison c;
  double noise = 0;
  for (size_t s = 0; s < loom.size(); ++s) {
    noise = std::max(noise, std::abs(run.loss[s] - run.loss_f64[s]));
    const double tolerance = 4 * noise + 2e-5 * (1 + std::abs(run.loss[s]));
    const double gap = std::abs(loom[s] - run.loss[s]);
    c.max_gap = std::max(c.max_gap, gap);
    c.max_gap_over_tolerance = std::max(c.max_gap_over_tolerance, gap / tolerance);
    if (!(gap <= tolerance) && c.first_outside < 0) {
      std::ostringstream out;
      out << "step " << s << ": Loom " << loom[s] << ", PyTorch " << run.loss[s] << " (float64 "
          << run.loss_f64[s] << "), |gap| " << gap << " > tolerance " << tolerance;
      c.first_outside = static_cast<int64_t>(s);
      c.first_outside_text = out.str();
    }
  }
  return c;
}

void load_initial_weights(nn::Module& model, const std::string& file) {
  nn::SafetensorsFile init = nn::load_safetensors(kParityDir + file);
  model.load_state_dict(init.tensors, /*strict=*/true);
}

// ---- the GPT on Genesis ----------------------------------------------------------------------

struct GptCase {
  nn::GPTConfig config;
  std::vector<Batch> batches;
  std::vector<Run> runs;
};

GptCase gpt_case(const nlohmann::json& all) {
  const nlohmann::json& j = all.at("gpt");
  std::ifstream in(kParityDir + j.at("text").get<std::string>());
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  // The script's vocabulary: the distinct characters, sorted (the text is ASCII).
  std::vector<int64_t> id(256, -1);
  for (unsigned char c : text.str()) id[c] = 0;
  int64_t vocab = 0;
  for (auto& v : id)
    if (v == 0) v = vocab++;
  GptCase g;
  g.config = {.vocab_size = vocab,
              .context = j.at("context"),
              .n_layers = j.at("n_layers"),
              .n_heads = j.at("n_heads"),
              .d_model = j.at("d_model")};
  REQUIRE(vocab == j.at("vocab_size").get<int64_t>());
  const std::string& s = text.str();
  const int64_t t = g.config.context;
  for (const auto& row : j.at("starts")) {
    std::vector<double> x, y;
    for (int64_t start : row.get<std::vector<int64_t>>())
      for (int64_t i = 0; i < t; ++i) {
        x.push_back(id[static_cast<unsigned char>(s[start + i])]);
        y.push_back(id[static_cast<unsigned char>(s[start + i + 1])]);
      }
    const int64_t b = static_cast<int64_t>(row.size());
    g.batches.emplace_back(test::make(x, {b, t}, kInt64), test::make(y, {b, t}, kInt64));
  }
  for (const auto& r : j.at("runs")) g.runs.push_back(read_run(r));
  return g;
}

// ---- SmallCNN on Fashion-MNIST -----------------------------------------------------------------

struct CnnCase {
  std::vector<Batch> batches;
  std::vector<Run> runs;
};

CnnCase cnn_case(const nlohmann::json& all) {
  const nlohmann::json& j = all.at("cnn");
  const data::IdxArray images = data::read_idx(j.at("images"));
  const data::IdxArray labels = data::read_idx(j.at("labels"));
  REQUIRE(images.dims == std::vector<int64_t>{60000, 28, 28});
  CnnCase c;
  for (const auto& row : j.at("indices")) {
    std::vector<double> x, y;  // every value exact in float32 and int64
    for (int64_t i : row.get<std::vector<int64_t>>()) {
      // As torch's uint8 -> float32, then / 255 in float32.
      for (int64_t p = 0; p < 28 * 28; ++p) x.push_back(static_cast<float>(images.data[i * 784 + p]) / 255.0f);
      y.push_back(labels.data[i]);
    }
    const int64_t b = static_cast<int64_t>(row.size());
    c.batches.emplace_back(test::make(x, {b, 1, 28, 28}, kFloat32), test::make(y, {b}, kInt64));
  }
  for (const auto& r : j.at("runs")) c.runs.push_back(read_run(r));
  return c;
}

void check_parity(const std::vector<double>& loom, const Run& run, const std::string& what) {
  const Comparison c = compare(loom, run);
  INFO(what, " ", run.name, ": ", c.first_outside_text);
  CHECK(c.first_outside == -1);
  MESSAGE(what, " ", run.name, ": loss ", loom.front(), " -> ", loom.back(), " (PyTorch ", run.loss.front(), " -> ",
          run.loss.back(), "); largest |gap| ", c.max_gap, ", largest |gap| / tolerance ", c.max_gap_over_tolerance);
}

}  // namespace

TEST_CASE("parity: the zoo GPT learns as in PyTorch, AdamW and SGD, 200 steps") {
  const GptCase g = gpt_case(parity_data());
  for (const Run& run : g.runs) {
    nn::GPT model(g.config);
    load_initial_weights(model, "gpt_init.safetensors");
    check_parity(train(model, g.batches, run), run, "gpt");
  }
}

TEST_CASE("parity: SmallCNN learns as in PyTorch, AdamW and SGD, 200 steps") {
  const CnnCase c = cnn_case(parity_data());
  for (const Run& run : c.runs) {
    nn::SmallCNN model(1, 10, 28);
    load_initial_weights(model, "cnn_init.safetensors");
    check_parity(train(model, c.batches, run), run, "cnn");
  }
}

// Negative controls: the tolerance is tight enough to see a formula that differs. Each runs
// the GPT's AdamW case with one detail changed and must leave the tolerance.
TEST_CASE("parity: the tolerance catches a wrong optimizer detail") {
  const GptCase g = gpt_case(parity_data());
  const Run& adamw = g.runs.at(0);
  REQUIRE(adamw.optimizer == "adamw");

  SUBCASE("weight decay as an L2 term (Adam) instead of decoupled (AdamW)") {
    nn::GPT model(g.config);
    load_initial_weights(model, "gpt_init.safetensors");
    Run l2 = adamw;
    auto optimizer = std::make_unique<nn::Adam>(model.parameters(),
                                                nn::AdamOptions{.lr = adamw.lr, .weight_decay = adamw.weight_decay});
    // Train with Adam's coupled decay through the same loop: the step is Adam's.
    std::vector<double> losses = train(model, g.batches, l2, [&](nn::Optimizer& scheduled) {
      for (size_t i = 0; i < optimizer->param_groups().size(); ++i)
        optimizer->param_groups()[i].lr() = scheduled.param_groups()[i].lr();
      optimizer->step();
    });
    const Comparison c = compare(losses, adamw);
    CHECK(c.first_outside >= 0);
    MESSAGE("L2 in place of decoupled decay: ", c.first_outside_text);
  }
  SUBCASE("the schedule one step late") {
    nn::GPT model(g.config);
    load_initial_weights(model, "gpt_init.safetensors");
    Run late = adamw;
    late.warmup += 1;
    std::vector<double> losses = train(model, g.batches, late);
    const Comparison c = compare(losses, adamw);
    CHECK(c.first_outside >= 0);
    MESSAGE("warm-up one step longer: ", c.first_outside_text);
  }
}
