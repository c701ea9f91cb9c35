/*
 * tools/plan end to end, through the built binary (its exit status and output are what is
 * tested): a layout's report is the library's (planner.h) for the same model and layout, the
 * ranking lists only layouts that fit and says when none does, and bad input is exit status 2
 * with a message naming the flag or the layout.
 */
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/test_util.h"

#ifdef LOOM_PLAN_BIN
#include "distributed/plan/plan_report.h"
#include "distributed/plan/planner.h"

namespace loom::test {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

CliResult run_plan(const std::vector<std::string>& args) {
  const fs::path log = fs::temp_directory_path() / ("loom_plan_cli_" + std::to_string(::getpid()) + ".log");
  std::string command = std::string("'") + LOOM_PLAN_BIN + "'";
  for (const std::string& a : args) command += " '" + a + "'";
  command += " > '" + log.string() + "' 2>&1";
  const int raw = std::system(command.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(log, std::ios::binary);
  r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  fs::remove(log);
  return r;
}

TEST_CASE("plan: a layout's report is the library's prediction") {
  const CliResult r = run_plan({"--model", "gpt", "--layers", "4", "--d-model", "64", "--heads", "4", "--vocab", "65",
                                "--context", "32", "--dp", "2", "--tp", "2", "--pp", "2", "--microbatches", "4",
                                "--batch", "16", "--amp", "bf16", "--zero", "1"});
  REQUIRE(r.status == 0);
  using namespace distributed::plan;
  const ModelSpec model = gpt_spec({.layers = 4, .d_model = 64, .heads = 4, .vocab = 65, .context = 32});
  Layout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.microbatches = 4, l.batch = 16, l.amp = Amp::Bf16, l.zero = 1;
  CHECK(r.output == format_prediction(model, predict(model, l)));
  CHECK(r.output.find("bubble 20.0%") != std::string::npos);  // 1F1B, p 2, m 4: (p-1)/(m+p-1) = 1/5
}

TEST_CASE("plan: --memory says whether the layout fits") {
  const std::vector<std::string> base = {"--model", "gpt2-xl", "--dp", "64", "--batch", "64", "--amp", "bf16"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--memory", "32GB"});
  CliResult r = run_plan(args);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("does not fit") != std::string::npos);  // DDP: 16Ψ + 4Ψ of buckets = 31 GB + activations
  args.insert(args.end(), {"--zero", "3"});
  r = run_plan(args);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("\nfits ") != std::string::npos);
}

TEST_CASE("plan: --rank lists the layouts that fit, fastest first, or says none does") {
  CliResult r = run_plan({"--model", "gpt2-xl", "--batch", "512", "--amp", "bf16", "--gpus", "64", "--memory", "80GB",
                          "--rank", "--top", "3"});
  REQUIRE(r.status == 0);
  CHECK(r.output.find("layouts of 64 GPUs fit 74.5 GiB per GPU; fastest first:") != std::string::npos);
  CHECK(r.output.find("\n1    dp ") != std::string::npos);
  CHECK(r.output.find("\n3    dp ") != std::string::npos);
  CHECK(r.output.find("\n4    dp ") == std::string::npos);
  r = run_plan({"--model", "gpt2-xl", "--batch", "512", "--gpus", "2", "--memory", "1GB", "--rank"});
  REQUIRE(r.status == 0);
  CHECK(r.output.find("0 layouts of 2 GPUs fit") != std::string::npos);
  // And why: the layout that needs the least memory, and how much.
  CHECK(r.output.find("the layout that needs the least memory, dp ") != std::string::npos);
  CHECK(r.output.find("GiB per GPU, over the 0.9 GiB given") != std::string::npos);
  // A batch that no layout can split is named as the reason.
  r = run_plan({"--model", "gpt2-xl", "--gpus", "64", "--memory", "80GB", "--rank"});
  REQUIRE(r.status == 0);
  CHECK(r.output.find("no layout of 64 GPUs splits --batch 1") != std::string::npos);
}

TEST_CASE("plan: bad input is exit status 2 with a message naming it") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--model", "resnet"}, "cnn and resnet are not modelled"},
      {{"--model", "gpt2-xl", "--tp", "8"}, "tp 8 does not divide"},
      {{"--model", "mlp", "--zero", "2"}, "needs dp >= 2"},
      {{"--model", "mlp", "--dp", "2", "--batch", "3"}, "batch 3 is not divisible by dp 2"},
      {{"--model", "mlp", "--hidden", "512,x"}, "--hidden '512,x'"},
      {{"--model", "mlp", "--amp", "fp8"}, "--amp fp8"},
      {{"--model", "mlp", "--rank"}, "--rank needs --gpus N and --memory SIZE"},
      {{"--model", "mlp", "--gpus", "4", "--memory", "lots", "--rank"}, "cannot read a memory size from 'lots'"},
      {{"--model", "mlp", "--pipeline-schedule", "interleaved"}, "the planner models gpipe, 1f1b and zb-h1"},
      {{"--frobnicate"}, "frobnicate"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const CliResult r = run_plan(c.args);
    CHECK(r.status == 2);
    CHECK(r.output.find("plan: error: ") != std::string::npos);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}

}  // namespace
}  // namespace loom::test

#else
#include <iostream>
TEST_CASE("plan: the CLI needs the distributed layer") { std::cout << "[skipped: no MPI]" << std::endl; }
#endif
