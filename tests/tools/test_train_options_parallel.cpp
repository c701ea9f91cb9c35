/*
 * tools/train: the parallelism flags (--dp, --tp, --pp, --microbatches, --pipeline-schedule,
 * --pipeline-chunks, --zero, --collective-timeout). Every combination train cannot run correctly is refused before anything
 * starts, with one line that names the problem and the way out; what needs the data or the job
 * (classes, vocabulary, world size) is checked in tests/distributed/test_train_parallel.cpp.
 */
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/train/options.h"
#include "tests/tools/train_options_test_util.h"

namespace loom::test {
namespace {

using train::TrainOptions;

// The required --data and --out, then `extra`.
std::vector<const char*> with_required(std::initializer_list<const char*> extra) {
  std::vector<const char*> args{"--data", "x.h5", "--out", "r"};
  args.insert(args.end(), extra);
  return args;
}
std::string parse_error(std::initializer_list<const char*> extra) { return train_parse_error(with_required(extra)); }
TrainOptions parse(std::initializer_list<const char*> extra) { return parse_train(with_required(extra)); }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("train options: the parallelism flags parse, and config.json keeps them only when set") {
  TrainOptions o = parse({"--dp", "2", "--tp", "2", "--pp", "2", "--microbatches", "8", "--pipeline-schedule",
                          "gpipe", "--zero", "1", "--collective-timeout", "30", "--hidden", "64,64"});
  CHECK(o.dp == 2);
  CHECK(o.tp == 2);
  CHECK(o.pp == 2);
  CHECK(o.microbatches == 8);
  CHECK(o.pipeline_schedule == train::PipelineSchedule::kGPipe);
  CHECK(o.zero == 1);
  CHECK(o.collective_timeout == 30);
  nlohmann::json j = train::to_json(o);
  CHECK(j.at("tp") == 2);
  CHECK(j.at("pp") == 2);
  CHECK(j.at("microbatches") == 8);
  CHECK(j.at("pipeline-schedule") == "gpipe");
  CHECK(j.at("zero") == 1);

  TrainOptions plain = parse({});
  CHECK(plain.pipeline_schedule == train::PipelineSchedule::kOneFOneB);
  CHECK(plain.collective_timeout == 300);
  nlohmann::json p = train::to_json(plain);
  for (const char* key :
       {"dp", "tp", "pp", "microbatches", "pipeline-schedule", "zero", "collective-timeout"})
    CHECK_MESSAGE(!p.contains(key), key);
}

TEST_CASE("train options: --pipeline-schedule interleaved (with --pipeline-chunks) and zb-h1") {
  TrainOptions interleaved =
      parse({"--pp", "2", "--microbatches", "4", "--pipeline-schedule", "interleaved", "--hidden", "32,32,32"});
  CHECK(interleaved.pipeline_schedule == train::PipelineSchedule::kInterleaved);
  CHECK(interleaved.pipeline_chunks == 0);
  CHECK(train::pipeline_chunks(interleaved) == 2);  // the default
  nlohmann::json j = train::to_json(interleaved);
  CHECK(j.at("pipeline-schedule") == "interleaved");
  CHECK(j.at("pipeline-chunks") == 2);
  TrainOptions three = parse({"--model", "gpt", "--layers", "4", "--pp", "2", "--microbatches", "2",
                              "--pipeline-schedule", "interleaved", "--pipeline-chunks", "3"});
  CHECK(train::pipeline_chunks(three) == 3);
  CHECK(train::to_json(three).at("pipeline-chunks") == 3);
  TrainOptions zb = parse({"--pp", "2", "--microbatches", "4", "--pipeline-schedule", "zb-h1"});
  CHECK(zb.pipeline_schedule == train::PipelineSchedule::kZeroBubbleH1);
  CHECK(train::pipeline_chunks(zb) == 1);
  CHECK(train::to_json(zb).at("pipeline-schedule") == "zb-h1");
  CHECK_FALSE(train::to_json(zb).contains("pipeline-chunks"));  // only the interleaved schedule has chunks

  // Each refusal names the numbers.
  CHECK(contains(parse_error({"--pp", "2", "--microbatches", "3", "--batch", "63", "--pipeline-schedule", "interleaved",
                              "--hidden", "32,32,32"}),
                 "--pipeline-schedule interleaved: --microbatches 3 is not a multiple of --pp 2"));
  CHECK(contains(parse_error({"--pp", "2", "--microbatches", "4", "--pipeline-schedule", "interleaved"}),
                 "--pp 2 x --pipeline-chunks 2 = 4 pipeline stages, but the mlp has only 3 linear layers"));
  CHECK(contains(parse_error({"--model", "gpt", "--layers", "1", "--pp", "2", "--microbatches", "2",
                              "--pipeline-schedule", "interleaved"}),
                 "= 4 pipeline stages, but the gpt has only 3 pipeline layers"));
  CHECK(contains(parse_error({"--pp", "2", "--microbatches", "2", "--pipeline-chunks", "2"}),
                 "--pipeline-chunks 2: only --pipeline-schedule interleaved"));
  CHECK(contains(parse_error({"--pipeline-schedule", "interleaved"}), "needs --pp 2 or more"));
  CHECK(contains(parse_error({"--pp", "2", "--microbatches", "2", "--pipeline-schedule", "interleaved",
                              "--pipeline-chunks", "1"}),
                 "one chunk per rank is --pipeline-schedule 1f1b"));
  CHECK(contains(parse_error({"--pp", "2", "--pipeline-schedule", "interleaved", "--pipeline-chunks", "0"}),
                 "--pipeline-chunks"));
}

TEST_CASE("train options: --help names --pipeline-schedule apart from the LR --schedule") {
  std::vector<const char*> argv{"train", "--help"};
  train::ParseOutcome outcome = train::parse_options(2, argv.data());
  CHECK(contains(outcome.message, "--pipeline-schedule"));
  CHECK(contains(outcome.message, "--schedule is the LR schedule"));
  CHECK(contains(outcome.message, "--collective-timeout"));
}

TEST_CASE("train options: combinations that cannot run say why and what to do instead") {
  CHECK(contains(parse_error({"--model", "cnn", "--tp", "2"}), "--tp works with --model mlp and gpt"));
  CHECK(contains(parse_error({"--model", "resnet", "--pp", "2"}), "--pp works with --model mlp and gpt"));
  CHECK(parse_error({"--model", "gpt", "--pp", "2", "--tp", "2"}).empty());  // each stage split over its tensor group
  CHECK(contains(parse_error({"--model", "gpt", "--layers", "2", "--pp", "5"}), "at most --pp 4"));
  CHECK(parse_error({"--model", "gpt", "--layers", "2", "--pp", "4"}).empty());
  CHECK(contains(parse_error({"--microbatches", "4"}), "needs --pp 2 or more"));
  CHECK(contains(parse_error({"--pp", "2", "--batch", "64", "--microbatches", "5"}),
                 "--microbatches 5 does not divide --batch 64"));
  CHECK(contains(parse_error({"--hidden", "16", "--pp", "3"}), "at most --pp 2"));
  CHECK(contains(parse_error({"--hidden", "30,16", "--tp", "4"}),
                 "--tp 4 does not divide the hidden layer size 30"));
  CHECK(contains(parse_error({"--model", "gpt", "--heads", "4", "--d-model", "64", "--tp", "3"}),
                 "--tp 3 does not divide --heads 4"));
  CHECK(contains(parse_error({"--tp", "2", "--amp", "bf16"}), "use --amp none"));
  CHECK(contains(parse_error({"--pp", "2", "--teacher", "t.safetensors"}), "--dp only"));
  CHECK(contains(parse_error({"--zero", "1"}), "needs --dp 2 or more"));
  CHECK(contains(parse_error({"--dp", "2", "--zero", "2", "--clip", "1"}), "drop --clip or use --zero 0"));
  CHECK(contains(parse_error({"--dp", "2", "--zero", "1", "--amp", "fp16"}), "--amp bf16 or --zero 0"));
  CHECK(contains(parse_error({"--zero", "3"}), "--zero"));
  CHECK(contains(parse_error({"--pipeline-schedule", "zigzag"}), "--pipeline-schedule"));
  // What works: clipping with tensor and pipeline parallelism (the norm is taken over the job).
  CHECK(parse_error({"--hidden", "16,16", "--dp", "2", "--tp", "2", "--pp", "2", "--clip", "1"}).empty());
  CHECK(parse_error({"--dp", "2", "--zero", "2", "--amp", "bf16"}).empty());
}

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

TEST_CASE("train options: --dropout (gpt only, not with --tp/--pp) and --checkpoint-async round-trip through config.json") {
  TrainOptions o = parse({"--model", "gpt", "--dropout", "0.1", "--checkpoint-async", "--dp", "2"});
  CHECK(o.dropout == doctest::Approx(0.1));
  CHECK(o.checkpoint_async);
  nlohmann::json j = train::to_json(o);
  CHECK(j.at("dropout") == 0.1);
  CHECK(j.at("checkpoint-async") == true);
  // Left out when not set, so that older run directories still compare equal.
  nlohmann::json plain = train::to_json(parse({"--model", "gpt"}));
  CHECK_FALSE(plain.contains("dropout"));
  CHECK_FALSE(plain.contains("checkpoint-async"));

  CHECK(contains(parse_error({"--model", "mlp", "--dropout", "0.2"}), "--dropout: only --model gpt has dropout layers"));
  CHECK(contains(parse_error({"--model", "gpt", "--dropout", "0.2", "--tp", "2", "--dp", "1"}),
                 "--dropout with --tp: the tensor- and pipeline-parallel GPTs have no dropout layers"));
  CHECK(contains(parse_error({"--model", "gpt", "--dropout", "1.5"}), "--dropout"));
}

}  // namespace
}  // namespace loom::test
