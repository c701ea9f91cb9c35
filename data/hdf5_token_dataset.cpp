/* Token streams from HDF5, checked against their vocabulary (see hdf5_token_dataset.h). */
#include "data/hdf5_token_dataset.h"

#include "data/file_util.h"
#include "data/sample_memory.h"
#include "ops/ops.h"

namespace loom::data {

namespace {

// The memory dtype tokens are read as: the stored width where Loom has it (so the raw-chunk
// path applies), else int64.
DType token_dtype(const Hdf5DatasetInfo& info) {
  if (info.type_size == 1 && !info.is_signed) return kUInt8;
  if (info.type_size == 4 && info.is_signed) return kInt32;
  return kInt64;
}

template <class T>
void check_tokens(const T* t, int64_t first, int64_t n, int64_t vocab, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(t[i]);
    LOOM_CHECK(v >= 0 && v < vocab, what, ": token ", v, " at position ", first + i,
               " is outside the vocabulary [0, ", vocab, ")");
  }
}

}  // namespace

Hdf5TokenDataset::Hdf5TokenDataset(std::string path, Hdf5TokenOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  LOOM_CHECK(options_.block_size >= 2, path_, ": Hdf5TokenDataset needs block_size >= 2, got ",
             options_.block_size);
  if (options_.stride == 0) options_.stride = options_.block_size;
  LOOM_CHECK(options_.stride >= 1, path_, ": Hdf5TokenDataset stride must be >= 1, got ", options_.stride);
  file_ = Hdf5File::open(path_);
  info_ = read_dataset_info(*file_);
  const std::string what = path_ + ": dataset '" + options_.tokens + "'";

  Hdf5DatasetInfo tokens = file_->describe(options_.tokens);
  LOOM_CHECK(tokens.type_class == H5T_INTEGER, what, ": expected integer tokens, found ", tokens.type_name());
  LOOM_CHECK(tokens.dims.size() == 1, what, ": expected rank 1 [L], found rank ", tokens.dims.size());
  const int64_t n = tokens.dims[0];
  LOOM_CHECK(n > 0, what, ": the dataset is empty (0 tokens)");

  if (!info_.vocab.empty()) {
    vocab_size_ = static_cast<int64_t>(info_.vocab.size());
  } else {
    const std::optional<int64_t> declared = file_->int_attribute("vocab_size");
    LOOM_CHECK(declared.has_value(), path_,
               ": no vocabulary: expected a 'vocab' (strings) or 'vocab_size' attribute");
    vocab_size_ = *declared;
  }
  LOOM_CHECK(vocab_size_ > 0, path_, ": vocabulary size ", vocab_size_, " must be positive");
  LOOM_CHECK(n >= options_.block_size, what, ": ", n, " tokens is shorter than one block of ",
             options_.block_size);
  size_ = (n - options_.block_size) / options_.stride + 1;

  const DType dtype = token_dtype(tokens);
  const int64_t vocab = vocab_size_;
  auto validate = [dtype, vocab, what](const void* data, int64_t first, int64_t rows) {
    visit_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>)
        check_tokens(static_cast<const T*>(data), first, rows, vocab, what);
    });
  };
  reader_ = std::make_unique<RowReader>(file_, options_.tokens, dtype, options_.chunk_cache_bytes, validate);
  identity_ = "hdf5-tokens|" + file_identity(path_) + "|" + options_.tokens +
              "|block=" + std::to_string(options_.block_size) + "|stride=" + std::to_string(options_.stride);
}

Tensor Hdf5TokenDataset::tokens(int64_t begin, int64_t end) const {
  LOOM_CHECK(0 <= begin && begin <= end && end <= num_tokens(), path_, ": tokens [", begin, ", ", end,
             ") out of range [0, ", num_tokens(), ")");
  Tensor out = sample_tensor({end - begin}, kInt64);
  if (reader_->dtype() == kInt64) {
    reader_->read(begin, end, out.data_ptr());
    return out;
  }
  std::vector<uint8_t> raw(static_cast<size_t>(end - begin) * dtype_size(reader_->dtype()));
  reader_->read(begin, end, raw.data());
  int64_t* dst = out.data_ptr<int64_t>();
  if (reader_->dtype() == kUInt8)
    std::copy(raw.begin(), raw.end(), dst);
  else
    std::copy_n(reinterpret_cast<const int32_t*>(raw.data()), end - begin, dst);
  return out;
}

Example Hdf5TokenDataset::get(int64_t index) const {
  check_index(index, size_, path_);
  const int64_t begin = index * options_.stride;
  return {tokens(begin, begin + options_.block_size), Tensor()};
}

std::string Hdf5TokenDataset::decode(const Tensor& tokens) const {
  LOOM_CHECK(!info_.vocab.empty(), path_, ": cannot decode: the file has no 'vocab' attribute");
  std::string out;
  for (int64_t t : tokens.to_vector<int64_t>()) {
    LOOM_CHECK(t >= 0 && t < vocab_size_, path_, ": decode: token ", t, " is outside the vocabulary [0, ",
               vocab_size_, ")");
    out += info_.vocab[static_cast<size_t>(t)];
  }
  return out;
}

}  // namespace loom::data
