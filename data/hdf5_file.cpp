/* The HDF5 C++ layer (see hdf5_file.h). Every function takes the HDF5 lock first. */
#include "data/hdf5_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "data/hdf5_check.h"

namespace loom::data {

namespace {

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& v) {
  return {v.begin(), v.end()};
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out.empty() ? "none" : out;
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// a * b, saturating at UINT64_MAX (a cap that cannot be exceeded is no cap, not an overflow).
uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}

// The product of `dims` (each at least 1, so that a zero does not hide an overflow of the
// others, which strides and row sizes would still compute) times `element_size`, or false
// when it exceeds int64.
bool checked_extent(const std::vector<hsize_t>& dims, uint64_t element_size, int64_t& bytes) {
  uint64_t product = element_size, numel = 1;
  for (hsize_t d : dims) {
    if (__builtin_mul_overflow(product, std::max<hsize_t>(d, 1), &product)) return false;
    numel *= d;  // no overflow: bounded by the product above
  }
  if (product > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  bytes = static_cast<int64_t>(numel * element_size);
  return true;
}

std::string shape_string(const std::vector<hsize_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

}  // namespace

Hdf5Handle& Hdf5Handle::operator=(Hdf5Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    close_ = other.close_;
    other.id_ = -1;
  }
  return *this;
}

void Hdf5Handle::reset() {
  if (id_ >= 0 && close_) {
    Hdf5Lock lock;
    close_(id_);  // a destructor path: nothing useful to do with a failure
  }
  id_ = -1;
}

hid_t hdf5_native_type(DType dtype) {
  switch (dtype) {
    case kUInt8:
      return H5T_NATIVE_UINT8;
    case kInt8:
      return H5T_NATIVE_INT8;
    case kInt32:
      return H5T_NATIVE_INT32;
    case kInt64:
      return H5T_NATIVE_INT64;
    case kFloat32:
      return H5T_NATIVE_FLOAT;
    case kFloat64:
      return H5T_NATIVE_DOUBLE;
    default:
      LOOM_FAIL("HDF5: no HDF5 type for dtype ", dtype);
  }
}

// ---- Hdf5DatasetInfo ---------------------------------------------------------------------

std::string Hdf5DatasetInfo::type_name() const {
  const std::string bits = std::to_string(type_size * 8);
  switch (type_class) {
    case H5T_INTEGER:
      return (is_signed ? "int" : "uint") + bits;
    case H5T_FLOAT:
      return "float" + bits;
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    default:
      return "HDF5 type class " + std::to_string(static_cast<int>(type_class));
  }
}

std::optional<DType> Hdf5DatasetInfo::dtype() const {
  if (type_class == H5T_INTEGER) {
    if (type_size == 1) return is_signed ? kInt8 : kUInt8;
    if (type_size <= 4 && (is_signed || type_size < 4)) return kInt32;
    if (type_size <= 8) return kInt64;  // uint32 widens; uint64 may overflow and is range-checked by users
  }
  if (type_class == H5T_FLOAT) return type_size <= 4 ? kFloat32 : kFloat64;
  return std::nullopt;
}

int64_t Hdf5DatasetInfo::row_elements() const {
  int64_t n = 1;
  for (size_t d = 1; d < dims.size(); ++d) n *= dims[d];
  return n;
}

// ---- files -----------------------------------------------------------------------------------

std::shared_ptr<Hdf5File> Hdf5File::open(const std::string& path) {
  std::error_code ec;
  LOOM_CHECK(std::filesystem::exists(path, ec), path, ": no such file");
  LOOM_CHECK(std::filesystem::is_regular_file(path, ec), path, ": not a regular file");
  Hdf5Lock lock;
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    detail::hdf5_error_stack();  // clear it: the message below says it better
    LOOM_FAIL(path, ": not an HDF5 file (no HDF5 signature; ", std::filesystem::file_size(path, ec),
              " bytes): it may be truncated or corrupted");
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  LOOM_CHECK(!ec, path, ": cannot read its size: ", ec.message());
  const FileStamp stamp = file_stamp(path);
  Hdf5Handle fapl(LOOM_HDF5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path), H5Pclose);
  Hdf5Handle file(LOOM_HDF5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), path,
                                  ": cannot open (truncated or corrupted?)"),
                  H5Fclose);
  // A file this process already has open is not read again: HDF5 hands back the open one,
  // with the size and metadata it read then. If the file changed on disk since (truncated,
  // rewritten in place), that view is stale, and the caps below would be checked against
  // the wrong file; refuse it instead, so that a caller can rebuild it.
  hsize_t seen = 0;
  LOOM_HDF5_CHECK(H5Fget_filesize(file.get(), &seen), path);
  LOOM_CHECK(
      seen == size, path, ": is ", size, " bytes on disk but ", seen,
      " bytes to HDF5, which still has it open from before it changed (close every handle to it first)");
  auto vlen_guard = std::make_unique<Hdf5VlenGuard>(file.get(), path, size);
  return std::shared_ptr<Hdf5File>(new Hdf5File(path, std::move(file), size, std::move(vlen_guard), stamp));
}

