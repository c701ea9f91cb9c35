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
 */
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"

namespace loom::data {

template <class T>
class OrderedPipeline {
 public:
  using Produce = std::function<T(int64_t)>;

  OrderedPipeline(int64_t begin, int64_t end, int workers, int64_t window, Produce produce)
      : produce_(std::move(produce)),
        next_(begin),
        claim_(begin),
        end_(end),
        window_(std::max<int64_t>(window, 1)) {
    LOOM_CHECK(workers >= 0 && begin <= end, "OrderedPipeline: bad arguments");
    try {
      for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    } catch (...) {
      stop();  // the destructor does not run when the constructor throws
      throw;
    }
  }

  ~OrderedPipeline() { stop(); }
  OrderedPipeline(const OrderedPipeline&) = delete;
  OrderedPipeline& operator=(const OrderedPipeline&) = delete;

  bool done() const { return next_ >= end_; }
  int64_t position() const { return next_; }

  // The next item in order; rethrows the exception its production threw.
  T next() {
    LOOM_CHECK(!done(), "OrderedPipeline: no items left");
    if (threads_.empty()) {
      T item = produce_(next_);  // on failure the position stays at the failed item
      ++next_;
      return item;
    }
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Waits for item next_: a worker has claimed it or will (claims go in order and stop
      // only at a failure after it or at the end, so it is always produced).
      ready_cv_.wait(lock, [&] { return ready_.count(next_) != 0; });
      auto it = ready_.find(next_);
      slot = std::move(it->second);
      ready_.erase(it);
      ++next_;
    }
    work_cv_.notify_all();  // a place in the window came free
    if (slot.error) {
      stop();
      std::rethrow_exception(slot.error);
    }
    return std::move(*slot.value);
  }

  // Tells the workers to stop and joins them; items in the reorder buffer are dropped.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();  // each finishes at most the item it is producing
    threads_.clear();
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.clear();
  }

 private:
  struct Slot {
    std::optional<T> value;
    std::exception_ptr error;
  };

  void work() {
    while (true) {
      int64_t item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Waits for room in the window (or for the end, a failure, or a stop).
        work_cv_.wait(lock,
                      [&] { return cancelled_ || failed_ || claim_ >= end_ || claim_ < next_ + window_; });
        if (cancelled_ || failed_ || claim_ >= end_) return;
        item = claim_++;
      }
      Slot slot;
      try {
        slot.value.emplace(produce_(item));
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cancelled_) return;
        // After a failure no new items are claimed; those before it are all claimed already
        // and still get delivered, so the consumer reaches the failure in order.
        if (slot.error) failed_ = true;
        ready_.emplace(item, std::move(slot));
      }
      ready_cv_.notify_all();
    }
  }

  Produce produce_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  std::map<int64_t, Slot> ready_;  // the reorder buffer
  int64_t next_;                   // the consumer's position: the next item to deliver
  int64_t claim_;                  // the next item a worker will produce
  int64_t end_;
  int64_t window_;
  bool cancelled_ = false, failed_ = false;
};

}  // namespace loom::data
