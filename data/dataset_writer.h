/*
 * Writing datasets in Loom's HDF5 layout (hdf5_layout.h), atomically: the file is written
 * under a temporary name, closed, fsynced and renamed, so a reader never sees half a file.
 */
#pragma once

#include <string>

#include "core/tensor.h"
#include "data/hdf5_layout.h"

namespace loom::data {

struct WriteOptions {
  int64_t chunk_rows = 1024;  // images (or tokens) per chunk
  int deflate_level = 1;      // gzip level 1..9; 0 stores chunks uncompressed
};

// images: uint8 [N, C, H, W]; labels: integer [N] (stored as uint8 when they fit, else int32).
// info.kind is set to "images".
void write_image_dataset(const std::string& path, const Tensor& images, const Tensor& labels,
                         DatasetInfo info, const WriteOptions& options = {});

// tokens: integer [L], each in [0, info.vocab.size()) (stored as uint8 when the vocabulary
// has at most 256 entries, else int32). info.kind is set to "tokens".
void write_token_dataset(const std::string& path, const Tensor& tokens, DatasetInfo info,
                         const WriteOptions& options = {.chunk_rows = 1 << 16, .deflate_level = 1});

}  // namespace loom::data
