/*
 * Hdf5TokenDataset: a token stream (a text corpus) from an HDF5 file in Loom's layout
 * (hdf5_layout.h): integer tokens [L] and a vocabulary (attribute `vocab`, or `vocab_size`).
 *
 * Example i is the block of `block_size` tokens starting at i * stride (int64 [block_size],
 * no target). A window transform then cuts it into input and target: RandomTokenWindow(T)
 * with block_size = 2T and stride = T draws, over an epoch, windows starting anywhere in the
 * corpus, deterministically per (seed, epoch, index). Tokens are checked against the
 * vocabulary as their chunks are first read.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/hdf5_layout.h"
#include "data/row_reader.h"

namespace loom::data {

struct Hdf5TokenOptions {
  int64_t block_size = 0;  // tokens per example; required
  int64_t stride = 0;      // tokens between consecutive examples; 0: block_size
  std::string tokens = "tokens";
  size_t chunk_cache_bytes = size_t{64} << 20;
};

class Hdf5TokenDataset : public Dataset {
 public:
  Hdf5TokenDataset(std::string path, Hdf5TokenOptions options);

  int64_t size() const override { return size_; }
  // data: int64 [block_size]; target: undefined.
  Example get(int64_t index) const override;
  std::string identity() const override { return identity_; }
  std::string source() const override { return path_; }
  void check_unchanged() const override { file_->check_unchanged(); }

  // Tokens [begin, end) of the whole stream, int64.
  Tensor tokens(int64_t begin, int64_t end) const;
  int64_t num_tokens() const { return reader_->rows(); }
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<std::string>& vocab() const { return info_.vocab; }
  // The text of a sequence of token ids (needs the `vocab` attribute).
  std::string decode(const Tensor& tokens) const;
  const DatasetInfo& info() const { return info_; }
  bool raw_chunks() const { return reader_->raw_chunks(); }
  CacheStats chunk_cache_stats() const { return reader_->stats(); }

 private:
  std::string path_;
  Hdf5TokenOptions options_;
  std::shared_ptr<Hdf5File> file_;
  std::unique_ptr<RowReader> reader_;
  DatasetInfo info_;
  int64_t vocab_size_ = 0, size_ = 0;
  std::string identity_;
};

}  // namespace loom::data
