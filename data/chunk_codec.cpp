/* Deflate and shuffle decoding of raw HDF5 chunks (see chunk_codec.h). */
#include "data/chunk_codec.h"

#include <zlib.h>

#include "core/error.h"

namespace loom::data {

namespace {

std::vector<uint8_t> inflate_chunk(const std::vector<uint8_t>& in, size_t chunk_bytes,
                                   const std::string& what) {
  std::vector<uint8_t> out(chunk_bytes);
  uLongf out_len = static_cast<uLongf>(chunk_bytes);
  // The destination is exactly one chunk: a stream that inflates to more is corrupt too
  // (Z_BUF_ERROR), so a damaged chunk can never write past the buffer.
  const int rc = uncompress(out.data(), &out_len, in.data(), static_cast<uLong>(in.size()));
  LOOM_CHECK(rc == Z_OK, what, ": deflate stream is corrupt (zlib: ", zError(rc), ", ", in.size(),
             " stored bytes for a chunk of ", chunk_bytes, ")");
  LOOM_CHECK(out_len == chunk_bytes, what, ": deflate stream inflates to ", out_len, " bytes, expected ",
             chunk_bytes);
  return out;
}

// HDF5's shuffle stores byte 0 of every element, then byte 1 of every element, ...; bytes
// past the last whole element are stored as they are.
std::vector<uint8_t> unshuffle(const std::vector<uint8_t>& in, size_t element_size) {
  if (element_size <= 1) return in;
  std::vector<uint8_t> out(in.size());
  const size_t n = in.size() / element_size;
  for (size_t b = 0; b < element_size; ++b) {
    const uint8_t* src = in.data() + b * n;
    for (size_t i = 0; i < n; ++i) out[i * element_size + b] = src[i];
  }
  std::copy(in.begin() + static_cast<std::ptrdiff_t>(n * element_size), in.end(),
            out.begin() + static_cast<std::ptrdiff_t>(n * element_size));
  return out;
}

}  // namespace

bool can_decode_filters(const std::vector<Hdf5Filter>& filters) {
  for (const auto& f : filters)
    if (f.id != kFilterDeflate && f.id != kFilterShuffle) return false;
  return true;
}

std::vector<uint8_t> decode_chunk(std::vector<uint8_t> stored, const std::vector<Hdf5Filter>& filters,
                                  uint32_t filter_mask, size_t chunk_bytes, size_t element_size,
                                  const std::string& what) {
  for (size_t i = filters.size(); i-- > 0;) {
    if (filter_mask & (1u << i)) continue;
    const Hdf5Filter& f = filters[i];
    if (f.id == kFilterDeflate) {
      stored = inflate_chunk(stored, chunk_bytes, what);
    } else if (f.id == kFilterShuffle) {
      LOOM_CHECK(stored.size() == chunk_bytes, what, ": shuffled chunk has ", stored.size(),
                 " bytes, expected ", chunk_bytes);
      stored = unshuffle(stored, f.params.empty() ? element_size : f.params[0]);
    } else {
      LOOM_FAIL(what, ": filter ", f.id, " ('", f.name, "') cannot be decoded outside HDF5");
    }
  }
  LOOM_CHECK(stored.size() == chunk_bytes, what, ": chunk has ", stored.size(), " bytes, expected ",
             chunk_bytes, " (truncated or corrupted file?)");
  return stored;
}

}  // namespace loom::data
