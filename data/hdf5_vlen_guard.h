/*
 * Variable-length strings are the one place where Loom lets libhdf5 follow pointers stored
 * in the file: each string is a reference [length, global heap collection, object index], and
 * H5Aread copies the object it names. libhdf5 1.10.8 trusts those references and the
 * collections they point to. Corrupt ones made it hang, read past a buffer or copy from a
 * garbage slot (all found by tests/fuzz/fuzz_hdf5.cpp; docs/fuzzing.md lists them).
 *
 * So before libhdf5 reads a variable-length string attribute, Loom reads the stored references
 * themselves (through libhdf5, without following them: see read_stored_references) and checks
 * each against its collection, walked from the file's bytes the way libhdf5 will walk it.
 * Every collection is walked once per file.
 */
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>

namespace loom::data {

class Hdf5VlenGuard {
 public:
  // `file` is the open file (for the sizes of its addresses and lengths and its base address),
  // `file_size` its bytes on disk.
  Hdf5VlenGuard(hid_t file, std::string path, uint64_t file_size);

  // Throws loom::Error naming `what` when a stored reference of `attribute` (an open attribute
  // of variable-length strings with `count` elements) would make libhdf5 misbehave. Call it
  // under the HDF5 lock, before H5Aread.
  void check_attribute(hid_t attribute, uint64_t count, const std::string& what);

 private:
  // Index → size of the objects of the collection at (absolute) byte `at`, as libhdf5 will
  // see them; throws when libhdf5 would hang on it or read past it.
  const std::map<uint16_t, uint64_t>& collection(uint64_t at, const std::string& what);

  std::string path_;
  uint64_t file_size_;
  uint64_t base_address_ = 0;  // file addresses are relative to it (a user block moves it)
  size_t sizeof_address_ = 8;
  size_t sizeof_length_ = 8;
  std::map<uint64_t, std::map<uint16_t, uint64_t>> collections_;
};

}  // namespace loom::data
