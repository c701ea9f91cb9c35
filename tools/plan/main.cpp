/*
 * plan: the parallelism planner on the command line (docs/parallelism.md, "Planning a layout").
 * What one rank of a layout holds and sends per step, or which layouts of N GPUs fit a memory
 * budget, fastest first. The model is the zoo's mlp or gpt with train's size flags, or a GPT-2
 * preset; all the arithmetic is distributed/plan/ (planner.h), this is only the entry point.
 *
 *   plan --model gpt2-xl --dp 8 --tp 8 --batch 512 --amp bf16
 *   plan --model gpt --layers 48 --d-model 1600 --heads 25 --vocab 50257 --context 1024 \
 *        --batch 512 --amp bf16 --gpus 64 --memory 80GB --rank
 *
 * Exit status: 0 done (also when no layout fits: the output says so), 2 bad input.
 */
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/plan/plan_report.h"
#include "distributed/plan/planner.h"
#include "tools/common/command_line.h"
#include "tools/common/error_exit.h"

namespace {

using namespace loom;
using namespace loom::distributed::plan;

struct PlanOptions {
  std::string model = "mlp";
  std::string hidden = "512,512";
  int64_t inputs = 784, classes = 10;  // mlp: features in and classes out (Fashion-MNIST)
  GptSizes gpt;
  Layout layout;
  std::string amp = "none", optimizer = "adam", schedule = "1f1b";
  double momentum = 0.9;
  int64_t gpus = 0;
  std::string memory;
  bool rank = false;
  int64_t top = 10;
  Hardware hardware;
};

std::vector<int64_t> parse_hidden(const std::string& text) {
  std::vector<int64_t> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t end = 0;
      const int64_t v = std::stoll(item, &end);
      if (end == item.size() && v > 0) {
        sizes.push_back(v);
        continue;
      }
    } catch (const std::exception&) {
    }
    LOOM_FAIL("--hidden '", text, "': expected positive integers separated by commas, e.g. 512,512");
  }
  return sizes;
}

ModelSpec make_model(const PlanOptions& o) {
  if (o.model == "mlp") {
    std::vector<int64_t> sizes{o.inputs};
    for (int64_t h : parse_hidden(o.hidden)) sizes.push_back(h);
    sizes.push_back(o.classes);
    return mlp_spec(sizes);
  }
  if (o.model == "gpt") return gpt_spec(o.gpt);
  if (o.model.rfind("gpt2", 0) == 0) return gpt_spec(gpt2_sizes(o.model));
  LOOM_FAIL("--model ", o.model, ": the planner models mlp, gpt and the GPT-2 presets (gpt2, gpt2-medium, "
            "gpt2-large, gpt2-xl); cnn and resnet are not modelled (their activations depend on the image size)");
}

Layout make_layout(const PlanOptions& o) {
  Layout l = o.layout;
  if (o.amp == "none") l.amp = Amp::None;
  else if (o.amp == "bf16") l.amp = Amp::Bf16;
  else if (o.amp == "fp16") l.amp = Amp::Fp16;
  else LOOM_FAIL("--amp ", o.amp, ": expected none, bf16 or fp16");
  if (o.optimizer == "adam" || o.optimizer == "adamw") l.optimizer = OptimizerKind::Adam;
  else if (o.optimizer == "sgd") l.optimizer = o.momentum > 0 ? OptimizerKind::SgdMomentum : OptimizerKind::Sgd;
  else LOOM_FAIL("--optimizer ", o.optimizer, ": expected adam, adamw or sgd");
  if (o.schedule == "1f1b") l.schedule = PipelineKind::OneFOneB;
  else if (o.schedule == "gpipe") l.schedule = PipelineKind::GPipe;
  else if (o.schedule == "zb-h1") l.schedule = PipelineKind::ZeroBubbleH1;
  else LOOM_FAIL("--pipeline-schedule ", o.schedule, ": the planner models gpipe, 1f1b and zb-h1");
  return l;
}

