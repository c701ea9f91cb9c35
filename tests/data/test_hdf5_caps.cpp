/*
 * The HDF5 readers' size caps (data/hdf5_file.h, "Size caps"): a dataset, chunk or attribute
 * that claims more memory than its file could hold, a shape whose sizes overflow, and data kept
 * outside the file are loom::Errors raised before Loom allocates for them. The files are made
 * with the HDF5 C API (HDF5 happily writes such claims: an unwritten dataset costs nothing),
 * and a few by patching the bytes of a valid file where the API will not write the claim.
 */
#include <doctest/doctest.h>
#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "data/data.h"
#include "tests/data/data_test_util.h"

using namespace loom;

namespace {

constexpr hsize_t kUnlimited = H5S_UNLIMITED;

// The message of the loom::Error that opening `path` as an image (token) dataset and reading
// its first sample throws ("" if none).
std::string image_error(const std::string& path) {
  return test::error_if_any([&] { data::Hdf5ImageDataset(path).get(0); });
}

std::string token_error(const std::string& path) {
  return test::error_if_any([&] { data::Hdf5TokenDataset(path, {.block_size = 2}).get(0); });
}

// Writes `name` as an uint8 dataset of shape `dims` that is never written: HDF5 stores only
// its description, so the claim costs nothing. chunk empty: contiguous (allocated late).
void declare(hid_t file, const char* name, std::vector<hsize_t> dims, std::vector<hsize_t> chunk = {},
             hid_t type = H5T_NATIVE_UINT8) {
  std::vector<hsize_t> max = dims;
  if (!chunk.empty()) max[0] = kUnlimited;  // lets a chunk be longer than the data
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max.data());
  REQUIRE(space >= 0);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (!chunk.empty()) {
    REQUIRE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) >= 0);
  } else {
    REQUIRE(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE) >= 0);
  }
  const hid_t dset = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  REQUIRE(dset >= 0);
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
}

// A file with `images` as declared by `make` and ten valid labels.
std::string image_file(const test::ScratchDir& dir, const std::string& name,
                       const std::function<void(hid_t)>& make, hsize_t labels = 10) {
  const std::string path = dir.file(name);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(file >= 0);
  make(file);
  std::vector<uint8_t> y(labels, 0);
  const hid_t space = H5Screate_simple(1, &labels, nullptr);
  const hid_t dset =
      H5Dcreate2(file, "labels", H5T_NATIVE_UINT8, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, y.data()) >= 0);
  H5Dclose(dset);
  H5Sclose(space);
  H5Fclose(file);
  return path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("hdf5 caps: an uncompressed dataset larger than its file is refused on open") {
  test::ScratchDir dir("hdf5_caps");
  // 10 x 1 x 1000 x 1000 bytes = 10 MB claimed by a file of a few KB.
  const std::string path = image_file(dir, "contiguous.h5", [](hid_t f) {
    declare(f, "images", {10, 1, 1000, 1000});
  });
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "dataset 'images'"));
  CHECK(contains(error, "more than the whole file"));
}

TEST_CASE("hdf5 caps: a chunked dataset beyond 1032 x its file (deflate's best ratio) is refused") {
  test::ScratchDir dir("hdf5_caps");
  // 10^6 x 1000 bytes in unwritten chunks: 1 GB of fill value from a file of a few KB.
  const std::string path = image_file(dir, "chunked.h5", [](hid_t f) {
    declare(f, "images", {1000000, 1, 10, 100}, {16, 1, 10, 100});
  });
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "dataset 'images'"));
  CHECK(contains(error, "1032 times the file"));
  // The same claim within the ratio is data Loom reads (all fill value): 10 x 1000 bytes.
  const std::string small = image_file(dir, "small.h5", [](hid_t f) {
    declare(f, "images", {10, 1, 10, 100}, {4, 1, 10, 100});
  });
  data::Hdf5ImageDataset ds(small);
  CHECK(ds.get(9).data.sum().item<int64_t>() == 0);
}