void Hdf5File::check_unchanged() const {
  if (!stamp_) return;
  const std::string change = file_change(path_, *stamp_);
  LOOM_CHECK(change.empty(), "HDF5 file '", path_, "' ", change,
             " while it was open for reading; its data can no longer be trusted: restore the file, or start "
             "again with the new one");
}

std::shared_ptr<Hdf5File> Hdf5File::create(const std::string& path) {
  Hdf5Lock lock;
  // Format bounds from 1.8 on: attributes larger than 64 KiB (a big vocabulary) go to dense
  // storage; every HDF5 since 1.8 (and h5py) reads it.
  Hdf5Handle fapl(LOOM_HDF5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path), H5Pclose);
  LOOM_HDF5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST), path);
  hid_t id = LOOM_HDF5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), path,
                             ": cannot create");
  return std::shared_ptr<Hdf5File>(
      new Hdf5File(path, Hdf5Handle(id, H5Fclose), std::numeric_limits<uint64_t>::max(), nullptr));
}

Hdf5File::~Hdf5File() = default;

void Hdf5File::close() {
  Hdf5Lock lock;
  if (!file_.valid()) return;
  LOOM_HDF5_CHECK(H5Fflush(file_.get(), H5F_SCOPE_LOCAL), path_, ": flush");
  const hid_t id = file_.release();  // closed here, with the error checked
  LOOM_HDF5_CHECK(H5Fclose(id), path_, ": close");
}

std::vector<std::string> Hdf5File::dataset_names() const {
  Hdf5Lock lock;
  std::vector<std::string> names;
  hsize_t index = 0;
  LOOM_HDF5_CHECK(H5Literate(file_.get(), H5_INDEX_NAME, H5_ITER_NATIVE, &index, collect_name, &names), path_,
                  ": list the root group");
  return names;
}

bool Hdf5File::has_dataset(const std::string& name) const {
  Hdf5Lock lock;
  // H5Lexists needs every intermediate group to exist, so walk "a/b/c" one link at a time.
  size_t pos = 0;
  while (true) {
    size_t slash = name.find('/', pos + 1);
    std::string prefix = name.substr(0, slash);
    if (prefix.empty() ||
        LOOM_HDF5_CHECK(H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT), path_, ": '", prefix, "'") <= 0)
      return false;
    // Only hard links: an external link names another file (any path, even a device) that
    // opening the object would open, and a soft link is a detour no writer of Loom's layout
    // (Loom, h5py) makes.
    H5L_info_t link{};
    LOOM_HDF5_CHECK(H5Lget_info(file_.get(), prefix.c_str(), &link, H5P_DEFAULT), path_, ": '", prefix, "'");
    LOOM_CHECK(
        link.type == H5L_TYPE_HARD, path_, ": '", prefix, "' is ",
        link.type == H5L_TYPE_EXTERNAL ? "an external link (to another file)" : "a soft or user-defined link",
        "; Loom reads only objects stored in the file itself");
    if (slash == std::string::npos) break;
    pos = slash;
  }
  Hdf5Handle obj(LOOM_HDF5_CHECK(H5Oopen(file_.get(), name.c_str(), H5P_DEFAULT), path_, ": '", name, "'"),
                 H5Oclose);
  return H5Iget_type(obj.get()) == H5I_DATASET;
}

