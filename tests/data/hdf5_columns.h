/*
 * Reading a whole HDF5 dataset ("column") of a file into a tensor, for the tests of files that
 * Loom writes (tests/data/test_batch_prediction.cpp, tests/tools/test_predict_cli.cpp).
 */
#pragma once

#include <filesystem>
#include <string>

#include "data/hdf5_file.h"
#include "ops/ops.h"

namespace loom::test {

// Dataset `name` of `file`, converted to `dtype` by HDF5.
inline Tensor read_column(const std::filesystem::path& file, const std::string& name, DType dtype) {
  auto f = data::Hdf5File::open(file.string());
  const data::Hdf5DatasetInfo info = f->describe(name);
  Tensor t = empty(info.dims, dtype);
  data::Hdf5Handle d = f->open_dataset(name);
  f->read_rows(d.get(), name, 0, info.rows(), dtype, t.data_ptr());
  return t;
}

}  // namespace loom::test
