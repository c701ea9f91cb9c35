/* Checks stored variable-length string references before libhdf5 follows them (see the header). */
#include "data/hdf5_vlen_guard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "data/hdf5_check.h"
#include "data/hdf5_file.h"

namespace loom::data {

namespace {

// Closes a POSIX descriptor when the scope ends.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to n bytes at offset; returns how many (fewer only at the end of the file).
size_t pread_some(int fd, uint8_t* out, size_t n, uint64_t offset, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    LOOM_CHECK(r >= 0, path, ": reading it failed: ", std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

uint64_t read_le(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// ---- reading the references as stored ---------------------------------------------------------
//
// libhdf5 has no call that returns a variable-length element as stored; H5Aread converts it,
// which means following the reference. But the conversion is looked up by type, and an
// application may register its own: this one goes from a variable-length string to an opaque
// type of the same size (the stored size, 4 + address size + 4) and leaves the bytes as
// they are. H5Aread copies the attribute's stored data into a buffer, "converts" it with this
// function and hands it over: the references, not the strings.

constexpr const char* kStoredFormTag = "loom: variable-length reference as stored";

herr_t keep_stored_form(hid_t source, hid_t destination, H5T_cdata_t* cdata, size_t, size_t, size_t, void*,
                        void*, hid_t) {
  if (cdata->command != H5T_CONV_INIT) return 0;  // CONV: the bytes are already what we want
  cdata->need_bkg = H5T_BKG_NO;
  // libhdf5 offers every variable-length → opaque pair to this function; take only ours.
  if (H5Tis_variable_str(source) <= 0 || H5Tget_class(destination) != H5T_OPAQUE) return -1;
  char* tag = H5Tget_tag(destination);
  const bool ours = tag != nullptr && std::strcmp(tag, kStoredFormTag) == 0;
  H5free_memory(tag);
  return ours && H5Tget_size(source) == H5Tget_size(destination) ? 0 : -1;
}

void register_stored_form_conversion() {
  static std::once_flag once;
  std::call_once(once, [] {
    Hdf5Handle vlen_string(LOOM_HDF5_CHECK(H5Tcopy(H5T_C_S1), "HDF5"), H5Tclose);
    LOOM_HDF5_CHECK(H5Tset_size(vlen_string.get(), H5T_VARIABLE), "HDF5");
    Hdf5Handle opaque(LOOM_HDF5_CHECK(H5Tcreate(H5T_OPAQUE, 16), "HDF5"), H5Tclose);
    LOOM_HDF5_CHECK(H5Tregister(H5T_PERS_SOFT, "loom_keep_stored_vlen", vlen_string.get(), opaque.get(),
                                keep_stored_form),
                    "HDF5: register the conversion that reads variable-length references as stored");
  });
}

}  // namespace

Hdf5VlenGuard::Hdf5VlenGuard(hid_t file, std::string path, uint64_t file_size)
    : path_(std::move(path)), file_size_(file_size) {
  Hdf5Handle creation(LOOM_HDF5_CHECK(H5Fget_create_plist(file), path_), H5Pclose);
  hsize_t user_block = 0;
  LOOM_HDF5_CHECK(H5Pget_userblock(creation.get(), &user_block), path_);
  LOOM_HDF5_CHECK(H5Pget_sizes(creation.get(), &sizeof_address_, &sizeof_length_), path_);
  // libhdf5 takes the superblock's position in the file as the base of every address, and
  // reports that position as the user block's size.
  base_address_ = user_block;
  LOOM_CHECK(sizeof_address_ >= 2 && sizeof_address_ <= 8 && sizeof_length_ >= 2 && sizeof_length_ <= 8, path_,
             ": addresses of ", sizeof_address_, " bytes and lengths of ", sizeof_length_,
             " bytes are not supported (HDF5 allows 2, 4 or 8)");
}

void Hdf5VlenGuard::check_attribute(hid_t attribute, uint64_t count, const std::string& what) {
  register_stored_form_conversion();
  // Stored form of each string: length (4 bytes), the collection's address, the object's index (4).
  const size_t element = 4 + sizeof_address_ + 4;
  Hdf5Handle stored_type(LOOM_HDF5_CHECK(H5Tcreate(H5T_OPAQUE, element), what), H5Tclose);
  LOOM_HDF5_CHECK(H5Tset_tag(stored_type.get(), kStoredFormTag), what);
  std::vector<uint8_t> stored(count * element);  // count is capped by the file's size
  LOOM_HDF5_CHECK(H5Aread(attribute, stored_type.get(), stored.data()), what, ": read its stored references");

  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* reference = stored.data() + i * element;
    const uint64_t length = read_le(reference, 4);
    const uint64_t address = read_le(reference + 4, sizeof_address_);
    const uint64_t index = read_le(reference + 4 + sizeof_address_, 4);
    if (address == 0) continue;  // a null string: libhdf5 reads nothing
    LOOM_CHECK(address < file_size_ && base_address_ < file_size_ - address, what, ": string ", i,
               " refers to a global heap at address ", address, ", past the end of the file (", file_size_,
               " bytes)");
    const auto& objects = collection(base_address_ + address, what);
    // libhdf5 asserts, in debug builds only, that the index is one the collection has; a
    // release build copies whatever the slot (or the memory past the slot array) holds.
    const auto object = objects.find(static_cast<uint16_t>(index));
    LOOM_CHECK(index > 0 && index <= 0xffff && object != objects.end(), what, ": string ", i,
               " refers to object ", index, " of the global heap at byte ", base_address_ + address,
               ", which has no such object (libhdf5 would copy from a garbage slot)");
    // libhdf5 sizes its buffer by the reference's length and copies the object's whole size
    // into it; every writer stores a string of n bytes as an n-byte object.
    LOOM_CHECK(object->second == length, what, ": string ", i, " has length ", length, " but its object ", index,
               " in the global heap at byte ", base_address_ + address, " holds ", object->second,
               " bytes (libhdf5 would read past its buffer or leave bytes unset)");
  }
}

// Global heap collection: "GCOL", version 1, 3 reserved bytes, the collection's size (a
// length), then objects of [index (2), references (2), reserved (4), size (a length), data
// padded to 8]; index 0 is the free space at the end, whose size counts its own header.
// libhdf5 1.10.8 walks a collection with `p = begin + need` (H5HG__cache_heap_deserialize):
// a free-space object of size 0 never advances p, and H5Aread hangs forever; an object
// longer than the collection is copied (H5HG_read) from past the collection's buffer; and a
// claimed size is allocated before the file is found too short. So the walk here is
// libhdf5's, refusing each of those.
const std::map<uint16_t, uint64_t>& Hdf5VlenGuard::collection(uint64_t at, const std::string& what) {
  if (auto found = collections_.find(at); found != collections_.end()) return found->second;
  FdCloser file{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  LOOM_CHECK(file.fd >= 0, path_, ": cannot open to check its global heaps: ", std::strerror(errno));
  const size_t header = 8 + sizeof_length_;  // of the collection, and of each object in it
  uint8_t bytes[16];
  const bool whole = pread_some(file.fd, bytes, header, at, path_) == header;
  // libhdf5 checks the signature and the version, and nothing else of the header.
  LOOM_CHECK(whole && std::memcmp(bytes, "GCOL", 4) == 0 && bytes[4] == 1, what, ": byte ", at,
             " should hold a global heap collection (a string refers to it), but does not");
  const uint64_t size = read_le(bytes + 8, sizeof_length_);
  LOOM_CHECK(size <= file_size_ - at, what, ": the global heap at byte ", at, " claims ", size,
             " bytes, past the end of the file (", file_size_, " bytes)");
  // Smaller than its own header, libhdf5 would size its slot array by a negative count.
  LOOM_CHECK(size >= header, what, ": the global heap at byte ", at, " claims ", size,
             " bytes, less than its own header");
  std::map<uint16_t, uint64_t> objects;
  const uint64_t end = at + size;
  for (uint64_t p = at + header; p < end;) {
    if (end - p < header) break;  // the last few bytes are free space
    LOOM_CHECK(pread_some(file.fd, bytes, header, p, path_) == header, what, ": the global heap at byte ", at,
               " is cut off by the end of the file");
    const uint64_t index = read_le(bytes, 2), object_size = read_le(bytes + 8, sizeof_length_);
    // Index 0 (free space) counts its header in its size; others are padded to 8 bytes.
    // (A size past the collection's end is refused as it is, before the padding could wrap.)
    const uint64_t need =
        index == 0 || object_size > end - p ? object_size : header + ((object_size + 7) & ~uint64_t{7});
    LOOM_CHECK(need > 0 && need <= end - p, what, ": the global heap at byte ", at, " is corrupt: object ", index,
               " at byte ", p, " has size ", object_size, ", which ",
               need == 0 ? "never ends" : "runs past the collection's end", " (libhdf5 would hang or overread)");
    if (index > 0) objects[static_cast<uint16_t>(index)] = object_size;  // a repeated index: the last wins
    p += need;
  }
  return collections_.emplace(at, std::move(objects)).first->second;
}

}  // namespace loom::data
