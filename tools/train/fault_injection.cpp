#include "tools/train/fault_injection.h"

#include <signal.h>

#include <cstdlib>
#include <cstdio>
#include <regex>

#include "core/error.h"

namespace loom::train {

std::optional<InjectedFault> parse_injected_fault(const std::string& spec) {
  static const std::regex form(R"(kill:rank=(\d{1,6}):step=(\d{1,12}))");
  std::smatch match;
  LOOM_CHECK(std::regex_match(spec, match, form), "LOOM_FAULT_INJECT='", spec,
             "': expected kill:rank=R:step=N (SIGKILL rank R after optimizer step N)");
  return InjectedFault{std::stoi(match[1].str()), std::stoll(match[2].str())};
}

std::optional<InjectedFault> injected_fault_from_env() {
  const char* spec = std::getenv("LOOM_FAULT_INJECT");
  if (spec == nullptr || *spec == '\0') return std::nullopt;
  return parse_injected_fault(spec);
}

void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t step) {
  if (!fault || fault->rank != rank || fault->step != step) return;
  std::fprintf(stderr, "train: LOOM_FAULT_INJECT: rank %d kills itself after step %lld\n", rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  ::raise(SIGKILL);
}

}  // namespace loom::train