int run(int argc, char** argv) {
  PlanOptions o;
  CLI::App app{"plan: per-rank memory, communication and pipeline bubble of a parallel layout"};
  app.add_option("--model", o.model, "mlp, gpt, or a preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl");
  app.add_option("--hidden", o.hidden, "mlp: hidden layer sizes (default 512,512)");
  app.add_option("--inputs", o.inputs, "mlp: input features (default 784)");
  app.add_option("--classes", o.classes, "mlp: classes (default 10)");
  app.add_option("--layers", o.gpt.layers, "gpt: transformer blocks (default 4)");
  app.add_option("--d-model", o.gpt.d_model, "gpt: width (default 128)");
  app.add_option("--heads", o.gpt.heads, "gpt: attention heads (default 4)");
  app.add_option("--vocab", o.gpt.vocab, "gpt: vocabulary (default 65)");
  app.add_option("--context", o.gpt.context, "gpt: tokens per sequence (default 64)");
  app.add_option("--dp", o.layout.dp, "data-parallel ranks");
  app.add_option("--tp", o.layout.tp, "tensor-parallel ranks");
  app.add_option("--pp", o.layout.pp, "pipeline stages");
  app.add_option("--zero", o.layout.zero, "ZeRO stage over the data-parallel ranks: 0-3 (3: FSDP)");
  app.add_option("--microbatches", o.layout.microbatches, "micro-batches per step and data-parallel rank");
  app.add_flag("--checkpointing", o.layout.checkpointing, "recompute activations in backward");
  app.add_option("--amp", o.amp, "none, bf16 or fp16 (activations at 2 bytes)");
  app.add_option("--batch", o.layout.batch, "samples per optimizer step over all data-parallel ranks");
  app.add_option("--optimizer", o.optimizer, "adam, adamw or sgd (with --momentum)");
  app.add_option("--momentum", o.momentum, "sgd's momentum; 0 keeps no state (default 0.9)");
  app.add_option("--pipeline-schedule", o.schedule, "gpipe, 1f1b (default) or zb-h1");
  app.add_option("--gpus", o.gpus, "with --rank: the number of GPUs to lay out");
  app.add_option("--memory", o.memory, "with --rank: memory per GPU, e.g. 80GB or 40GiB");
  app.add_flag("--rank", o.rank, "list the layouts of --gpus that fit --memory, fastest first");
  app.add_option("--top", o.top, "with --rank: how many to list (default 10)");
  app.add_option("--flops", o.hardware.flops, "sustained flop/s per GPU for the step-time estimate");
  app.add_option("--bandwidth", o.hardware.bandwidth, "bytes/s a rank sends, for the step-time estimate");
  if (auto help = tools::parse_command_line(app, argc, argv)) {
    std::fputs(help->c_str(), stdout);
    return 0;
  }
  const ModelSpec model = make_model(o);
  const Layout layout = make_layout(o);
  if (o.rank) {
    LOOM_CHECK(o.gpus > 0 && !o.memory.empty(), "--rank needs --gpus N and --memory SIZE (e.g. --gpus 64 --memory 80GB)");
    LOOM_CHECK(o.top > 0, "--top ", o.top, ": expected a positive count");
    const double budget = parse_size(o.memory);
    const auto ranked = rank_layouts(model, o.gpus, budget, layout, o.hardware);
    std::fputs(format_ranking(model, ranked, o.gpus, budget, static_cast<size_t>(o.top)).c_str(), stdout);
    if (ranked.empty()) std::printf("%s\n", why_none_fits(model, o.gpus, budget, layout, o.hardware).c_str());
    return 0;
  }
  const Prediction prediction = predict(model, layout, o.hardware);
  std::fputs(format_prediction(model, prediction).c_str(), stdout);
  if (!o.memory.empty()) {
    const double budget = parse_size(o.memory);
    const double need = prediction.worst_stage().memory.total();
    std::printf("%s %s per GPU (the worst stage needs %s)\n", need <= budget ? "fits" : "does not fit",
                format_size(budget).c_str(), format_size(need).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return tools::error_exit("plan", e, 2);
  }
}
