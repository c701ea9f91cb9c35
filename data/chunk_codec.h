/*
 * Undoing an HDF5 filter pipeline on a raw chunk, outside the HDF5 lock.
 *
 * H5Dread_chunk returns a chunk's stored bytes without running the filters, which is what
 * lets the loader's workers hold the (global) HDF5 lock only for the read and decompress in
 * parallel. Loom decodes the filters that h5py and Loom's writer use: deflate ("gzip", via
 * zlib) and shuffle. Any other filter (szip, fletcher32, plugins) makes the reader fall back
 * to H5Dread, which decodes under the lock: slower, never wrong.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_file.h"

namespace loom::data {

inline constexpr int kFilterDeflate = 1;  // H5Z_FILTER_DEFLATE
inline constexpr int kFilterShuffle = 2;  // H5Z_FILTER_SHUFFLE

// True when decode_chunk can undo every filter of the pipeline.
bool can_decode_filters(const std::vector<Hdf5Filter>& filters);

// Undoes `filters` on a chunk's stored bytes, last to first, skipping filter i when bit i of
// filter_mask is set (HDF5 skips an optional filter that did not help). The result has exactly
// `chunk_bytes` bytes; anything else (corrupt deflate stream, wrong length) throws loom::Error
// that starts with `what` (file, dataset and chunk).
std::vector<uint8_t> decode_chunk(std::vector<uint8_t> stored, const std::vector<Hdf5Filter>& filters,
                                  uint32_t filter_mask, size_t chunk_bytes, size_t element_size,
                                  const std::string& what);

}  // namespace loom::data
