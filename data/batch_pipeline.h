/*
 * OrderedPipeline: items begin, begin + 1, ..., end - 1 produced by N worker threads and
 * delivered in order, at most `window` ahead of the consumer.
 *
 *   workers claim the next item number, produce it without any lock, and park the result in a
 *   reorder buffer; the consumer waits for exactly the item it needs next. The window bounds
 *   the buffer (memory) and is the prefetch depth: with window >= workers, every worker stays
 *   busy while the consumer works on earlier items.
 *
 * Which item a worker produces, and when, varies from run to run; what item i is does not, so
 * the sequence delivered is the same for any number of workers. An exception while producing
 * item i is delivered in its place: next() rethrows it when the consumer reaches i, after
 * stopping and joining every worker. The destructor also stops and joins them, so a pipeline
 * abandoned mid-way (a `break` out of an epoch) leaves no thread behind. With zero workers
 * next() produces each item itself, on the caller's thread.
 *
 * Timeout: next(timeout) throws PipelineTimeout (naming the item and the worker producing it)
 * when the item is not ready in time. A worker stuck in produce() (a hung read) can never be
 * joined, so the pipeline then detaches its threads instead: each holds the pipeline's shared
 * state (and the produce function with whatever it captured) through a shared_ptr, so the state
 * lives until the last of them returns, if it ever does, and nothing it touches is freed under
 * it. detached_pipeline_workers() counts those still running (tests wait for it to reach 0).
 */
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

namespace loom::data {

// Worker threads of timed-out pipelines that have not returned yet.
inline std::atomic<int>& detached_pipeline_workers() {
  static std::atomic<int> count{0};
  return count;
}

// next(timeout) ran out of time waiting for `item`, which `worker` was producing (-1: no worker
// had claimed it).
class PipelineTimeout : public Error {
 public:
  PipelineTimeout(int64_t item, int worker, const std::string& message)
      : Error(message), item_(item), worker_(worker) {}
  int64_t item() const { return item_; }
  int worker() const { return worker_; }

 private:
  int64_t item_;
  int worker_;
};

template <class T>
class OrderedPipeline {
 public:
  // produce(item, worker): worker is the producing thread's number in [0, workers), or -1 for
  // the caller's thread (zero workers).
  using Produce = std::function<T(int64_t item, int worker)>;

  OrderedPipeline(int64_t begin, int64_t end, int workers, int64_t window, Produce produce)
      : state_(std::make_shared<State>()) {
    LOOM_CHECK(workers >= 0 && begin <= end, "OrderedPipeline: bad arguments");
    state_->produce = std::move(produce);
    state_->next = begin;
    state_->claim = begin;
    state_->end = end;
    state_->window = std::max<int64_t>(window, 1);
    state_->working_on.assign(static_cast<size_t>(workers), -1);
    try {
      for (int i = 0; i < workers; ++i)
        threads_.emplace_back([state = state_, i]() mutable {
          // A worker's ops stay on its own thread: the workers already run side by side, and a
          // team per worker would put workers x threads on the training step's cores.
          ThreadLimitGuard one_thread(1);
          const bool detached = work(*state, i);
          state.reset();  // the last owner frees the state here, before the count says "returned"
          if (detached) --detached_pipeline_workers();
        });
    } catch (...) {
      stop();  // the destructor does not run when the constructor throws
      throw;
    }
  }

  ~OrderedPipeline() { stop(); }
  OrderedPipeline(const OrderedPipeline&) = delete;
  OrderedPipeline& operator=(const OrderedPipeline&) = delete;

  bool done() const { return state_->next >= state_->end; }
  int64_t position() const { return state_->next; }

