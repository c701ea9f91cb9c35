/*
 * Shared plumbing for the oneDNN-backed CPU kernels (matmul, convolution): the engine and a
 * stream per thread, Loom dtype -> oneDNN data type, memory descriptors that describe a Loom
 * tensor's own strides (so transposed views and channels_last tensors reach oneDNN without a
 * copy), and a small LRU cache of primitives keyed by shapes, strides, dtypes and parameters.
 *
 * Why a cache of our own: creating a primitive descriptor walks oneDNN's implementation list
 * and JIT-compiles the kernel (oneDNN's internal cache only spares the JIT, not the walk), tens
 * of microseconds to milliseconds; a training step calls the same few shapes again and again.
 *
 * Every primitive uses the user-managed scratchpad (attr scratchpad_mode::user): the scratch
 * bytes come from Loom's caching allocator on each call, which makes a cached primitive safe to
 * run from several threads at once and keeps the memory visible in Loom's allocator statistics.
 */
#pragma once

#include <oneapi/dnnl/dnnl_debug.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <source_location>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "core/tensor.h"

namespace loom::cpu::onednn {

const dnnl::engine& engine();
// One stream per calling thread: oneDNN streams are not meant to be shared across threads.
dnnl::stream& stream();

dnnl::memory::data_type data_type(DType t);

// A descriptor with t's sizes and strides. Strides of size-1 dims are normalised (oneDNN compares
// descriptors stride by stride, and a stray stride on a size-1 dim would force a needless reorder).
dnnl::memory::desc strided_md(IntArrayRef sizes, IntArrayRef strides, DType t);
inline dnnl::memory::desc strided_md(const Tensor& t) {
  return strided_md(t.sizes(), t.strides(), t.dtype());
}

// A memory object over Loom-owned bytes (no copy, no ownership).
inline dnnl::memory wrap(const dnnl::memory::desc& md, void* data) {
  return dnnl::memory(md, engine(), data);
}
inline dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return wrap(md, t.data_ptr());
}

// Uninitialised bytes from Loom's caching allocator (a uint8 tensor keeps them alive).
Tensor scratch_bytes(size_t nbytes);

// Primitive attributes with the user-managed scratchpad.
dnnl::primitive_attr user_scratchpad_attr();

// Runs f(), turning a dnnl::error into a loom::Error that names the op, the call site and
// oneDNN's own status string.
template <class F>
decltype(auto) guarded(std::string_view op, F&& f,
                       std::source_location where = std::source_location::current()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    detail::throw_error(
        where.file_name(), static_cast<int>(where.line()),
        detail::concat(op, ": oneDNN error: ", e.what(), " (", dnnl_status2str(e.status), ")"));
  }
}

// True for 16-bit types oneDNN cannot compute in on this CPU, which the kernels then convert to
// f32 and round back: f16 always (oneDNN 2.x has no f16 kernels for CPUs) and bf16 on CPUs
// without AVX-512 (oneDNN's bf16 kernels need avx512_core; an AVX2 CPU gets "unimplemented").
bool computes_in_f32(DType t);

// ---- threads ----------------------------------------------------------------------------------

// Multiply-adds a matmul or convolution thread must have before the product takes another thread
// (threads_for's grain for them): about 8 us of one core's work, ten times a fork and join on
// 2 threads. Measured on 2 cores, a second thread first pays between 0.5M and 0.65M multiply-adds
// (docs/cpu-threads.md); below that oneDNN does not split the product itself either.
inline constexpr int64_t kMacsPerThread = int64_t{1} << 18;

// The calling thread's OpenMP team sized for a product of `macs` multiply-adds while alive:
// oneDNN reads it when it creates a primitive (which keys therefore include
// omp_get_max_threads()) and when it runs one.
class ProductTeam : public OpenMpTeamSize {
 public:
  explicit ProductTeam(int64_t macs) : OpenMpTeamSize(threads_for(macs, kMacsPerThread)) {}
};

// ---- primitive cache ----------------------------------------------------------------------------

// A cache key: the numbers that decide a primitive (dims, strides, dtypes, parameters, tags).
class Key {
 public:
  Key& add(int64_t v) {
    v_.push_back(v);
    return *this;
  }
  Key& add(IntArrayRef values) {
    v_.push_back(static_cast<int64_t>(values.size()));
    v_.insert(v_.end(), values.begin(), values.end());
    return *this;
  }
  Key& add(const Tensor& t);  // defined-ness, dtype, sizes, strides (not the data)
  bool operator==(const Key& other) const { return v_ == other.v_; }
  size_t hash() const;

 private:
  std::vector<int64_t> v_;
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash(); }
};

// Least-recently-used cache of immutable values (primitives with their reorders). Thread-safe;
// the value is built under the lock the first time a key is seen.
template <class V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  template <class Make>
  std::shared_ptr<const V> get(const Key& key, const Make& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      entries_.splice(entries_.begin(), entries_, found->second);
      return found->second->second;
    }
    auto value = std::make_shared<const V>(make());
    entries_.emplace_front(key, value);
    index_.emplace(key, entries_.begin());
    if (entries_.size() > capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    return value;
  }

 private:
  using Entry = std::pair<Key, std::shared_ptr<const V>>;
  mutable std::mutex mutex_;
  size_t capacity_;
  std::list<Entry> entries_;
  std::unordered_map<Key, typename std::list<Entry>::iterator, KeyHash> index_;
};

// Executes `prim` with `args`, adding a user scratchpad of `scratch` bytes, on this thread's stream,
// and waits: oneDNN's CPU stream runs in order on the calling thread and its OpenMP team, so the
// wait returns when the outputs are written and the caller may free or read them.
void execute(const dnnl::primitive& prim, std::unordered_map<int, dnnl::memory>& args,
             const dnnl::memory::desc& scratch_md);

// A layout (and dtype) conversion between two descriptors, or nothing when they are equal.
struct Reorder {
  bool needed = false;
  dnnl::reorder prim;
  dnnl::memory::desc from, to, scratch_md;
};
Reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
// Runs r from `src` into `dst` (both laid out as r.from / r.to).
void run_reorder(const Reorder& r, const void* src, void* dst);

// `data` as laid out in r.to: the same pointer when no reorder is needed, else a buffer from
// Loom's allocator (kept alive by `holder`) holding the converted copy.
void* reordered(const Reorder& r, const void* data, Tensor& holder);

// Where a primitive writes an output that r converts (r.from: the primitive's layout) into the
// user's memory: the user's memory itself when no reorder is needed, else a scratch buffer
// that finish() reorders into it once the primitive has run.
class ReorderedOutput {
 public:
  ReorderedOutput(const Reorder& r, void* user);
  void* data() const { return data_; }
  void finish() const;

 private:
  const Reorder& reorder_;
  void* user_;
  Tensor buffer_;
  void* data_;
};

}  // namespace loom::cpu::onednn
