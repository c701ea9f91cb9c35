/*
 * A data-loader worker that dies or hangs (data/data_loader.h): a sample that throws ends the
 * pass with an error naming the sample, its epoch and batch, the worker and the file; a sample
 * that never returns ends it after the loader's timeout with an error naming the worker, the
 * sample it is stuck on and the file, and neither that nor destroying the loader waits for the
 * stuck thread. The blocked sample is released at the end of each case, and the case waits for
 * the detached thread to return, so nothing outlives it (ASan, TSan).
 */
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "data/data.h"
#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;

namespace {

constexpr const char* kFile = "shards/train-00003.h5";

// Example i is i; example `bad` throws, or (with a gate) blocks until the gate opens.
class FaultyDataset : public Dataset {
 public:
  struct Gate {
    std::mutex mutex;
    std::condition_variable cv;
    bool open = false;
    void release() {
      {
        std::lock_guard<std::mutex> lock(mutex);
        open = true;
      }
      cv.notify_all();
    }
  };

  FaultyDataset(int64_t size, int64_t bad, std::shared_ptr<Gate> gate = nullptr)
      : size_(size), bad_(bad), gate_(std::move(gate)) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    check_index(index, size_, "FaultyDataset");
    if (index == bad_) {
      if (!gate_) LOOM_FAIL("read error at ", index);
      std::unique_lock<std::mutex> lock(gate_->mutex);
      gate_->cv.wait(lock, [&] { return gate_->open; });
    }
    return {full({2}, static_cast<double>(index), kFloat32), full({}, index % 3, kInt64)};
  }
  std::string source() const override { return kFile; }

 private:
  int64_t size_, bad_;
  std::shared_ptr<Gate> gate_;
};

// Waits (a few seconds at most) for the threads of timed-out passes to return.
bool detached_workers_returned() {
  for (int i = 0; i < 500 && detached_pipeline_workers().load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return detached_pipeline_workers().load() == 0;
}

}  // namespace

TEST_CASE("loader faults: a throwing sample names the sample, epoch, batch, worker and file") {
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    auto ds = std::make_shared<FaultyDataset>(60, 37);
    DataLoader loader(ds, DataLoaderOptions().batch_size(5).workers(workers));  // 37 is in batch 7
    int64_t delivered = 0;
    const std::string msg = test::error_of([&] {
      for (Batch& b : loader) delivered += b.index == delivered;
    });
    CAPTURE(msg);
    CHECK(delivered == 7);
    CHECK(test::contains_all(msg, {"sample 37", "epoch 0, batch 7", "file 'shards/train-00003.h5'",
                                   "read error at 37"}));
    if (workers == 0)
      CHECK(test::contains_all(msg, {"on the calling thread (workers 0)"}));
    else
      CHECK((msg.find("on worker 0") != std::string::npos || msg.find("on worker 1") != std::string::npos ||
             msg.find("on worker 2") != std::string::npos));
  }
}

TEST_CASE("loader faults: a hung sample ends the pass after the timeout, naming the worker, sample and file") {
  for (int workers : {1, 3}) {
    CAPTURE(workers);
    auto gate = std::make_shared<FaultyDataset::Gate>();
    int64_t delivered = 0;
    std::string msg;
    const auto start = std::chrono::steady_clock::now();
    {
      auto ds = std::make_shared<FaultyDataset>(60, 37, gate);
      DataLoader loader(ds, DataLoaderOptions().batch_size(5).workers(workers).timeout(1));
      msg = test::error_of([&] {
        for (Batch& b : loader) delivered += b.index == delivered;
      });
      // The loader is destroyed here, its worker still blocked: this must not wait for it.
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CAPTURE(msg);
    CHECK(delivered == 7);
    CHECK(test::contains_all(msg, {"batch 7 of epoch 0 was not ready within 1 s", "stuck reading sample 37",
                                   "file 'shards/train-00003.h5'"}));
    bool named = false;
    for (int w = 0; w < workers; ++w) named |= msg.find("worker " + std::to_string(w) + " is stuck") != std::string::npos;
    CHECK(named);
    CHECK(seconds < 20);  // the batches before it take milliseconds; no join waited on the hang
    CHECK(detached_pipeline_workers().load() >= 1);  // the stuck one, at least, is still out there
    gate->release();
    CHECK(detached_workers_returned());
  }
}

TEST_CASE("loader faults: a timeout needs workers, and a slow but finite batch within it is delivered") {
  auto ds = std::make_shared<FaultyDataset>(20, -1);
  CHECK(test::contains_all(test::error_of([&] { DataLoader(ds, DataLoaderOptions().timeout(1)); }),
                           {"timeout 1 s needs workers >= 1"}));
  CHECK(test::contains_all(test::error_of([&] { DataLoader(ds, DataLoaderOptions().workers(1).timeout(-1)); }),
                           {"timeout must be >= 0"}));
  // With a timeout that is never reached, the same batches as without one.
  DataLoader timed(ds, DataLoaderOptions().batch_size(3).workers(2).shuffle(true).seed(5).timeout(30));
  DataLoader plain(ds, DataLoaderOptions().batch_size(3).workers(0).shuffle(true).seed(5));
  std::vector<std::vector<int64_t>> a, b;
  for (Batch& x : timed) a.push_back(x.indices);
  for (Batch& x : plain) b.push_back(x.indices);
  CHECK(a == b);
  CHECK(a.size() == 7);
}
