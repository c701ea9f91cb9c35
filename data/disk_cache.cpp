/* Building, validating and serving the on-disk sample cache (see disk_cache.h). */
#include "data/disk_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "data/file_util.h"
#include "ops/ops.h"

namespace loom::data {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'D', 'C', '0', '1'};
constexpr char kFooterMagic[8] = {'L', 'O', 'O', 'M', 'D', 'C', 'O', 'K'};
constexpr uint64_t kFormat = 1;
constexpr uint64_t kAlign = 64;
constexpr int kMaxDims = 6;

struct TensorDescriptor {
  uint8_t present = 0;
  uint8_t dtype = 0;
  uint8_t ndim = 0;
  uint8_t unused[5] = {};
  int64_t sizes[kMaxDims] = {};
  uint64_t nbytes = 0;
};
static_assert(sizeof(TensorDescriptor) == 64, "one descriptor is one aligned 64-byte block");

struct Footer {
  uint64_t index_offset = 0;
  uint32_t crc = 0;  // CRC-32 of every byte before the footer
  uint32_t unused = 0;
  char magic[8] = {};
};
static_assert(sizeof(Footer) == 24);

uint64_t align_up(uint64_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

// Sequential writer that tracks the offset and the running CRC.
class CacheWriter {
 public:
  CacheWriter(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "wb")) {
    LOOM_CHECK(file_ != nullptr, path, ": cannot create the disk cache: ", std::strerror(errno));
    std::setvbuf(file_, nullptr, _IOFBF, size_t{1} << 20);
  }
  ~CacheWriter() {
    if (file_) std::fclose(file_);
  }
  void put(const void* data, size_t n, bool checksum = true) {
    if (n == 0) return;
    LOOM_CHECK(std::fwrite(data, 1, n, file_) == n, path_, ": write failed: ", std::strerror(errno));
    if (checksum) crc_ = crc32(crc_, static_cast<const Bytef*>(data), static_cast<uInt>(n));
    offset_ += n;
  }
  void put_u64(uint64_t v) { put(&v, sizeof(v)); }
  void put_string(const std::string& s) {
    put_u64(s.size());
    put(s.data(), s.size());
  }
  void pad() {
    static const char zeros[kAlign] = {};
    put(zeros, align_up(offset_) - offset_);
  }
  void close() {
    const bool ok = std::fflush(file_) == 0 && std::ferror(file_) == 0;
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    LOOM_CHECK(ok && closed, path_, ": cannot finish writing the disk cache: ", std::strerror(errno));
  }
  uint64_t offset() const { return offset_; }
  uint32_t crc() const { return static_cast<uint32_t>(crc_); }

 private:
  std::string path_;
  FILE* file_;
  uint64_t offset_ = 0;
  uLong crc_ = crc32(0, Z_NULL, 0);
};

void write_tensor(CacheWriter& w, const Tensor& t, const std::string& path, int64_t index) {
  TensorDescriptor d;
  Tensor c;
  if (t.defined()) {
    LOOM_CHECK(t.is_cpu(), path, ": example ", index, " is on ", t.device(),
               "; the disk cache holds CPU tensors");
    LOOM_CHECK(t.dim() <= kMaxDims, path, ": example ", index, " has ", t.dim(),
               " dims; the disk cache holds at most ", kMaxDims);
    c = t.contiguous();
    d.present = 1;
    d.dtype = static_cast<uint8_t>(c.dtype());
    d.ndim = static_cast<uint8_t>(c.dim());
    for (int64_t i = 0; i < c.dim(); ++i) d.sizes[i] = c.size(i);
    d.nbytes = c.nbytes();
  }
  w.put(&d, sizeof(d));
  if (d.present) w.put(c.data_ptr(), d.nbytes);
  w.pad();
}

// Reads an 8-byte value at `pos` if it fits in [pos, end).
bool read_u64(const uint8_t* base, uint64_t& pos, uint64_t end, uint64_t& out) {
  if (pos + 8 > end) return false;
  std::memcpy(&out, base + pos, 8);
  pos += 8;
  return true;
}

bool read_string(const uint8_t* base, uint64_t& pos, uint64_t end, std::string& out) {
  uint64_t n = 0;
  if (!read_u64(base, pos, end, n) || n > end - pos) return false;
  out.assign(reinterpret_cast<const char*>(base + pos), n);
  pos += n;
  return true;
}

}  // namespace

struct DiskCachedDataset::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

DiskCachedDataset::DiskCachedDataset(std::shared_ptr<const Dataset> source, std::string path,
                                     std::string version)
    : source_(std::move(source)), path_(std::move(path)), version_(std::move(version)) {
  LOOM_CHECK(source_ != nullptr, "DiskCachedDataset: null source dataset");
  identity_ = source_->identity();
  LOOM_CHECK(
      !identity_.empty(), path_,
      ": DiskCachedDataset: the source dataset has no identity (it is not backed by a file), so the cache "
      "could not tell when it is stale");
  size_ = source_->size();
  rebuild_reason_ = open_existing();
  if (!rebuild_reason_.empty()) {
    build();
    const std::string again = open_existing();
    LOOM_CHECK(again.empty(), path_, ": the disk cache just built does not validate: ", again);
  }
}

DiskCachedDataset::~DiskCachedDataset() = default;