Hdf5Handle Hdf5File::open_dataset(const std::string& name) const {
  Hdf5Lock lock;
  LOOM_CHECK(has_dataset(name), path_, ": no dataset '", name,
             "' (the root group has: ", join(dataset_names()), ")");
  return Hdf5Handle(
      LOOM_HDF5_CHECK(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), path_, ": dataset '", name, "'"),
      H5Dclose);
}

Hdf5DatasetInfo Hdf5File::describe(const std::string& name) const {
  Hdf5Handle dataset = open_dataset(name);
  return describe(dataset.get(), name);
}

Hdf5DatasetInfo Hdf5File::describe(hid_t dataset, const std::string& name) const {
  Hdf5Lock lock;
  const std::string what = path_ + ": dataset '" + name + "'";
  Hdf5DatasetInfo info;
  info.name = name;
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Dget_space(dataset), what), H5Sclose);
  const int ndims = LOOM_HDF5_CHECK(H5Sget_simple_extent_ndims(space.get()), what);
  std::vector<hsize_t> dims(static_cast<size_t>(ndims));
  LOOM_HDF5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), what);

  Hdf5Handle type(LOOM_HDF5_CHECK(H5Dget_type(dataset), what), H5Tclose);
  info.type_class = H5Tget_class(type.get());
  info.type_size = H5Tget_size(type.get());
  LOOM_CHECK(info.type_size > 0, what, ": cannot read the element size (", detail::hdf5_error_stack(), ")");
  if (info.type_class == H5T_INTEGER)
    info.is_signed = LOOM_HDF5_CHECK(H5Tget_sign(type.get()), what) == H5T_SGN_2;
  if (info.type_class == H5T_INTEGER || info.type_class == H5T_FLOAT)
    info.native_byte_order = info.type_size == 1 || H5Tget_order(type.get()) == H5Tget_order(H5T_NATIVE_INT);

  // The claim: every later size (rows, row bytes, blocks, the tensors) is computed from it.
  LOOM_CHECK(checked_extent(dims, info.type_size, info.bytes), what, ": shape ", shape_string(dims), " of ",
             info.type_size, "-byte elements overflows 64-bit sizes");
  info.dims.assign(dims.begin(), dims.end());

  Hdf5Handle dcpl(LOOM_HDF5_CHECK(H5Dget_create_plist(dataset), what), H5Pclose);
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  LOOM_CHECK(layout == H5D_COMPACT || layout == H5D_CONTIGUOUS || layout == H5D_CHUNKED, what,
             layout == H5D_VIRTUAL ? ": is a virtual dataset (its data lives in other files)"
                                   : ": has an unknown storage layout",
             "; Loom reads only data stored in the file itself");
  const int external = LOOM_HDF5_CHECK(H5Pget_external_count(dcpl.get()), what);
  LOOM_CHECK(external == 0, what, ": its data is stored in ", external,
             " external file(s); Loom reads only data stored in the file itself");
  info.chunked = layout == H5D_CHUNKED;
  const uint64_t claimed = static_cast<uint64_t>(info.bytes);
  if (!info.chunked) {
    // Stored as it is: it cannot be larger than the file that holds it.
    LOOM_CHECK(claimed <= file_size_, what, ": shape ", shape_string(dims), " of ", info.type_size,
               "-byte elements is ", claimed, " bytes, more than the whole file (", file_size_,
               " bytes) could hold uncompressed");
    return info;
  }
  const uint64_t cap = saturating_mul(file_size_, kHdf5MaxCompressionRatio);
  LOOM_CHECK(claimed <= cap, what, ": shape ", shape_string(dims), " of ", info.type_size,
             "-byte elements is ", claimed, " bytes, more than ", kHdf5MaxCompressionRatio,
             " times the file's ", file_size_, " bytes (no filter compresses better than deflate's ",
             kHdf5MaxCompressionRatio, ":1)");
  std::vector<hsize_t> chunk(static_cast<size_t>(std::max(ndims, 1)));
  const int chunk_rank = LOOM_HDF5_CHECK(H5Pget_chunk(dcpl.get(), ndims, chunk.data()), what);
  LOOM_CHECK(chunk_rank == ndims, what, ": chunks of rank ", chunk_rank, " for a dataset of rank ", ndims);
  chunk.resize(static_cast<size_t>(ndims));
  int64_t chunk_bytes = 0;
  LOOM_CHECK(std::all_of(chunk.begin(), chunk.end(), [](hsize_t c) { return c > 0; }) &&
                 checked_extent(chunk, info.type_size, chunk_bytes) &&
                 static_cast<uint64_t>(chunk_bytes) <= cap,
             what, ": chunk shape ", shape_string(chunk), " of ", info.type_size,
             "-byte elements is empty or larger than ", kHdf5MaxCompressionRatio, " times the file's ",
             file_size_, " bytes");
  info.chunk_dims.assign(chunk.begin(), chunk.end());
  const int nfilters = LOOM_HDF5_CHECK(H5Pget_nfilters(dcpl.get()), what);
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0, config = 0;
    size_t nparams = 8;
    unsigned params[8] = {0};
    char filter_name[64] = {0};
    H5Z_filter_t id = LOOM_HDF5_CHECK(H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nparams,
                                                     params, sizeof(filter_name), filter_name, &config),
                                      what, ": filter ", i);
    Hdf5Filter filter{static_cast<int>(id), filter_name,
                      std::vector<unsigned>(params, params + std::min<size_t>(nparams, 8))};
    // HDF5 sets shuffle's parameter to the element size when the dataset is created; any other
    // value would make the unshuffle loop over a made-up element size (chunk_codec.cpp).
    LOOM_CHECK(id != H5Z_FILTER_SHUFFLE || filter.params.empty() || filter.params[0] == info.type_size, what,
               ": the shuffle filter's element size ", filter.params.empty() ? 0 : filter.params[0],
               " is not the dataset's ", info.type_size);
    info.filters.push_back(std::move(filter));
  }
  return info;
}

