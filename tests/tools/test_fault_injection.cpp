/*
 * LOOM_FAULT_INJECT's grammar (tools/train/fault_injection.h): every form parses to the fault it
 * names, and a malformed value is an error listing the expected forms (a test that meant to
 * inject a fault and silently did not would pass for the wrong reason).
 */
#include <doctest/doctest.h>

#include <cerrno>

#include "tests/test_util.h"
#include "tools/train/fault_injection.h"
#include "tools/train/options.h"

using namespace loom;
using namespace loom::train;

TEST_CASE("fault injection: kill, io and loader faults parse") {
  auto kill = parse_injected_fault("kill:rank=1:step=15");
  CHECK(kill->kind == InjectedFault::Kind::kKill);
  CHECK(kill->rank == 1);
  CHECK(kill->step == 15);

  auto io = parse_injected_fault("io:op=fsync:nth=2:errno=ENOSPC");
  CHECK(io->kind == InjectedFault::Kind::kIo);
  CHECK(io->io.op == nn::IoOp::kFsync);
  CHECK(io->io.nth == 2);
  CHECK(io->io.error == ENOSPC);
  CHECK(io->step == 0);  // the first checkpoint
  auto io_at = parse_injected_fault("io:op=any:nth=7:errno=EIO:step=40");
  CHECK(io_at->io.op == nn::IoOp::kAny);
  CHECK(io_at->io.error == EIO);
  CHECK(io_at->step == 40);

  auto hang = parse_injected_fault("loader:sample=12:hang");
  CHECK(hang->kind == InjectedFault::Kind::kLoader);
  CHECK(hang->sample == 12);
  CHECK(hang->hang);
  CHECK(!parse_injected_fault("loader:sample=3:throw")->hang);

  auto data = parse_injected_fault("data:step=5:delete");
  CHECK(data->kind == InjectedFault::Kind::kData);
  CHECK(data->step == 5);
  CHECK(data->remove);
  CHECK(!parse_injected_fault("data:step=5:truncate")->remove);
}

TEST_CASE("fault injection: an io fault is armed once, at the checkpoint it names") {
  std::optional<InjectedFault> fault = parse_injected_fault("io:op=write:nth=1:errno=EIO:step=8");
  maybe_arm_io_fault(fault, 4);
  CHECK(fault.has_value());  // not this checkpoint
  maybe_arm_io_fault(fault, 8);
  CHECK(!fault.has_value());  // armed, and used up
  nn::disarm_io_fault();
}

TEST_CASE("fault injection: malformed values name the variable and the expected forms") {
  for (const char* spec : {"io:op=fsync:nth=two:errno=ENOSPC", "io:op=sync:nth=1:errno=EIO",
                           "io:op=write:nth=1:errno=EPERM", "io:op=write:nth=0:errno=EIO", "loader:sample=3:crash",
                           "kill:rank=1", "io:op=write:nth=1:errno=EIO:step=x",
                           "data:step=5:rename"}) {
    CAPTURE(spec);
    const std::string msg = test::error_of([&] { parse_injected_fault(spec); });
    CHECK(msg.find(std::string("LOOM_FAULT_INJECT='") + spec + "'") != std::string::npos);
    CHECK(msg.find("kill:rank=R:step=N") != std::string::npos);
    CHECK(msg.find("loader:sample=I:throw|hang") != std::string::npos);
  }
}

namespace {
std::string parse_error(std::vector<const char*> args) {
  args.insert(args.begin(), "train");
  return test::error_of([&] { train::parse_options(static_cast<int>(args.size()), args.data()); });
}
}  // namespace

TEST_CASE("fault options: --on-checkpoint-error and --loader-timeout") {
  std::vector<const char*> base{"train", "--data", "d.h5", "--out", "run"};
  auto parsed = [&](std::vector<const char*> extra) {
    std::vector<const char*> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return *train::parse_options(static_cast<int>(args.size()), args.data()).options;
  };
  const train::TrainOptions plain = parsed({});
  CHECK(!plain.continue_on_checkpoint_error);
  CHECK(plain.loader_timeout == 0);
  // Defaults leave config.json as it was: runs from before these options stay "the same config".
  CHECK(!train::to_json(plain).contains("on-checkpoint-error"));
  CHECK(!train::to_json(plain).contains("loader-timeout"));
  const train::TrainOptions set = parsed({"--on-checkpoint-error", "continue", "--loader-timeout", "2.5"});
  CHECK(set.continue_on_checkpoint_error);
  CHECK(set.loader_timeout == 2.5);
  CHECK(train::to_json(set)["on-checkpoint-error"] == "continue");
  CHECK(!parsed({"--on-checkpoint-error", "stop"}).continue_on_checkpoint_error);

  CHECK(parse_error({"--data", "d.h5", "--out", "run", "--on-checkpoint-error", "retry"}).find("--on-checkpoint-error") !=
        std::string::npos);
  CHECK(parse_error({"--data", "d.h5", "--out", "run", "--loader-timeout", "1", "--workers", "0"})
            .find("--loader-timeout needs --workers >= 1") != std::string::npos);
  CHECK(!parse_error({"--data", "d.h5", "--out", "run", "--loader-timeout", "-1"}).empty());
}
