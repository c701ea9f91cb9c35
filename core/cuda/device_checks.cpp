/*
 * The eager half of the GPU's input checks (device_checks.h); the graphs' half is in graph.cpp.
 *
 * Each stream that ran a check has a slab of kWordsPerStream device words, one per distinct check
 * (its text and position name), handed out in order. The host remembers whether a check ran on
 * the stream since its words were last read, so a wait after a step without checks costs nothing,
 * and a wait after one costs one copy of the slab's used words.
 */
#include "core/cuda/device_checks.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/cuda_graph.h"

namespace loom::cuda {

namespace {

// Distinct checks a stream keeps words for. More would only come from a loop that varies the
// checked sizes (an index_select over a different dim size each call); the slab is then read
// and started afresh, at the cost of one wait for the stream.
constexpr size_t kWordsPerStream = 64;
constexpr unsigned long long kNoFailure = ~0ull;

struct Check {
  std::string what, position;
};

struct StreamWords {
  unsigned long long* slab = nullptr;
  std::vector<Check> checks;  // the check of each handed-out word, in slab order
  bool ran = false;           // a word was handed out since the slab was last read
};

// A stream's words stay after the stream is destroyed (512 bytes each; checks run on the streams
// of computation, which are few): a wait for the whole device reads them without the stream.
struct EagerChecks {
  std::mutex mutex;
  std::map<StreamHandle, StreamWords> streams;
  std::atomic<bool> any_ran{false};
};

EagerChecks& eager_checks() {
  static auto* c = new EagerChecks();  // never destroyed: streams may wait after main returns
  return *c;
}

std::atomic<int>& blocking_setting() {
  static std::atomic<int> setting{[] {
    const char* env = std::getenv("LOOM_CUDA_BLOCKING_CHECKS");
    return env != nullptr && std::string(env) == "1" ? 1 : 0;
  }()};
  return setting;
}

// Reads the words of `stream` whose checks ran, appends the failed ones to `failures` and resets
// them. The caller holds the mutex and has waited for the stream (`synced_device`: for the whole
// device, so a synchronous copy will do; else an ordered copy on the stream itself).
void collect_failed(StreamHandle stream, StreamWords& words, bool synced_device,
                    std::vector<std::string>& failures) {
  if (!words.ran) return;
  words.ran = false;
  std::vector<unsigned long long> values(words.checks.size());
  const size_t bytes = values.size() * sizeof(unsigned long long);
  if (synced_device) {
    LOOM_CUDA_CHECK(cudaMemcpy(values.data(), words.slab, bytes, cudaMemcpyDeviceToHost));
  } else {
    LOOM_CUDA_CHECK(cudaMemcpyAsync(values.data(), words.slab, bytes, cudaMemcpyDeviceToHost, stream));
    // Waits only for the copy: the caller has already waited for the kernels before it.
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  bool failed = false;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == kNoFailure) continue;
    failed = true;
    failures.push_back(
        detail::concat(words.checks[i].what, " (at ", words.checks[i].position, " ", values[i], ")"));
  }
  if (!failed) return;
  // Reported once: the words are reset before any later launch records into them.
  if (synced_device) {
    // Streamless: `stream` may have been destroyed since its checks ran.
    LOOM_CUDA_CHECK(cudaMemset(words.slab, 0xff, bytes));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());  // waits for that memset (a failure is rare)
  } else {
    LOOM_CUDA_CHECK(cudaMemsetAsync(words.slab, 0xff, bytes, stream));  // ordered before its later launches
  }
}

[[noreturn]] void throw_failures(const std::vector<std::string>& failures) {
  const bool blocking = blocking_checks();
  LOOM_FAIL(
      failures.front(),
      failures.size() > 1 ? detail::concat(" (and ", failures.size() - 1, " more failed check(s))") : "",
      blocking
          ? "; the check ran on the GPU (blocking checks: reported at the op)"
          : "; the check ran on the GPU and is reported at this synchronisation (cuda::set_blocking_checks"
            "(true) or LOOM_CUDA_BLOCKING_CHECKS=1 reports an eager check at the op that launched it)");
}

// With the mutex held: the stream's slab, made on first use.
StreamWords& words_of(EagerChecks& c, StreamHandle stream) {
  StreamWords& words = c.streams[stream];
  if (words.slab == nullptr) {
    void* slab = nullptr;
    {
      RelaxedCaptureMode relaxed;  // not stream work: allowed while another thread captures
      LOOM_CUDA_CHECK(cudaMalloc(&slab, kWordsPerStream * sizeof(unsigned long long)));
    }
    // Ordered before the kernels that this stream will launch to record into it.
    LOOM_CUDA_CHECK(cudaMemsetAsync(slab, 0xff, kWordsPerStream * sizeof(unsigned long long), stream));
    words.slab = static_cast<unsigned long long*>(slab);
  }
  return words;
}

}  // namespace

bool blocking_checks() {
  return blocking_setting().load() != 0;
}

void set_blocking_checks(bool blocking) {
  blocking_setting() = blocking ? 1 : 0;
}

unsigned long long* device_check_word(const std::string& what, const std::string& position) {
  if (current_stream_capturing()) return graph_check_word(what, position);
  const StreamHandle stream = current_stream().handle();
  EagerChecks& c = eager_checks();
  std::vector<std::string> failures;
  std::lock_guard<std::mutex> lock(c.mutex);
  StreamWords& words = words_of(c, stream);
  size_t index = 0;
  while (index < words.checks.size() &&
         (words.checks[index].what != what || words.checks[index].position != position))
    ++index;
  if (index == kWordsPerStream) {
    // Full: waits for the kernels that may still record into the words, reads them, and starts
    // the slab afresh.
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    collect_failed(stream, words, false, failures);
    words.checks.clear();
    LOOM_CUDA_CHECK(cudaMemsetAsync(words.slab, 0xff, kWordsPerStream * sizeof(unsigned long long), stream));
    if (!failures.empty()) throw_failures(failures);
    index = 0;
  }
  if (index == words.checks.size()) words.checks.push_back({what, position});
  words.ran = true;
  c.any_ran = true;
  return words.slab + index;
}

void finish_device_check() {
  if (!blocking_checks() || current_stream_capturing()) return;
  const StreamHandle stream = current_stream().handle();
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));  // waits for the check's kernel
  report_failed_device_checks(stream);
}

void report_failed_device_checks() {
  std::vector<std::string> failures;
  EagerChecks& c = eager_checks();
  if (c.any_ran) {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.any_ran = false;
    for (auto& [stream, words] : c.streams) collect_failed(stream, words, true, failures);
  }
  collect_failed_graph_checks(failures);
  if (!failures.empty()) throw_failures(failures);
}

void report_failed_device_checks(StreamHandle waited_for) {
  std::vector<std::string> failures;
  EagerChecks& c = eager_checks();
  if (c.any_ran) {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto words = c.streams.find(waited_for);
    if (words != c.streams.end()) collect_failed(waited_for, words->second, false, failures);
    bool others_ran = false;
    for (const auto& [stream, other] : c.streams) others_ran = others_ran || other.ran;
    c.any_ran = others_ran;
  }
  collect_failed_graph_checks(failures);
  if (!failures.empty()) throw_failures(failures);
}

}  // namespace loom::cuda