void Hdf5File::read_rows(hid_t dataset, const std::string& name, int64_t begin, int64_t end, DType dtype,
                         void* out) const {
  check_unchanged();
  Hdf5Lock lock;
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Dget_space(dataset), path_, ": dataset '", name, "'"), H5Sclose);
  const int ndims = LOOM_HDF5_CHECK(H5Sget_simple_extent_ndims(space.get()), path_, ": dataset '", name, "'");
  LOOM_CHECK(ndims >= 1, path_, ": dataset '", name, "' is a scalar; rows need at least one dimension");
  std::vector<hsize_t> dims(static_cast<size_t>(ndims));
  LOOM_HDF5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), path_, ": dataset '", name,
                  "'");
  LOOM_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(dims[0]), path_, ": dataset '", name,
             "': rows [", begin, ", ", end, ") out of range [0, ", dims[0], ")");
  if (begin == end) return;
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = static_cast<hsize_t>(begin);
  count[0] = static_cast<hsize_t>(end - begin);
  LOOM_HDF5_CHECK(
      H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), path_,
      ": dataset '", name, "'");
  Hdf5Handle memspace(
      LOOM_HDF5_CHECK(H5Screate_simple(ndims, count.data(), nullptr), path_, ": dataset '", name, "'"),
      H5Sclose);
  LOOM_HDF5_CHECK(H5Dread(dataset, hdf5_native_type(dtype), memspace.get(), space.get(), H5P_DEFAULT, out),
                  path_, ": dataset '", name, "': read rows [", begin, ", ", end, ")");
}

