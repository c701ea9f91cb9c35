/* Block-cached row reads of an HDF5 dataset (see row_reader.h). */
#include "data/row_reader.h"

#include <algorithm>
#include <cstring>

#include "data/chunk_codec.h"

namespace loom::data {

namespace {

// Blocks of a contiguous dataset (or of tiny chunks read by hyperslab) are about this big:
// large enough that one H5Dread amortises its fixed cost, small enough to cache many.
constexpr size_t kHyperslabBlockBytes = size_t{1} << 20;

}  // namespace

RowReader::RowReader(std::shared_ptr<Hdf5File> file, std::string name, DType dtype, size_t cache_bytes,
                     Validator validator)
    : file_(std::move(file)),
      name_(std::move(name)),
      dtype_(dtype),
      validator_(std::move(validator)),
      capacity_(cache_bytes) {
  dataset_ = file_->open_dataset(name_);
  info_ = file_->describe(dataset_.get(), name_);
  LOOM_CHECK(!info_.dims.empty(), file_->path(), ": dataset '", name_, "' is a scalar; expected rows");
  row_bytes_ = static_cast<size_t>(info_.row_elements()) * dtype_size(dtype_);

  bool whole_rows = info_.chunked;
  for (size_t d = 1; d < info_.dims.size() && whole_rows; ++d)
    whole_rows = info_.chunk_dims[d] == info_.dims[d];
  raw_chunks_ = whole_rows && can_decode_filters(info_.filters) && info_.dtype() == dtype_ &&
                info_.type_size == dtype_size(dtype_) && info_.native_byte_order;
  if (raw_chunks_) {
    block_rows_ = info_.chunk_dims[0];  // a block is exactly one stored chunk
  } else {
    const int64_t by_bytes = static_cast<int64_t>(kHyperslabBlockBytes / std::max<size_t>(row_bytes_, 1));
    const int64_t chunk = info_.chunked ? info_.chunk_dims[0] : 1;
    // Whole chunks per block, so that HDF5 decodes each chunk once per block read.
    block_rows_ = std::max<int64_t>(1, by_bytes / chunk) * chunk;
  }
  block_rows_ = std::max<int64_t>(1, std::min(block_rows_, std::max<int64_t>(rows(), 1)));
}

std::string RowReader::where(int64_t k) const {
  return ::loom::detail::concat(file_->path(), ": dataset '", name_, "': chunk ", k, " (rows ",
                                k * block_rows_, "..", std::min(rows(), (k + 1) * block_rows_) - 1, ")");
}

RowReader::Block RowReader::load_block(int64_t k) const {
  const int64_t first = k * block_rows_;
  const int64_t last = std::min(rows(), first + block_rows_);
  const size_t bytes = static_cast<size_t>(last - first) * row_bytes_;
  auto data = std::make_shared<std::vector<uint8_t>>();
  bool done = false;
  if (raw_chunks_) {
    std::vector<int64_t> offset(info_.dims.size(), 0);
    offset[0] = first;
    std::vector<uint8_t> stored;
    uint32_t mask = 0;
    // The only step under the HDF5 lock: copying the stored bytes out of the file.
    if (file_->read_raw_chunk(dataset_.get(), name_, offset, stored, mask)) {
      // A chunk is stored whole even at the end of the dataset; keep the rows that exist.
      *data = decode_chunk(std::move(stored), info_.filters, mask,
                           static_cast<size_t>(block_rows_) * row_bytes_, info_.type_size, where(k));
      data->resize(bytes);
      done = true;
    }
    // else: never written; H5Dread below returns the fill value.
  }
  if (!done) {
    data->resize(bytes);
    file_->read_rows(dataset_.get(), name_, first, last, dtype_, data->data());
  }
  if (validator_) validator_(data->data(), first, last - first);
  return data;
}

RowReader::Block RowReader::block_slow(int64_t k) const {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  auto it = entries_.find(k);
  if (it != entries_.end()) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    std::shared_future<Block> pending = it->second->block;
    lock.unlock();
    return pending.get();  // waits when another thread is still reading it; rethrows its error
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  std::promise<Block> promise;
  auto fresh = std::make_unique<Entry>();
  fresh->block = promise.get_future().share();
  entries_.emplace(k, std::move(fresh));
  lock.unlock();

  Block data;
  try {
    data = load_block(k);
  } catch (...) {
    lock.lock();
    entries_.erase(k);  // not cached: a later call tries again
    lock.unlock();
    promise.set_exception(std::current_exception());
    throw;
  }
  lock.lock();
  Entry& e = *entries_.at(k);
  e.ready = true;
  e.bytes = data->size();
  e.data = data->data();
  e.last_used.store(clock_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  bytes_ += e.bytes;
  ++ready_entries_;
  while (bytes_ > capacity_ && ready_entries_ > 0) {
    // The ready block with the oldest timestamp (blocks are large, so there are few).
    auto victim = entries_.end();
    for (auto c = entries_.begin(); c != entries_.end(); ++c)
      if (c->second->ready &&
          (victim == entries_.end() || c->second->last_used.load(std::memory_order_relaxed) <
                                           victim->second->last_used.load(std::memory_order_relaxed)))
        victim = c;
    bytes_ -= victim->second->bytes;
    --ready_entries_;
    entries_.erase(victim);  // a thread still holding the block (through its future) keeps it alive
    ++evictions_;
  }
  lock.unlock();
  promise.set_value(data);
  return data;
}

void RowReader::copy_rows(int64_t k, int64_t first, int64_t rows, uint8_t* dst) const {
  const size_t offset = static_cast<size_t>(first - k * block_rows_) * row_bytes_;
  const size_t bytes = static_cast<size_t>(rows) * row_bytes_;
  {
    // The hit path: a shared lock, so concurrent readers do not wait for one another.
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = entries_.find(k);
    if (it != entries_.end() && it->second->ready) {
      it->second->last_used.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      std::memcpy(dst, it->second->data + offset, bytes);
      hits_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  Block b = block_slow(k);
  std::memcpy(dst, b->data() + offset, bytes);
}

void RowReader::read(int64_t begin, int64_t end, void* out) const {
  LOOM_CHECK(0 <= begin && begin <= end && end <= rows(), file_->path(), ": dataset '", name_, "': rows [",
             begin, ", ", end, ") out of range [0, ", rows(), ")");
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t r = begin; r < end;) {
    const int64_t k = r / block_rows_;
    const int64_t block_end = std::min(end, (k + 1) * block_rows_);
    copy_rows(k, r, block_end - r, dst);
    dst += static_cast<size_t>(block_end - r) * row_bytes_;
    r = block_end;
  }
}

void RowReader::read_hyperslab(int64_t begin, int64_t end, void* out) const {
  file_->read_rows(dataset_.get(), name_, begin, end, dtype_, out);
}

CacheStats RowReader::stats() const {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  CacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.evictions = evictions_;
  s.entries = ready_entries_;
  s.bytes = bytes_;
  s.capacity_bytes = capacity_;
  return s;
}

}  // namespace loom::data
