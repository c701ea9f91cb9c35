/*
 * The HDF5 layout Loom's datasets use, and the attributes that describe a dataset.
 *
 *   image files:  /images  uint8 [N, C, H, W] (or [N, H, W]: one channel), chunked by images
 *                 /labels  integer [N] (any width), each in [0, number of classes)
 *   token files:  /tokens  uint8 or int32 [L] (any integer type reads), each < vocabulary size
 *   attributes of the root group, all optional when reading:
 *     loom_layout  int     this layout's version (kLayoutVersion)
 *     kind         string  "images" or "tokens"
 *     name, split, source, license, description   strings
 *     version      int     of the data content (bumped when a converter changes its output)
 *     class_names  strings one per class (labels are checked against their number)
 *     num_classes  int     when there are no class names
 *     vocab        strings token i's text (tokens are checked against its size)
 *     vocab_size   int     when there is no vocab
 *
 * Anyone's file with these datasets loads, whoever wrote it (h5py: see docs/data.md).
 */
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/hdf5_file.h"

namespace loom::data {

inline constexpr int64_t kLayoutVersion = 1;

struct DatasetInfo {
  std::string kind;
  std::string name;
  std::string split;
  std::string source;
  std::string license;
  std::string description;
  int64_t version = 0;
  int64_t layout_version = 0;  // 0: not written by Loom
  std::vector<std::string> class_names;
  std::vector<std::string> vocab;
};

// The string attributes: name in the file, and member.
inline constexpr std::pair<const char*, std::string DatasetInfo::*> kInfoStringFields[] = {
    {"kind", &DatasetInfo::kind},       {"name", &DatasetInfo::name},
    {"split", &DatasetInfo::split},     {"source", &DatasetInfo::source},
    {"license", &DatasetInfo::license}, {"description", &DatasetInfo::description}};

// The root group's attributes (absent ones stay empty). Throws when one has the wrong type.
DatasetInfo read_dataset_info(const Hdf5File& file);
// Writes the non-empty fields, plus loom_layout.
void write_dataset_info(Hdf5File& file, const DatasetInfo& info);

}  // namespace loom::data
