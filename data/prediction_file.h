/*
 * PredictionFile: the HDF5 file of a model's predictions over a dataset (tools/predict), written
 * batch by batch so that memory stays flat whatever the dataset's size. Its datasets, one row per
 * example (images: [N]; token windows: [N, T]):
 *
 *   class        int64    the predicted class (argmax of the logits)
 *   probability  float32  its softmax probability
 *   logits       float32  [..., K] the raw logits (only when asked for)
 *   index        int64    [N] the dataset index of each row
 *   target       int64    the label (only for a dataset that has them)
 *
 * and root attributes written by finish(): any strings and numbers the caller gives (the model
 * and data paths, accuracy, perplexity). Readable by h5py (tests/tools/predictions_h5py.py).
 *
 * It lives in the data layer because it is HDF5 and tensors only; nothing in it knows a model.
 * Every dataset is preallocated at its final size (N rows, chunked by rows) and each batch is
 * written into its rows by hyperslab. The file is written under a temporary name beside `path`
 * and renamed over it by finish() (file_util.h): until then an existing file at `path` is
 * untouched, and a failure (or a destructor without finish) removes the temporary file.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/hdf5_file.h"

namespace loom::data {

// The predictions of one batch of B examples, on any device.
struct BatchPredictions {
  Tensor classes;                // int64 [B, ...]
  Tensor probabilities;          // float32 [B, ...]
  Tensor logits;                 // float32 [B, ..., K], or undefined
  Tensor targets;                // int64 [B, ...], or undefined (no labels)
  std::vector<int64_t> indices;  // the dataset index of each example
};

class PredictionFile {
 public:
  // A file for `rows` predictions. Throws loom::Error naming `path` when it exists and `replace`
  // is false, or when its directory cannot take a file.
  PredictionFile(std::string path, int64_t rows, bool keep_logits, bool replace);
  ~PredictionFile();
  PredictionFile(const PredictionFile&) = delete;
  PredictionFile& operator=(const PredictionFile&) = delete;

  // The next B rows. The datasets are created at the first call, from its shapes (a `logits`
  // column only when the file keeps logits and the batch has them); every later batch must have
  // the same per-row shapes. Throws loom::Error naming the file and the shapes on a mismatch, or
  // when more than `rows` rows arrive.
  void append(const BatchPredictions& batch);

  // Writes the attributes, closes, fsyncs and renames the file into place. Throws when fewer
  // than `rows` rows were appended.
  void finish(const std::map<std::string, std::string>& text_attributes,
              const std::map<std::string, double>& number_attributes);

  const std::string& path() const { return path_; }
  int64_t rows_written() const { return written_; }

 private:
  struct Column {
    std::string name;
    DType dtype;
    std::vector<int64_t> row_shape;  // the sizes after the first
    Hdf5Handle dataset;
  };
  void create_columns(const BatchPredictions& batch);
  void write_rows(Column& column, const Tensor& values);

  std::string path_, tmp_;
  int64_t rows_ = 0, written_ = 0;
  bool keep_logits_ = false;
  std::shared_ptr<Hdf5File> file_;
  std::vector<Column> columns_;
};

}  // namespace loom::data