TEST_CASE("hdf5 caps: a chunk shape larger than the file could decode to is refused") {
  test::ScratchDir dir("hdf5_caps");
  // Ten rows of data, but chunks of 2^22 rows x 64 bytes (256 MB each): reading one row would
  // make HDF5 (or the raw-chunk path) allocate a whole chunk.
  const std::string path = image_file(dir, "big_chunk.h5", [](hid_t f) {
    declare(f, "images", {10, 1, 8, 8}, {hsize_t{1} << 22, 1, 8, 8});
  });
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "chunk shape [4194304, 1, 8, 8]"));
}

TEST_CASE("hdf5 caps: a shape whose row size overflows is refused even when it has no rows") {
  test::ScratchDir dir("hdf5_caps");
  // [0, 2^31, 2^31, 2^31]: zero elements, but row_elements() = 2^93.
  const std::string path = dir.file("overflow.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(file >= 0);
  declare(file, "tokens", {0, hsize_t{1} << 31, hsize_t{1} << 31, hsize_t{1} << 31});
  H5Fclose(file);
  const std::string error = token_error(path);
  CAPTURE(error);
  CHECK(contains(error, "overflows 64-bit sizes"));
}

TEST_CASE("hdf5 caps: data stored outside the file (external storage, external links) is refused") {
  test::ScratchDir dir("hdf5_caps");
  const std::string outside = dir.file("outside.bin");
  write_bytes(outside, std::string(100, '\1'));
  const std::string external = image_file(dir, "external.h5", [&](hid_t f) {
    hsize_t dims[4] = {10, 1, 2, 5};
    const hid_t space = H5Screate_simple(4, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    REQUIRE(H5Pset_external(dcpl, outside.c_str(), 0, 100) >= 0);
    const hid_t dset = H5Dcreate2(f, "images", H5T_NATIVE_UINT8, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    REQUIRE(dset >= 0);
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  CHECK(contains(image_error(external), "external file(s)"));

  // An external link in place of the dataset: opening it would open another file.
  const std::string target = test::write_synthetic(dir, "target.h5", 10);
  const std::string linked = image_file(dir, "linked.h5", [&](hid_t f) {
    REQUIRE(H5Lcreate_external(target.c_str(), "/images", f, "images", H5P_DEFAULT, H5P_DEFAULT) >= 0);
  });
  const std::string error = image_error(linked);
  CAPTURE(error);
  CHECK(contains(error, "'images' is an external link"));
}

namespace {

// A valid file (uncompressed chunks, so the raw-chunk path reads them) whose first chunk's
// stored size, as its v1 B-tree records it, is patched to `claimed`.
std::string patched_chunk_file(const test::ScratchDir& dir, const std::string& name, uint32_t claimed) {
  const std::string path =
      test::write_synthetic(dir, name, 8, 1, 4, 4, {.chunk_rows = 4, .deflate_level = 0});
  std::string bytes = read_bytes(path);
  // A v1 B-tree node: "TREE", type (1 = raw data chunks), level (0 = leaf), entries (2 bytes),
  // left and right sibling addresses (8 bytes each), then key 0, whose first 4 bytes are the
  // size of chunk 0.
  for (size_t at = bytes.find("TREE"); at != std::string::npos; at = bytes.find("TREE", at + 4)) {
    if (at + 28 > bytes.size() || bytes[at + 4] != 1 || bytes[at + 5] != 0) continue;
    uint32_t size = 0;
    std::memcpy(&size, bytes.data() + at + 24, 4);
    REQUIRE(size == 4 * 16);  // four 4x4 images: the layout is the one this test expects
    std::memcpy(bytes.data() + at + 24, &claimed, 4);
    write_bytes(path, bytes);
    return path;
  }
  FAIL("no chunk B-tree in the file");
  return path;
}

}  // namespace

TEST_CASE("hdf5 caps: a raw chunk whose index claims more bytes than the file is refused before reading it") {
  test::ScratchDir dir("hdf5_caps");
  data::Hdf5ImageDataset ds(patched_chunk_file(dir, "huge_chunk.h5", 0x7fffffff));
  REQUIRE(ds.raw_chunks());
  CHECK_THROWS_WITH_AS(ds.get(0), doctest::Contains("claims 2147483647 stored bytes at byte"), Error);
}

TEST_CASE("hdf5 caps: a raw chunk whose index and HDF5's storage size disagree is refused (it overflowed)") {
  test::ScratchDir dir("hdf5_caps");
  // 100 bytes recorded for a 64-byte chunk, all within the file: H5Dget_chunk_storage_size
  // still says 64, and H5Dread_chunk used to copy 100 bytes into the 64-byte buffer.
  data::Hdf5ImageDataset ds(patched_chunk_file(dir, "overflow_chunk.h5", 100));
  REQUIRE(ds.raw_chunks());
  CHECK_THROWS_WITH_AS(ds.get(0), doctest::Contains("records 100 stored bytes but HDF5 reports 64"), Error);
  // The other chunk is intact and still reads.
  CHECK(ds.get(4).data.size(0) == 1);
}

// libhdf5 1.10.8 itself refuses this one while decoding the attribute message ("data size
// exceeds buffer size"), before Loom's own check in string_list_attribute (n <= file size)
// is reached; that check stays for storage libhdf5 does not size-check. Either way the claim
// must end as a loom::Error naming the file, not as a 3 TB allocation.
TEST_CASE("hdf5 caps: a string attribute claiming more strings than the file holds is a loom::Error") {
  test::ScratchDir dir("hdf5_caps");
  // class_names as 257 fixed-length strings; then the dataspace's 257 becomes 2^40.
  const std::string path = image_file(dir, "names.h5", [](hid_t f) {
    declare(f, "images", {10, 1, 2, 2}, {10, 1, 2, 2});
    const hsize_t n = 257;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t type = H5Tcopy(H5T_C_S1);
    REQUIRE(H5Tset_size(type, 3) >= 0);
    const hid_t attr = H5Acreate2(f, "class_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(attr >= 0);
    std::vector<char> names(3 * n, 'x');
    REQUIRE(H5Awrite(attr, type, names.data()) >= 0);
    H5Aclose(attr);
    H5Tclose(type);
    H5Sclose(space);
  });
  std::string bytes = read_bytes(path);
  const uint64_t from = 257, to = uint64_t{1} << 40;
  const std::string needle(reinterpret_cast<const char*>(&from), 8);
  // The dataspace message: version 1 (version, rank, flags, 5 reserved bytes, then the
  // dimensions) or version 2 (version, rank, flags, type, then the dimensions).
  size_t at = std::string::npos;
  for (size_t i = bytes.find(needle); i != std::string::npos; i = bytes.find(needle, i + 1)) {
    const bool v1 = i >= 8 && bytes[i - 8] == 1 && bytes[i - 7] == 1;
    const bool v2 = i >= 4 && bytes[i - 4] == 2 && bytes[i - 3] == 1;
    if (v1 || v2) {
      at = i;
      break;
    }
  }
  REQUIRE(at != std::string::npos);
  std::memcpy(bytes.data() + at, &to, 8);
  if (bytes.compare(at + 8, 8, needle) == 0) std::memcpy(bytes.data() + at + 8, &to, 8);  // the maximum too
  write_bytes(path, bytes);
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "names.h5: attribute '"));
  CHECK((contains(error, "claims 1099511627776 strings") || contains(error, "unable to decode")));
}

TEST_CASE("hdf5 caps: labels that would imply 2^63 classes are refused, not overflowed") {
  test::ScratchDir dir("hdf5_caps");
  const std::string path = dir.file("labels.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(file >= 0);
  hsize_t dims[3] = {2, 2, 2}, n = 2;
  std::vector<uint8_t> pixels(8, 1);
  const hid_t image_space = H5Screate_simple(3, dims, nullptr);
  const hid_t images =
      H5Dcreate2(file, "images", H5T_NATIVE_UINT8, image_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Dwrite(images, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, pixels.data()) >= 0);
  const int64_t y[2] = {0, INT64_MAX};
  const hid_t label_space = H5Screate_simple(1, &n, nullptr);
  const hid_t labels =
      H5Dcreate2(file, "labels", H5T_NATIVE_INT64, label_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Dwrite(labels, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0);
  H5Dclose(labels);
  H5Sclose(label_space);
  H5Dclose(images);
  H5Sclose(image_space);
  H5Fclose(file);
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "implies more than 16777216 classes"));
}

TEST_CASE(
    "hdf5 caps: a file that changed on disk while this process has it open is refused, not read stale") {
  test::ScratchDir dir("hdf5_caps");
  const std::string path = test::write_synthetic(dir, "open.h5", 40);
  data::Hdf5ImageDataset open(path);  // keeps the file open, as a DataLoader would
  // Truncated in place (same inode): HDF5 would hand a second open the first one's view, with
  // its old size, so the caps would be checked against a file that is no longer there.
  std::filesystem::resize_file(path, 1000);
  CHECK_THROWS_WITH_AS(data::Hdf5ImageDataset{path}, doctest::Contains("is 1000 bytes on disk but"), Error);
}

namespace {

// Loom's writer stores its string attributes (name, class_names) as variable-length strings,
// in a global heap collection: "GCOL", version, 3 reserved bytes, size (8), then objects of
// [index (2), references (2), reserved (4), size (8), data padded to 8]. Writes a synthetic
// dataset and sets the size of the first object whose index is `index` (0: the free space).
std::string heap_patched_file(const test::ScratchDir& dir, const std::string& name, uint16_t index,
                              uint64_t new_size) {
  const std::string path = test::write_synthetic(dir, name, 10);
  std::string bytes = read_bytes(path);
  const size_t heap = bytes.find("GCOL");
  REQUIRE(heap != std::string::npos);
  uint64_t size = 0;
  std::memcpy(&size, bytes.data() + heap + 8, 8);
  for (size_t p = heap + 16; p + 16 <= heap + size;) {
    uint16_t object_index = 0;
    uint64_t object_size = 0;
    std::memcpy(&object_index, bytes.data() + p, 2);
    std::memcpy(&object_size, bytes.data() + p + 8, 8);
    if (object_index == index) {
      std::memcpy(bytes.data() + p + 8, &new_size, 8);
      write_bytes(path, bytes);
      return path;
    }
    if (object_index == 0) break;
    p += 16 + ((object_size + 7) & ~uint64_t{7});
  }
  FAIL("no global heap object with that index");
  return path;
}

}  // namespace

// libhdf5 1.10.8 never advances past a zero-size free-space object: H5Aread hangs.
TEST_CASE("hdf5 caps: a global heap whose free space has size 0 is refused (libhdf5 1.10 hangs on it)") {
  test::ScratchDir dir("hdf5_caps");
  const std::string error = image_error(heap_patched_file(dir, "heap.h5", 0, 0));
  CAPTURE(error);
  CHECK(contains(error, "is corrupt: object 0 at byte"));
  CHECK(contains(error, "never ends"));
}

// libhdf5 1.10.8 copies an object's recorded size out of the collection's buffer (H5HG_read).
TEST_CASE("hdf5 caps: a global heap object longer than its collection is refused (libhdf5 reads past it)") {
  test::ScratchDir dir("hdf5_caps");
  const std::string error = image_error(heap_patched_file(dir, "heap.h5", 1, uint64_t{1} << 40));
  CAPTURE(error);
  CHECK(contains(error, "is corrupt: object 1 at byte"));
  CHECK(contains(error, "runs past the collection's end"));
}

// ---- stored references of variable-length strings (data/hdf5_vlen_guard.h) ------------------

namespace {

// A file with a user block of `user_block` bytes (0: none) and two root attributes of
// variable-length strings: "name" = "synthetic-name" and "tags" = ["", "b", ""] (an empty
// string is stored as a 0-byte heap object).
std::string named_file(const test::ScratchDir& dir, const std::string& name, hsize_t user_block) {
  const std::string path = dir.file(name);
  const hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  if (user_block > 0) REQUIRE(H5Pset_userblock(fcpl, user_block) >= 0);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  REQUIRE(H5Tset_size(type, H5T_VARIABLE) >= 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, "name", type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* value = "synthetic-name";
  REQUIRE(H5Awrite(attr, type, &value) >= 0);
  H5Aclose(attr);
  H5Sclose(space);
  const hsize_t n = 3;
  const hid_t list_space = H5Screate_simple(1, &n, nullptr);
  const hid_t tags = H5Acreate2(file, "tags", type, list_space, H5P_DEFAULT, H5P_DEFAULT);
  const char* values[3] = {"", "b", ""};
  REQUIRE(H5Awrite(tags, type, values) >= 0);
  H5Aclose(tags);
  H5Sclose(list_space);
  H5Tclose(type);
  H5Fclose(file);
  H5Pclose(fcpl);
  return path;
}

// The position in `bytes` of the stored reference [length (4), address (8), index (4)] to
// object 1 of the global heap collection at address `heap` (relative to the base address).
size_t stored_reference(const std::string& bytes, uint64_t heap) {
  char needle[12];
  const uint32_t first = 1;
  std::memcpy(needle, &heap, 8);
  std::memcpy(needle + 8, &first, 4);
  const size_t at = bytes.find(std::string(needle, 12));
  REQUIRE(at != std::string::npos);
  REQUIRE(at >= 4);
  return at - 4;
}

template <typename T>
void patch(const std::string& path, size_t at, T value) {
  std::string bytes = read_bytes(path);
  std::memcpy(bytes.data() + at, &value, sizeof value);
  write_bytes(path, bytes);
}

}  // namespace

// libhdf5 1.10.8 follows a stored index without checking it (H5HG_read asserts it in debug
// builds only) and copies from a garbage slot: a fuzzer find. Loom's files have checksummed
// object headers, so the references cannot be patched; the collection can.
TEST_CASE("hdf5 caps: a string that refers to an object its global heap does not have is refused") {
  test::ScratchDir dir("hdf5_caps");
  const std::string path = test::write_synthetic(dir, "index.h5", 10);
  const size_t heap = read_bytes(path).find("GCOL");
  REQUIRE(heap != std::string::npos);
  patch(path, heap + 16, uint16_t{77});  // object 1 becomes object 77
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "index.h5: attribute '"));
  CHECK(contains(error, "refers to object 1 of the global heap at byte " + std::to_string(heap)));
  CHECK(contains(error, "which has no such object"));
}

// libhdf5 sizes its buffer by the stored length and copies the object's size into it.
TEST_CASE("hdf5 caps: a string whose stored length disagrees with its heap object is refused") {
  test::ScratchDir dir("hdf5_caps");
  const std::string path = test::write_synthetic(dir, "length.h5", 10);
  const std::string bytes = read_bytes(path);
  const size_t heap = bytes.find("GCOL");
  uint64_t size = 0;
  std::memcpy(&size, bytes.data() + heap + 16 + 8, 8);
  REQUIRE(size % 8 != 0);      // so that one more byte keeps the object's padded size
  patch(path, heap + 16 + 8, size + 1);
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "has length " + std::to_string(size) + " but its object 1"));
  CHECK(contains(error, "holds " + std::to_string(size + 1) + " bytes"));
}

TEST_CASE("hdf5 caps: a string that refers to something other than a global heap is refused") {
  test::ScratchDir dir("hdf5_caps");
  const std::string path = test::write_synthetic(dir, "address.h5", 10);
  const size_t heap = read_bytes(path).find("GCOL");
  patch(path, heap, uint32_t{0});  // the signature
  const std::string error = image_error(path);
  CAPTURE(error);
  CHECK(contains(error, "byte " + std::to_string(heap) + " should hold a global heap collection"));
}

// Addresses in an HDF5 file count from its superblock, which a user block moves: the check
// must find the collection where libhdf5 will, both to pass a good file and to catch a bad one.
TEST_CASE("hdf5 caps: stored string references are checked relative to a user block") {
  test::ScratchDir dir("hdf5_caps");
  const std::string path = named_file(dir, "user_block.h5", 512);
  CHECK(data::Hdf5File::open(path)->string_attribute("name") == "synthetic-name");
  CHECK(data::Hdf5File::open(path)->string_list_attribute("tags") == std::vector<std::string>{"", "b", ""});
  CHECK(data::Hdf5File::open(named_file(dir, "plain.h5", 0))->string_attribute("name") == "synthetic-name");

  const std::string bytes = read_bytes(path);
  const size_t heap = bytes.find("GCOL");
  REQUIRE(heap > 512);
  patch(path, stored_reference(bytes, heap - 512) + 12, uint32_t{9});
  const std::string error =
      test::error_if_any([&] { data::Hdf5File::open(path)->string_attribute("name"); });
  CAPTURE(error);
  CHECK(contains(error, "refers to object 9 of the global heap at byte " + std::to_string(heap)));
}
