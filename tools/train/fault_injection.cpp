#include "tools/train/fault_injection.h"

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <thread>

#include "core/error.h"

namespace loom::train {
namespace {

constexpr const char* kForms =
    "expected kill:rank=R:step=N (SIGKILL rank R after optimizer step N), "
    "io:op=write|fsync|rename|any:nth=K:errno=ENOSPC|EIO|EDQUOT|EROFS[:step=S] (the K-th such call of the "
    "checkpoint of step S, or of the first checkpoint, fails), or loader:sample=I:throw|hang (reading training "
    "example I throws, or never returns), or data:step=N:truncate|delete (the --data file is cut to half or "
    "deleted after optimizer step N)";

int errno_from_name(const std::string& name) {
  if (name == "ENOSPC") return ENOSPC;
  if (name == "EIO") return EIO;
  if (name == "EDQUOT") return EDQUOT;
  return EROFS;  // the regex lets no other name through
}

// Example `sample` of the wrapped dataset throws, or blocks its reader forever (a hung file
// system, a stuck network mount): what the loader's error message and --loader-timeout are for.
class FaultyDataset : public data::Dataset {
 public:
  FaultyDataset(std::shared_ptr<data::Dataset> inner, int64_t sample, bool hang)
      : inner_(std::move(inner)), sample_(sample), hang_(hang) {}
  int64_t size() const override { return inner_->size(); }
  data::Example get(int64_t index) const override {
    if (index == sample_) {
      if (!hang_) LOOM_FAIL("LOOM_FAULT_INJECT: reading example ", index, " fails");
      // Sleeps rather than waits on a condition variable: nothing ever wakes it, and a sleeping
      // thread holds no object that the process's exit destroys.
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    return inner_->get(index);
  }
  std::string source() const override { return inner_->source(); }
  void check_unchanged() const override { inner_->check_unchanged(); }

 private:
  std::shared_ptr<data::Dataset> inner_;
  int64_t sample_;
  bool hang_;
};

}  // namespace

std::optional<InjectedFault> parse_injected_fault(const std::string& spec) {
  static const std::regex kill(R"(kill:rank=(\d{1,6}):step=(\d{1,12}))");
  static const std::regex io(
      R"(io:op=(write|fsync|rename|any):nth=(\d{1,9}):errno=(ENOSPC|EIO|EDQUOT|EROFS)(?::step=(\d{1,12}))?)");
  static const std::regex loader(R"(loader:sample=(\d{1,12}):(throw|hang))");
  static const std::regex data(R"(data:step=(\d{1,12}):(truncate|delete))");
  std::smatch m;
  InjectedFault f;
  if (std::regex_match(spec, m, kill)) {
    f.rank = std::stoi(m[1].str());
    f.step = std::stoll(m[2].str());
    return f;
  }
  if (std::regex_match(spec, m, io)) {
    f.kind = InjectedFault::Kind::kIo;
    f.io = {*nn::io_op_from_name(m[1].str()), std::stoll(m[2].str()), errno_from_name(m[3].str())};
    LOOM_CHECK(f.io.nth >= 1, "LOOM_FAULT_INJECT='", spec, "': nth counts from 1; ", kForms);
    f.step = m[4].matched ? std::stoll(m[4].str()) : 0;
    return f;
  }
  if (std::regex_match(spec, m, loader)) {
    f.kind = InjectedFault::Kind::kLoader;
    f.sample = std::stoll(m[1].str());
    f.hang = m[2].str() == "hang";
    return f;
  }
  if (std::regex_match(spec, m, data)) {
    f.kind = InjectedFault::Kind::kData;
    f.step = std::stoll(m[1].str());
    f.remove = m[2].str() == "delete";
    return f;
  }
  LOOM_FAIL("LOOM_FAULT_INJECT='", spec, "': ", kForms);
}

std::optional<InjectedFault> injected_fault_from_env() {
  const char* spec = std::getenv("LOOM_FAULT_INJECT");
  if (spec == nullptr || *spec == '\0') return std::nullopt;
  return parse_injected_fault(spec);
}

void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t step,
                        const std::string& data_file) {
  if (fault && fault->kind == InjectedFault::Kind::kData && fault->step == step && rank == 0) {
    std::fprintf(stderr, "train: LOOM_FAULT_INJECT: %s %s after step %lld\n", fault->remove ? "deleting" : "truncating",
                 data_file.c_str(), static_cast<long long>(step));
    std::error_code ec;
    if (fault->remove)
      std::filesystem::remove(data_file, ec);
    else
      std::filesystem::resize_file(data_file, std::filesystem::file_size(data_file, ec) / 2, ec);
    LOOM_CHECK(!ec, "LOOM_FAULT_INJECT: cannot change '", data_file, "': ", ec.message());
    return;
  }
  if (!fault || fault->kind != InjectedFault::Kind::kKill || fault->rank != rank || fault->step != step) return;
  std::fprintf(stderr, "train: LOOM_FAULT_INJECT: rank %d kills itself after step %lld\n", rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  ::raise(SIGKILL);
}

void maybe_arm_io_fault(std::optional<InjectedFault>& fault, int64_t step) {
  if (!fault || fault->kind != InjectedFault::Kind::kIo || (fault->step != 0 && fault->step != step)) return;
  nn::arm_io_fault(fault->io);
  fault.reset();  // once: the retry at the next checkpoint meets a healthy disk
}

std::shared_ptr<data::Dataset> with_loader_fault(const std::optional<InjectedFault>& fault,
                                                 std::shared_ptr<data::Dataset> dataset) {
  if (!fault || fault->kind != InjectedFault::Kind::kLoader) return dataset;
  LOOM_CHECK(fault->sample < dataset->size(), "LOOM_FAULT_INJECT: loader:sample=", fault->sample,
             " is outside the training set's ", dataset->size(), " examples");
  return std::make_shared<FaultyDataset>(std::move(dataset), fault->sample, fault->hang);
}

}  // namespace loom::train