bool Hdf5File::read_raw_chunk(hid_t dataset, const std::string& name, const std::vector<int64_t>& offset,
                              std::vector<uint8_t>& bytes, uint32_t& filter_mask) const {
  check_unchanged();
  Hdf5Lock lock;
  const std::string what = ::loom::detail::concat(path_, ": dataset '", name, "': chunk at row ", offset[0]);
  std::vector<hsize_t> off = to_hsize(offset);
  hsize_t nbytes = 0;
  LOOM_HDF5_CHECK(H5Dget_chunk_storage_size(dataset, off.data(), &nbytes), what);
  if (nbytes == 0) return false;
  // H5Dread_chunk copies as many bytes as the chunk index records, which libhdf5 1.10 does not
  // check against what H5Dget_chunk_storage_size reports: for an unfiltered dataset the latter
  // is the nominal chunk size whatever the index says, so a patched index entry made
  // H5Dread_chunk write past the buffer (tests/data/test_hdf5_caps.cpp). The index's own
  // record is read first and must agree, and lie within the file, before any buffer is sized.
  haddr_t address = HADDR_UNDEF;
  hsize_t recorded = 0;
  unsigned recorded_mask = 0;
  LOOM_HDF5_CHECK(H5Dget_chunk_info_by_coord(dataset, off.data(), &recorded_mask, &address, &recorded), what);
  LOOM_CHECK(recorded <= file_size_ && address != HADDR_UNDEF && address <= file_size_ - recorded, what,
             ": the chunk index claims ", recorded, " stored bytes at byte ", address,
             ", beyond the end of the file (", file_size_, " bytes)");
  LOOM_CHECK(recorded == nbytes, what, ": the chunk index records ", recorded,
             " stored bytes but HDF5 reports ", nbytes, " (corrupted chunk index)");
  bytes.resize(nbytes);
  filter_mask = 0;
  LOOM_HDF5_CHECK(H5Dread_chunk(dataset, H5P_DEFAULT, off.data(), &filter_mask, bytes.data()), path_,
                  ": dataset '", name, "': raw chunk at row ", offset[0]);
  return true;
}

void Hdf5File::write_dataset(const std::string& name, DType dtype, const std::vector<int64_t>& dims,
                             const void* data, int64_t chunk_rows, int deflate_level) {
  Hdf5Lock lock;
  LOOM_CHECK(deflate_level >= 0 && deflate_level <= 9, path_, ": dataset '", name, "': deflate level ",
             deflate_level, " is not in 0..9");
  LOOM_CHECK(deflate_level == 0 || chunk_rows > 0, path_, ": dataset '", name, "': compression needs chunks");
  std::vector<hsize_t> hdims = to_hsize(dims);
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr),
                                   path_, ": dataset '", name, "'"),
                   H5Sclose);
  Hdf5Handle dcpl(LOOM_HDF5_CHECK(H5Pcreate(H5P_DATASET_CREATE), path_), H5Pclose);
  if (chunk_rows > 0) {
    std::vector<hsize_t> chunk = hdims;
    for (auto& c : chunk) c = std::max<hsize_t>(c, 1);  // HDF5 chunks cannot have a zero extent
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(static_cast<hsize_t>(chunk_rows), hdims[0]));
    LOOM_HDF5_CHECK(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), path_,
                    ": dataset '", name, "'");
    if (deflate_level > 0)
      LOOM_HDF5_CHECK(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(deflate_level)), path_, ": dataset '",
                      name, "'");
  }
  const hid_t type = hdf5_native_type(dtype);
  Hdf5Handle dataset(LOOM_HDF5_CHECK(H5Dcreate2(file_.get(), name.c_str(), type, space.get(), H5P_DEFAULT,
                                                dcpl.get(), H5P_DEFAULT),
                                     path_, ": create dataset '", name, "'"),
                     H5Dclose);
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  if (numel > 0)
    LOOM_HDF5_CHECK(H5Dwrite(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path_,
                    ": write dataset '", name, "'");
}

// ---- attributes ------------------------------------------------------------------------------

Hdf5Handle Hdf5File::open_owner(const std::string& owner) const {
  Hdf5Lock lock;
  LOOM_CHECK(owner == "/" || has_dataset(owner), path_, ": no dataset '", owner, "' to hold attributes");
  return Hdf5Handle(
      LOOM_HDF5_CHECK(H5Oopen(file_.get(), owner.c_str(), H5P_DEFAULT), path_, ": '", owner, "'"), H5Oclose);
}

bool Hdf5File::has_attribute(const std::string& name, const std::string& owner) const {
  Hdf5Lock lock;
  if (owner != "/" && !has_dataset(owner)) return false;
  return LOOM_HDF5_CHECK(H5Aexists_by_name(file_.get(), owner.c_str(), name.c_str(), H5P_DEFAULT), path_,
                         ": attribute '", name, "' of '", owner, "'") > 0;
}