std::string DiskCachedDataset::open_existing() {
  mapping_.reset();
  offsets_.clear();
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "no cache file";
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return std::string("cannot stat: ") + std::strerror(errno);
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < sizeof(kMagic) + sizeof(Footer)) {
    ::close(fd);
    return "corrupt: truncated (" + std::to_string(size) + " bytes)";
  }
  auto m = std::make_shared<Mapping>();
  // Private and writable: a caller that writes into a served tensor changes its own copy of
  // the page, never the file.
  m->addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m->addr == MAP_FAILED) {
    m->addr = nullptr;
    return std::string("cannot map: ") + std::strerror(errno);
  }
  m->size = size;
  const auto* base = static_cast<const uint8_t*>(m->addr);

  Footer footer;
  std::memcpy(&footer, base + size - sizeof(Footer), sizeof(Footer));
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0 || std::memcmp(footer.magic, kFooterMagic, 8) != 0)
    return "corrupt: not a complete Loom disk cache (bad magic)";
  const uint64_t body = size - sizeof(Footer);
  uLong running = crc32(0, Z_NULL, 0);
  for (uint64_t pos = 0; pos < body;) {  // zlib takes 32-bit lengths
    const uint64_t n = std::min<uint64_t>(body - pos, uint64_t{1} << 30);
    running = crc32(running, base + pos, static_cast<uInt>(n));
    pos += n;
  }
  if (static_cast<uint32_t>(running) != footer.crc) return "corrupt: checksum mismatch";

  uint64_t pos = sizeof(kMagic), format = 0, count = 0;
  std::string identity, version;
  if (!read_u64(base, pos, body, format) || format != kFormat)
    return "stale: cache format " + std::to_string(format);
  if (!read_string(base, pos, body, identity) || !read_string(base, pos, body, version) ||
      !read_u64(base, pos, body, count))
    return "corrupt: bad header";
  if (identity != identity_) return "stale: the source changed (cache is for " + identity + ")";
  if (version != version_) return "stale: cache version '" + version + "', expected '" + version_ + "'";
  if (static_cast<int64_t>(count) != size_)
    return "stale: " + std::to_string(count) + " examples cached, source has " + std::to_string(size_);
  if (footer.index_offset > body || (body - footer.index_offset) != (count + 1) * 8)
    return "corrupt: bad index";
  offsets_.resize(count + 1);
  std::memcpy(offsets_.data(), base + footer.index_offset, (count + 1) * 8);
  for (uint64_t i = 0; i < count; ++i)
    if (offsets_[i] % kAlign != 0 || offsets_[i] + 2 * sizeof(TensorDescriptor) > offsets_[i + 1] ||
        offsets_[i + 1] > footer.index_offset)
      return "corrupt: bad record offsets";
  mapping_ = std::move(m);
  return "";
}

void DiskCachedDataset::build() {
  std::error_code ec;
  const auto dir = std::filesystem::path(path_).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  write_file_atomically(path_, [&](const std::string& tmp) {
    CacheWriter w(tmp);
    w.put(kMagic, sizeof(kMagic));
    w.put_u64(kFormat);
    w.put_string(identity_);
    w.put_string(version_);
    w.put_u64(static_cast<uint64_t>(size_));
    w.pad();
    std::vector<uint64_t> offsets;
    offsets.reserve(static_cast<size_t>(size_) + 1);
    for (int64_t i = 0; i < size_; ++i) {
      offsets.push_back(w.offset());
      const Example e = source_->get(i);
      write_tensor(w, e.data, path_, i);
      write_tensor(w, e.target, path_, i);
    }
    offsets.push_back(w.offset());  // the end of the last record is where the index starts
    Footer footer;
    footer.index_offset = w.offset();
    w.put(offsets.data(), offsets.size() * sizeof(uint64_t));
    footer.crc = w.crc();
    std::memcpy(footer.magic, kFooterMagic, sizeof(kFooterMagic));
    w.put(&footer, sizeof(footer), /*checksum=*/false);
    w.close();
  });
  built_ = size_;
}

Example DiskCachedDataset::get(int64_t index) const {
  check_index(index, size_, path_);
  hits_.fetch_add(1, std::memory_order_relaxed);
  auto* base = static_cast<uint8_t*>(mapping_->addr);
  uint64_t pos = offsets_[static_cast<size_t>(index)];
  const uint64_t end = offsets_[static_cast<size_t>(index) + 1];
  auto read_tensor = [&]() -> Tensor {
    TensorDescriptor d;
    LOOM_CHECK(pos + sizeof(d) <= end, path_, ": example ", index, ": record is cut short");
    std::memcpy(&d, base + pos, sizeof(d));
    pos += sizeof(d);
    if (!d.present) {
      pos = align_up(pos);
      return {};
    }
    LOOM_CHECK(d.dtype < kNumDTypes && d.ndim <= kMaxDims, path_, ": example ", index,
               ": bad tensor descriptor");
    const IntArrayRef sizes(d.sizes, d.ndim);
    const auto dtype = static_cast<DType>(d.dtype);
    LOOM_CHECK(
        d.nbytes == static_cast<uint64_t>(shape_numel(sizes)) * dtype_size(dtype) && pos + d.nbytes <= end,
        path_, ": example ", index, ": tensor bytes do not match its shape");
    // Zero-copy: the tensor views the mapping and keeps it alive.
    Tensor t = from_blob(base + pos, sizes, dtype, [keep = mapping_](void*) {});
    pos = align_up(pos + d.nbytes);
    return t;
  };
  Tensor data = read_tensor();
  Tensor target = read_tensor();
  return {data, target};
}

CacheStats DiskCachedDataset::stats() const {
  CacheStats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = built_;
  s.entries = size_;
  s.bytes = mapping_ ? mapping_->size : 0;
  s.capacity_bytes = s.bytes;
  return s;
}

}  // namespace loom::data
