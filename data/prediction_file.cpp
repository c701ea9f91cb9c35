/* The HDF5 file of a model's predictions (see prediction_file.h). */
#include "data/prediction_file.h"

#include <filesystem>
#include <sstream>

#include "data/file_util.h"
#include "data/hdf5_check.h"
#include "ops/ops.h"

namespace loom::data {
namespace {

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& dims) {
  return {dims.begin(), dims.end()};
}

// Rows per chunk: about 1 MiB of a row's elements, at most every row.
hsize_t chunk_rows(int64_t rows, int64_t row_bytes) {
  const int64_t target = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, row_bytes));
  return static_cast<hsize_t>(std::max<int64_t>(1, std::min(rows, target)));
}

}  // namespace

PredictionFile::PredictionFile(std::string path, int64_t rows, bool keep_logits, bool replace)
    : path_(std::move(path)), rows_(rows), keep_logits_(keep_logits) {
  LOOM_CHECK(rows > 0, path_, ": a prediction file needs at least one row, got ", rows);
  LOOM_CHECK(replace || !std::filesystem::exists(path_), path_,
             ": exists, and replacing it was not asked for");
  tmp_ = temp_path_for(path_);
  file_ = Hdf5File::create(tmp_);
}

PredictionFile::~PredictionFile() {
  if (tmp_.empty()) return;  // finished: the file is in place
  try {
    columns_.clear();
    file_.reset();
  } catch (...) {  // a destructor must not throw; the temporary file goes anyway
  }
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void PredictionFile::create_columns(const BatchPredictions& batch) {
  auto add = [&](const std::string& name, DType dtype, const Tensor& like) {
    std::vector<int64_t> dims = like.sizes().vec();
    dims[0] = rows_;
    int64_t row_elements = 1;
    for (size_t i = 1; i < dims.size(); ++i) row_elements *= dims[i];
    Hdf5Lock lock;
    std::vector<hsize_t> hdims = to_hsize(dims);
    Hdf5Handle space(LOOM_HDF5_CHECK(H5Screate_simple(static_cast<int>(hdims.size()), hdims.data(), nullptr),
                                     path_, ": dataset '", name, "'"),
                     H5Sclose);
    Hdf5Handle dcpl(LOOM_HDF5_CHECK(H5Pcreate(H5P_DATASET_CREATE), path_), H5Pclose);
    std::vector<hsize_t> chunk = hdims;
    for (auto& c : chunk) c = std::max<hsize_t>(c, 1);
    chunk[0] = chunk_rows(rows_, row_elements * static_cast<int64_t>(dtype_size(dtype)));
    LOOM_HDF5_CHECK(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), path_,
                    ": dataset '", name, "'");
    Hdf5Handle dataset(LOOM_HDF5_CHECK(H5Dcreate2(file_->id(), name.c_str(), hdf5_native_type(dtype),
                                                  space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                       path_, ": create dataset '", name, "'"),
                       H5Dclose);
    columns_.push_back(Column{name, dtype, {dims.begin() + 1, dims.end()}, std::move(dataset)});
  };
  add("class", kInt64, batch.classes);
  add("probability", kFloat32, batch.probabilities);
  if (keep_logits_ && batch.logits.defined()) add("logits", kFloat32, batch.logits);
  add("index", kInt64, tensor(batch.indices));
  if (batch.targets.defined()) add("target", kInt64, batch.targets);
}

void PredictionFile::write_rows(Column& column, const Tensor& values) {
  const std::vector<int64_t> shape = values.sizes().vec();
  const std::vector<int64_t> row_shape(shape.begin() + 1, shape.end());
  if (row_shape != column.row_shape) {
    std::ostringstream m;
    m << path_ << ": dataset '" << column.name << "': a batch of shape " << values.sizes()
      << " does not continue rows of shape " << IntArrayRef(column.row_shape);
    throw Error(m.str());
  }
  const Tensor cpu = values.to(kCPU).to(column.dtype).contiguous();
  Hdf5Lock lock;
  std::vector<hsize_t> start(shape.size(), 0), count = to_hsize(shape);
  start[0] = static_cast<hsize_t>(written_);
  Hdf5Handle file_space(
      LOOM_HDF5_CHECK(H5Dget_space(column.dataset.get()), path_, ": dataset '", column.name, "'"), H5Sclose);
  LOOM_HDF5_CHECK(
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
      path_, ": dataset '", column.name, "': rows ", written_, "..", written_ + shape[0]);
  Hdf5Handle memory_space(
      LOOM_HDF5_CHECK(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), path_),
      H5Sclose);
  LOOM_HDF5_CHECK(H5Dwrite(column.dataset.get(), hdf5_native_type(column.dtype), memory_space.get(),
                           file_space.get(), H5P_DEFAULT, cpu.data_ptr()),
                  path_, ": write dataset '", column.name, "' rows ", written_, "..", written_ + shape[0]);
}

void PredictionFile::append(const BatchPredictions& batch) {
  const int64_t b = static_cast<int64_t>(batch.indices.size());
  LOOM_CHECK(b > 0 && batch.classes.dim() >= 1 && batch.classes.size(0) == b &&
                 batch.probabilities.sizes() == batch.classes.sizes(),
             path_, ": a batch needs classes and probabilities of one shape [", b, ", ...], got ",
             batch.classes.sizes(), " and ", batch.probabilities.sizes());
  LOOM_CHECK(written_ + b <= rows_, path_, ": ", written_ + b, " rows arrived for a file of ", rows_);
  if (columns_.empty()) create_columns(batch);
  for (Column& column : columns_) {
    if (column.name == "class") write_rows(column, batch.classes);
    if (column.name == "probability") write_rows(column, batch.probabilities);
    if (column.name == "index") write_rows(column, tensor(batch.indices));
    if (column.name == "logits" || column.name == "target") {
      const Tensor& values = column.name == "logits" ? batch.logits : batch.targets;
      LOOM_CHECK(values.defined(), path_, ": dataset '", column.name,
                 "': the first batch had it, batch at row ", written_, " has none");
      write_rows(column, values);
    }
  }
  written_ += b;
}

void PredictionFile::finish(const std::map<std::string, std::string>& text_attributes,
                            const std::map<std::string, double>& number_attributes) {
  LOOM_CHECK(written_ == rows_, path_, ": ", written_, " of ", rows_, " rows were written");
  for (const auto& [name, value] : text_attributes) file_->write_attribute(name, value);
  {
    Hdf5Lock lock;
    // Not a structured binding: LOOM_HDF5_CHECK is a lambda, and clang 14 (the fuzz build's)
    // cannot capture one.
    for (const auto& attribute_value : number_attributes) {
      const std::string& name = attribute_value.first;
      const double& value = attribute_value.second;
      Hdf5Handle space(LOOM_HDF5_CHECK(H5Screate(H5S_SCALAR), path_), H5Sclose);
      Hdf5Handle attribute(LOOM_HDF5_CHECK(H5Acreate2(file_->id(), name.c_str(), H5T_NATIVE_DOUBLE,
                                                      space.get(), H5P_DEFAULT, H5P_DEFAULT),
                                           path_, ": attribute '", name, "'"),
                           H5Aclose);
      LOOM_HDF5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, &value), path_, ": attribute '", name,
                      "'");
    }
  }
  columns_.clear();
  file_->close();
  file_.reset();
  fsync_path(tmp_);
  commit_file(tmp_, path_);
  tmp_.clear();
}

}  // namespace loom::data