  // The next item in order; rethrows the exception its production threw. With a positive
  // timeout and workers, throws PipelineTimeout when the item is not ready within it.
  T next(std::chrono::duration<double> timeout = std::chrono::duration<double>::zero()) {
    State& s = *state_;
    LOOM_CHECK(!done(), "OrderedPipeline: no items left");
    if (threads_.empty()) {
      T item = s.produce(s.next, -1);  // on failure the position stays at the failed item
      ++s.next;
      return item;
    }
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      // Waits for item next: a worker has claimed it or will (claims go in order and stop
      // only at a failure after it or at the end, so it is always produced, unless it hangs).
      auto ready = [&] { return s.ready.count(s.next) != 0; };
      if (timeout > timeout.zero()) {
        if (!s.ready_cv.wait_for(lock, timeout, ready)) {
          const int64_t item = s.next;
          int worker = -1;
          for (size_t w = 0; w < s.working_on.size(); ++w)
            if (s.working_on[w] == item) worker = static_cast<int>(w);
          lock.unlock();
          abandon();
          throw PipelineTimeout(item, worker, "OrderedPipeline: item " + std::to_string(item) + " timed out");
        }
      } else {
        s.ready_cv.wait(lock, ready);
      }
      auto it = s.ready.find(s.next);
      slot = std::move(it->second);
      s.ready.erase(it);
      ++s.next;
    }
    s.work_cv.notify_all();  // a place in the window came free
    if (slot.error) {
      stop();
      std::rethrow_exception(slot.error);
    }
    return std::move(*slot.value);
  }

  // Tells the workers to stop and joins them; items in the reorder buffer are dropped.
  void stop() {
    cancel();
    for (auto& t : threads_)
      if (t.joinable()) t.join();  // each finishes at most the item it is producing
    threads_.clear();
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->ready.clear();
  }

 private:
  struct Slot {
    std::optional<T> value;
    std::exception_ptr error;
  };

  // Everything the workers touch: owned jointly by the pipeline and its threads (see the header
  // comment on timeouts), so a detached worker never outlives it.
  struct State {
    Produce produce;
    std::mutex mutex;
    std::condition_variable work_cv, ready_cv;
    std::map<int64_t, Slot> ready;  // the reorder buffer
    std::vector<int64_t> working_on;  // per worker: the item it is producing, -1 when none
    int64_t next = 0;               // the consumer's position: the next item to deliver
    int64_t claim = 0;              // the next item a worker will produce
    int64_t end = 0;
    int64_t window = 1;
    bool cancelled = false, failed = false, detached = false;
  };

  void cancel() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->cancelled = true;
    }
    state_->work_cv.notify_all();
  }

  // After a timeout: a worker stuck in produce() would block a join forever, so every worker is
  // detached; the idle ones return at once (cancelled), the stuck one when its produce() does.
  void abandon() {
    // Counted before they learn they are detached, so the count never dips below zero.
    detached_pipeline_workers() += static_cast<int>(threads_.size());
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->cancelled = true;
      state_->detached = true;
    }
    state_->work_cv.notify_all();
    for (auto& t : threads_) t.detach();
    threads_.clear();
  }

  // A worker's loop; returns whether the pipeline detached it.
  static bool work(State& s, int worker) {
    while (true) {
      int64_t item;
      {
        std::unique_lock<std::mutex> lock(s.mutex);
        // Waits for room in the window (or for the end, a failure, or a stop).
        s.work_cv.wait(lock, [&] { return s.cancelled || s.failed || s.claim >= s.end || s.claim < s.next + s.window; });
        if (s.cancelled || s.failed || s.claim >= s.end) break;
        item = s.claim++;
        s.working_on[static_cast<size_t>(worker)] = item;
      }
      Slot slot;
      try {
        slot.value.emplace(s.produce(item, worker));
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(s.mutex);
        s.working_on[static_cast<size_t>(worker)] = -1;
        if (s.cancelled) break;
        // After a failure no new items are claimed; those before it are all claimed already
        // and still get delivered, so the consumer reaches the failure in order.
        if (slot.error) s.failed = true;
        s.ready.emplace(item, std::move(slot));
      }
      s.ready_cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.detached;
  }

  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace loom::data
