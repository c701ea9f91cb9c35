/*
 * Hdf5ImageDataset: labelled images from an HDF5 file in Loom's layout (hdf5_layout.h):
 * uint8 images [N, C, H, W] (or [N, H, W]) and integer labels [N].
 *
 * Opening checks everything a bad file could get wrong, and throws loom::Error naming the file,
 * the dataset and the problem: missing file or dataset, not HDF5, truncated, wrong element type
 * or rank, labels of another length, labels outside [0, number of classes), no images. The
 * labels (8 bytes per image) are read once; images are read through a RowReader, whose cache
 * of decoded chunks makes shuffled access cheap (see row_reader.h).
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/hdf5_layout.h"
#include "data/row_reader.h"

namespace loom::data {

struct Hdf5ImageOptions {
  std::string images = "images";
  std::string labels = "labels";
  // Decoded chunks kept in memory. Fashion-MNIST's 60,000 images are 47 MB: all of it.
  size_t chunk_cache_bytes = size_t{64} << 20;
};

class Hdf5ImageDataset : public Dataset {
 public:
  explicit Hdf5ImageDataset(std::string path, Hdf5ImageOptions options = {});

  int64_t size() const override { return size_; }
  // data: uint8 [C, H, W]; target: int64 [] (the label).
  Example get(int64_t index) const override;
  std::string identity() const override { return identity_; }
  std::string source() const override { return path_; }
  void check_unchanged() const override { file_->check_unchanged(); }

  // Images [begin, end) as one uint8 tensor [end - begin, C, H, W], through the chunk cache.
  Tensor images(int64_t begin, int64_t end) const;
  // The same read directly by hyperslab (one H5Dread; no cache).
  Tensor images_hyperslab(int64_t begin, int64_t end) const;
  // All labels, int64 [N].
  const Tensor& labels() const { return labels_; }

  int64_t channels() const { return channels_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int64_t num_classes() const { return num_classes_; }
  const DatasetInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  // Whether chunks are read raw and decoded outside the HDF5 lock (the fast path).
  bool raw_chunks() const { return reader_->raw_chunks(); }
  CacheStats chunk_cache_stats() const { return reader_->stats(); }

 private:
  std::string path_;
  Hdf5ImageOptions options_;
  std::shared_ptr<Hdf5File> file_;
  std::unique_ptr<RowReader> reader_;
  DatasetInfo info_;
  Tensor labels_;
  int64_t size_ = 0, channels_ = 1, height_ = 0, width_ = 0, num_classes_ = 0;
  std::string identity_;
};

}  // namespace loom::data
