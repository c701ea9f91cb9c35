/*
 * A small C++ layer over the HDF5 C API, just what the data layer needs: open or create a file,
 * describe a dataset (shape, element type, chunking, filter pipeline), read rows by hyperslab,
 * read a raw chunk, write a dataset, read and write attributes.
 *
 * Every call holds the HDF5 lock and goes through LOOM_HDF5_CHECK, and every error names the
 * file and the dataset or attribute: "fmnist.h5: dataset 'images': expected uint8, found float32".
 * Handles close themselves (Hdf5Handle), so an exception never leaks an HDF5 object.
 *
 * Size caps. A file opened for reading may be hostile, and the sizes libhdf5 reports are only
 * what the file claims. So describe() checks a dataset's claim against the file before anyone
 * allocates for it: dimensions whose product overflows, data that could not fit in the file
 * (uncompressed) or that would need a better compression ratio than deflate's 1032:1
 * (chunked), chunks likewise, and data stored outside the file (external storage, virtual
 * datasets, external links) are loom::Errors. Attributes and raw chunks are held to the file
 * size the same way. tests/data/test_hdf5_caps.cpp has a file for each.
 */
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "data/file_util.h"
#include "data/hdf5_vlen_guard.h"

namespace loom::data {

// An HDF5 identifier that is closed by `close` (H5Dclose, H5Sclose, ...) when it goes away.
class Hdf5Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Hdf5Handle() = default;
  Hdf5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Hdf5Handle(Hdf5Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Hdf5Handle& operator=(Hdf5Handle&& other) noexcept;
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  ~Hdf5Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives up ownership without closing.
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// One stage of a chunked dataset's filter pipeline (deflate, shuffle, fletcher32, ...).
struct Hdf5Filter {
  int id = 0;  // H5Z_filter_t: 1 deflate, 2 shuffle, 3 fletcher32, 4 szip, ...
  std::string name;
  std::vector<unsigned> params;  // cd_values
};

// What a dataset holds and how it is stored.
struct Hdf5DatasetInfo {
  std::string name;
  std::vector<int64_t> dims;
  H5T_class_t type_class = H5T_NO_CLASS;
  size_t type_size = 0;
  bool is_signed = false;
  bool native_byte_order = true;  // false: the raw bytes need swapping (e.g. h5py's '>i4')
  bool chunked = false;
  std::vector<int64_t> chunk_dims;  // empty unless chunked
  std::vector<Hdf5Filter> filters;  // in write order; reading undoes them last to first
  int64_t bytes = 0;                // numel x type_size: what reading it all takes (checked: fits int64)

  // "uint8", "int32", "float64", "string", ...: for error messages.
  std::string type_name() const;
  // The Loom dtype this element type reads as without loss (integers and floats), if any.
  std::optional<DType> dtype() const;
  int64_t rows() const { return dims.empty() ? 1 : dims[0]; }
  // Elements in one row: the product of every dimension after the first.
  int64_t row_elements() const;
};

// The best compression ratio a chunked dataset may claim: zlib's deflate cannot do better than
// 1032:1, so a chunked dataset larger than this many times its file is not data but a claim.
// (Fill-value-only datasets and filters such as scale-offset on constant data can exceed it;
// Loom's layout has neither.)
inline constexpr uint64_t kHdf5MaxCompressionRatio = 1032;

class Hdf5File {
 public:
  // Opens an existing file read-only. Throws loom::Error naming the file when it does not
  // exist, is not an HDF5 file, or is truncated or corrupted. Its size at opening is what
  // describe() and the attribute readers hold its claims to.
  static std::shared_ptr<Hdf5File> open(const std::string& path);
  // Creates (truncates) a file for writing.
  static std::shared_ptr<Hdf5File> create(const std::string& path);

  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;
  ~Hdf5File();

  const std::string& path() const { return path_; }
  hid_t id() const { return file_.get(); }
  // Bytes of the file when opened for reading (what its contents are held to); unlimited
  // (UINT64_MAX) for a file being written.
  uint64_t file_size() const { return file_size_; }
  // Throws loom::Error naming the file when it was deleted, replaced, truncated or modified
  // since open() (file_util.h's FileStamp; nothing for a file being written). read_rows and
  // read_raw_chunk check first: HDF5 would read a truncated file's missing bytes as an error
  // at best, and a file rewritten in place as other data (a replaced or deleted file is still
  // read whole through the open descriptor, but the run should not go on with a file that is
  // no longer there). Datasets also call it once per batch (Dataset::check_unchanged), so a
  // change is caught even when every chunk is already in the cache.
  void check_unchanged() const;

  // Whether `name` is a dataset stored in this file. Throws when a link on the way is a soft
  // or external link (an external link would open another file, of the file's choosing).
  bool has_dataset(const std::string& name) const;
  // The names of the datasets in the root group (for error messages).
  std::vector<std::string> dataset_names() const;
  // Throws, listing the datasets that do exist, when `name` is missing.
  Hdf5Handle open_dataset(const std::string& name) const;
  // Shape, type, layout and filters, checked against the file (see "Size caps" above): throws
  // loom::Error naming the dataset for a claim the file cannot back.
  Hdf5DatasetInfo describe(const std::string& name) const;
  Hdf5DatasetInfo describe(hid_t dataset, const std::string& name) const;

  // Reads rows [begin, end) of an open dataset (all of the other dimensions) by hyperslab,
  // converted to `dtype` (HDF5 converts integer widths and byte order). `out` holds
  // (end - begin) * row_elements elements.
  void read_rows(hid_t dataset, const std::string& name, int64_t begin, int64_t end, DType dtype,
                 void* out) const;

  // The stored bytes of the chunk whose first element is at `offset` (still compressed) and
  // the filter mask HDF5 stored with it (bit i set: filter i was skipped). Returns false when
  // the chunk was never written (it reads as the fill value). Throws when the chunk index
  // claims more stored bytes than the file has.
  bool read_raw_chunk(hid_t dataset, const std::string& name, const std::vector<int64_t>& offset,
                      std::vector<uint8_t>& bytes, uint32_t& filter_mask) const;

  // Writes a whole dataset. chunk_rows > 0 makes it chunked by rows; deflate_level 1..9 adds
  // gzip compression (as h5py's compression="gzip"), 0 none.
  void write_dataset(const std::string& name, DType dtype, const std::vector<int64_t>& dims, const void* data,
                     int64_t chunk_rows = 0, int deflate_level = 0);

  // Attributes of the root group ("/") or of a dataset (owner = its name).
  bool has_attribute(const std::string& name, const std::string& owner = "/") const;
  // Variable- or fixed-length strings (h5py writes variable-length UTF-8); a scalar string.
  std::optional<std::string> string_attribute(const std::string& name, const std::string& owner = "/") const;
  // A 1-D array of strings (a scalar string is a list of one).
  std::optional<std::vector<std::string>> string_list_attribute(const std::string& name,
                                                                const std::string& owner = "/") const;
  std::optional<int64_t> int_attribute(const std::string& name, const std::string& owner = "/") const;
  void write_attribute(const std::string& name, const std::string& value, const std::string& owner = "/");
  void write_attribute(const std::string& name, const std::vector<std::string>& values,
                       const std::string& owner = "/");
  void write_attribute(const std::string& name, int64_t value, const std::string& owner = "/");

  // Flushes and closes the file (errors are reported, unlike the destructor's close).
  void close();

 private:
  Hdf5File(std::string path, Hdf5Handle file, uint64_t file_size, std::unique_ptr<Hdf5VlenGuard> vlen_guard,
           std::optional<FileStamp> stamp = std::nullopt)
      : path_(std::move(path)),
        file_(std::move(file)),
        file_size_(file_size),
        vlen_guard_(std::move(vlen_guard)),
        stamp_(stamp) {}
  Hdf5Handle open_owner(const std::string& owner) const;
  Hdf5Handle open_attribute(const std::string& name, const std::string& owner) const;

  std::string path_;
  Hdf5Handle file_;
  uint64_t file_size_;
  // Checks variable-length strings before libhdf5 follows them (hdf5_vlen_guard.h). Null for
  // a file being written: its strings are Loom's own. Used under the HDF5 lock.
  std::unique_ptr<Hdf5VlenGuard> vlen_guard_;
  std::optional<FileStamp> stamp_;  // the file as opened for reading
};

// The HDF5 memory type for a Loom dtype (H5T_NATIVE_UINT8 ...).
hid_t hdf5_native_type(DType dtype);

}  // namespace loom::data