Hdf5Handle Hdf5File::open_attribute(const std::string& name, const std::string& owner) const {
  Hdf5Lock lock;
  Hdf5Handle obj = open_owner(owner);
  return Hdf5Handle(
      LOOM_HDF5_CHECK(H5Aopen(obj.get(), name.c_str(), H5P_DEFAULT), path_, ": attribute '", name, "'"),
      H5Aclose);
}

std::optional<std::vector<std::string>> Hdf5File::string_list_attribute(const std::string& name,
                                                                        const std::string& owner) const {
  Hdf5Lock lock;
  if (!has_attribute(name, owner)) return std::nullopt;
  Hdf5Handle attr = open_attribute(name, owner);
  Hdf5Handle type(LOOM_HDF5_CHECK(H5Aget_type(attr.get()), path_, ": attribute '", name, "'"), H5Tclose);
  LOOM_CHECK(H5Tget_class(type.get()) == H5T_STRING, path_, ": attribute '", name, "' of '", owner,
             "' should hold strings, found HDF5 type class ", static_cast<int>(H5Tget_class(type.get())));
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Aget_space(attr.get()), path_, ": attribute '", name, "'"), H5Sclose);
  const int ndims =
      LOOM_HDF5_CHECK(H5Sget_simple_extent_ndims(space.get()), path_, ": attribute '", name, "'");
  LOOM_CHECK(ndims <= 1, path_, ": attribute '", name,
             "' should be a string or a 1-D list of strings, found ", ndims, " dimensions");
  const hssize_t n =
      LOOM_HDF5_CHECK(H5Sget_simple_extent_npoints(space.get()), path_, ": attribute '", name, "'");
  std::vector<std::string> out;
  if (n == 0) return out;
  // Each element takes at least a byte of the file (a variable-length one, a heap reference
  // of a dozen): a larger count is a claim, not data, and must not size the buffers below.
  LOOM_CHECK(static_cast<uint64_t>(n) <= file_size_, path_, ": attribute '", name, "' of '", owner,
             "' claims ", n, " strings, more than the file's ", file_size_, " bytes could hold");
  const htri_t variable = LOOM_HDF5_CHECK(H5Tis_variable_str(type.get()), path_, ": attribute '", name, "'");
  Hdf5Handle memtype(LOOM_HDF5_CHECK(H5Tcopy(H5T_C_S1), path_), H5Tclose);
  LOOM_HDF5_CHECK(H5Tset_cset(memtype.get(), H5Tget_cset(type.get())), path_, ": attribute '", name, "'");
  if (variable > 0) {
    // libhdf5 follows each string's stored reference into a global heap: check them first.
    if (vlen_guard_)
      vlen_guard_->check_attribute(attr.get(), static_cast<uint64_t>(n),
                                   ::loom::detail::concat(path_, ": attribute '", name, "' of '", owner, "'"));
    LOOM_HDF5_CHECK(H5Tset_size(memtype.get(), H5T_VARIABLE), path_, ": attribute '", name, "'");
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    LOOM_HDF5_CHECK(H5Aread(attr.get(), memtype.get(), ptrs.data()), path_, ": read attribute '", name, "'");
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(memtype.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t size = H5Tget_size(type.get());
    LOOM_CHECK(size > 0 && saturating_mul(size, static_cast<uint64_t>(n)) <= file_size_, path_,
               ": attribute '", name, "' of '", owner, "' claims ", n, " strings of ", size,
               " bytes, more than the file's ", file_size_, " bytes could hold");
    LOOM_HDF5_CHECK(H5Tset_size(memtype.get(), size), path_, ": attribute '", name, "'");
    const H5T_str_t pad = H5Tget_strpad(type.get());
    LOOM_HDF5_CHECK(H5Tset_strpad(memtype.get(), pad), path_, ": attribute '", name, "'");
    std::vector<char> buffer(size * static_cast<size_t>(n));
    LOOM_HDF5_CHECK(H5Aread(attr.get(), memtype.get(), buffer.data()), path_, ": read attribute '", name,
                    "'");
    for (hssize_t i = 0; i < n; ++i) {
      std::string s(buffer.data() + i * size, size);
      s = s.substr(0, s.find('\0'));
      if (pad == H5T_STR_SPACEPAD) s.erase(s.find_last_not_of(' ') + 1);
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::optional<std::string> Hdf5File::string_attribute(const std::string& name,
                                                      const std::string& owner) const {
  auto list = string_list_attribute(name, owner);
  if (!list) return std::nullopt;
  LOOM_CHECK(list->size() == 1, path_, ": attribute '", name, "' of '", owner,
             "' should be one string, found ", list->size());
  return list->front();
}

std::optional<int64_t> Hdf5File::int_attribute(const std::string& name, const std::string& owner) const {
  Hdf5Lock lock;
  if (!has_attribute(name, owner)) return std::nullopt;
  Hdf5Handle attr = open_attribute(name, owner);
  Hdf5Handle type(LOOM_HDF5_CHECK(H5Aget_type(attr.get()), path_, ": attribute '", name, "'"), H5Tclose);
  LOOM_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, path_, ": attribute '", name, "' of '", owner,
             "' should be an integer");
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Aget_space(attr.get()), path_, ": attribute '", name, "'"), H5Sclose);
  const hssize_t n =
      LOOM_HDF5_CHECK(H5Sget_simple_extent_npoints(space.get()), path_, ": attribute '", name, "'");
  LOOM_CHECK(n == 1, path_, ": attribute '", name, "' of '", owner, "' should be one integer, found ", n,
             " values");
  int64_t value = 0;
  LOOM_HDF5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), path_, ": read attribute '", name, "'");
  return value;
}

