/* Reading and writing the dataset attributes (see hdf5_layout.h). */
#include "data/hdf5_layout.h"

namespace loom::data {

DatasetInfo read_dataset_info(const Hdf5File& file) {
  DatasetInfo info;
  for (auto [name, member] : kInfoStringFields)
    if (auto v = file.string_attribute(name)) info.*member = *v;
  info.version = file.int_attribute("version").value_or(0);
  info.layout_version = file.int_attribute("loom_layout").value_or(0);
  if (auto v = file.string_list_attribute("class_names")) info.class_names = *v;
  if (auto v = file.string_list_attribute("vocab")) info.vocab = *v;
  return info;
}

void write_dataset_info(Hdf5File& file, const DatasetInfo& info) {
  file.write_attribute("loom_layout", kLayoutVersion);
  for (auto [name, member] : kInfoStringFields)
    if (!(info.*member).empty()) file.write_attribute(name, info.*member);
  file.write_attribute("version", info.version);
  if (!info.class_names.empty()) file.write_attribute("class_names", info.class_names);
  if (!info.vocab.empty()) file.write_attribute("vocab", info.vocab);
}

}  // namespace loom::data
