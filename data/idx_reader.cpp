/* IDX reading through zlib's gz* functions, which read plain files too (see idx_reader.h). */
#include "data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace loom::data {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

// Reads exactly n bytes unless the stream ends first; returns how many were read.
size_t read_some(gzFile f, void* out, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const unsigned want = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, static_cast<char*>(out) + done, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      LOOM_FAIL(path, ": cannot read: ", code == Z_ERRNO ? std::strerror(errno) : msg,
                " (corrupt or truncated gzip stream?)");
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  std::error_code ec;
  LOOM_CHECK(std::filesystem::is_regular_file(path, ec), path, ": no such file");
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  LOOM_CHECK(f != nullptr, path, ": cannot open: ", std::strerror(errno));
  gzbuffer(f.get(), 1 << 20);
  uint8_t magic[4] = {0};
  LOOM_CHECK(read_some(f.get(), magic, 4, path) == 4, path, ": too short for an IDX header");
  LOOM_CHECK(magic[0] == 0 && magic[1] == 0, path, ": not an IDX file (magic ", int(magic[0]), " ",
             int(magic[1]), ")");
  LOOM_CHECK(magic[2] == 0x08, path, ": IDX element type 0x", std::hex, int(magic[2]), std::dec,
             " is not uint8 (0x08)");
  const int ndims = magic[3];
  LOOM_CHECK(ndims >= 1 && ndims <= 4, path, ": IDX with ", ndims, " dimensions (expected 1 to 4)");
  IdxArray out;
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    uint8_t be[4];
    LOOM_CHECK(read_some(f.get(), be, 4, path) == 4, path, ": IDX header cut short");
    const int64_t n = int64_t{be[0]} << 24 | int64_t{be[1]} << 16 | int64_t{be[2]} << 8 | int64_t{be[3]};
    out.dims.push_back(n);
    total *= n;
    LOOM_CHECK(total <= (int64_t{1} << 34), path, ": IDX dimensions ", n, " imply more than 16 GiB");
  }
  out.data.resize(static_cast<size_t>(total));
  const size_t got = read_some(f.get(), out.data.data(), out.data.size(), path);
  LOOM_CHECK(got == out.data.size(), path, ": truncated: the header promises ", total,
             " bytes of data, found ", got);
  uint8_t extra = 0;
  LOOM_CHECK(read_some(f.get(), &extra, 1, path) == 0, path, ": longer than its header says (", total,
             " bytes of data)");
  return out;
}

}  // namespace loom::data