namespace {

// Replaces an attribute: delete, then create with the new type and shape.
Hdf5Handle create_attribute(hid_t owner, const std::string& path, const std::string& name, hid_t type,
                            hid_t space) {
  if (LOOM_HDF5_CHECK(H5Aexists(owner, name.c_str()), path, ": attribute '", name, "'") > 0)
    LOOM_HDF5_CHECK(H5Adelete(owner, name.c_str()), path, ": attribute '", name, "'");
  return Hdf5Handle(LOOM_HDF5_CHECK(H5Acreate2(owner, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                                    path, ": attribute '", name, "'"),
                    H5Aclose);
}

// Variable-length UTF-8 strings: what h5py writes for a Python str.
Hdf5Handle utf8_string_type(const std::string& path) {
  Hdf5Handle type(LOOM_HDF5_CHECK(H5Tcopy(H5T_C_S1), path), H5Tclose);
  LOOM_HDF5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE), path);
  LOOM_HDF5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8), path);
  return type;
}

}  // namespace

void Hdf5File::write_attribute(const std::string& name, const std::string& value, const std::string& owner) {
  Hdf5Lock lock;
  Hdf5Handle obj = open_owner(owner);
  Hdf5Handle type = utf8_string_type(path_);
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Screate(H5S_SCALAR), path_), H5Sclose);
  Hdf5Handle attr = create_attribute(obj.get(), path_, name, type.get(), space.get());
  const char* p = value.c_str();
  LOOM_HDF5_CHECK(H5Awrite(attr.get(), type.get(), &p), path_, ": write attribute '", name, "'");
}

void Hdf5File::write_attribute(const std::string& name, const std::vector<std::string>& values,
                               const std::string& owner) {
  Hdf5Lock lock;
  Hdf5Handle obj = open_owner(owner);
  Hdf5Handle type = utf8_string_type(path_);
  hsize_t n = values.size();
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Screate_simple(1, &n, nullptr), path_), H5Sclose);
  Hdf5Handle attr = create_attribute(obj.get(), path_, name, type.get(), space.get());
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n > 0)
    LOOM_HDF5_CHECK(H5Awrite(attr.get(), type.get(), ptrs.data()), path_, ": write attribute '", name, "'");
}

void Hdf5File::write_attribute(const std::string& name, int64_t value, const std::string& owner) {
  Hdf5Lock lock;
  Hdf5Handle obj = open_owner(owner);
  Hdf5Handle space(LOOM_HDF5_CHECK(H5Screate(H5S_SCALAR), path_), H5Sclose);
  Hdf5Handle attr = create_attribute(obj.get(), path_, name, H5T_NATIVE_INT64, space.get());
  LOOM_HDF5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), path_, ": write attribute '", name, "'");
}

}  // namespace loom::data
