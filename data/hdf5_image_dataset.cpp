/* Labelled images from HDF5, validated on open (see hdf5_image_dataset.h). */
#include "data/hdf5_image_dataset.h"

#include <algorithm>

#include "data/file_util.h"
#include "data/sample_memory.h"
#include "ops/ops.h"

namespace loom::data {

namespace {

// The most classes a file may imply through its largest label alone (ImageNet-21k has 21,841).
constexpr int64_t kMaxClasses = int64_t{1} << 24;

}  // namespace

Hdf5ImageDataset::Hdf5ImageDataset(std::string path, Hdf5ImageOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  file_ = Hdf5File::open(path_);
  info_ = read_dataset_info(*file_);
  const std::string images_what = path_ + ": dataset '" + options_.images + "'";
  const std::string labels_what = path_ + ": dataset '" + options_.labels + "'";

  Hdf5DatasetInfo images = file_->describe(options_.images);
  LOOM_CHECK(images.type_class == H5T_INTEGER && images.type_size == 1 && !images.is_signed, images_what,
             ": expected uint8 images, found ", images.type_name());
  LOOM_CHECK(images.dims.size() == 3 || images.dims.size() == 4, images_what,
             ": expected rank 4 [N, C, H, W] or rank 3 [N, H, W], found rank ", images.dims.size());
  size_ = images.dims[0];
  LOOM_CHECK(size_ > 0, images_what, ": the dataset is empty (0 images)");
  channels_ = images.dims.size() == 4 ? images.dims[1] : 1;
  height_ = images.dims[images.dims.size() - 2];
  width_ = images.dims.back();
  LOOM_CHECK(channels_ > 0 && height_ > 0 && width_ > 0, images_what, ": images of size ", channels_, "x",
             height_, "x", width_, " are empty");

  Hdf5DatasetInfo labels = file_->describe(options_.labels);
  LOOM_CHECK(labels.type_class == H5T_INTEGER, labels_what, ": expected integer labels, found ",
             labels.type_name());
  LOOM_CHECK(labels.dims.size() == 1, labels_what, ": expected rank 1 [N], found rank ", labels.dims.size());
  LOOM_CHECK(labels.dims[0] == size_, labels_what, ": has ", labels.dims[0], " labels for ", size_,
             " images");
  labels_ = empty({size_}, kInt64);
  {
    Hdf5Handle d = file_->open_dataset(options_.labels);
    file_->read_rows(d.get(), options_.labels, 0, size_, kInt64, labels_.data_ptr());
  }

  // The number of classes: from the class names, else num_classes, else the largest label + 1.
  const int64_t* y = labels_.data_ptr<int64_t>();
  const std::optional<int64_t> declared = file_->int_attribute("num_classes");
  if (!info_.class_names.empty()) {
    num_classes_ = static_cast<int64_t>(info_.class_names.size());
    LOOM_CHECK(!declared || *declared == num_classes_, path_, ": attribute num_classes = ", *declared,
               " but there are ", num_classes_, " class_names");
  } else if (declared) {
    num_classes_ = *declared;
  } else {
    // Read from the labels themselves: a label of 2^63 - 1 would overflow the + 1 (and claim
    // more classes than any output layer could have), so the largest is checked first.
    const int64_t largest = *std::max_element(y, y + size_);
    LOOM_CHECK(largest < kMaxClasses, labels_what, ": label ", largest, " implies more than ", kMaxClasses,
               " classes; give the file a num_classes or class_names attribute if it really has that many");
    num_classes_ = largest + 1;
  }
  for (int64_t i = 0; i < size_; ++i)
    LOOM_CHECK(y[i] >= 0 && y[i] < num_classes_, labels_what, ": label ", y[i], " of image ", i,
               " is out of range [0, ", num_classes_, ")",
               info_.class_names.empty() ? "" : " (the file names that many classes)");

  reader_ = std::make_unique<RowReader>(file_, options_.images, kUInt8, options_.chunk_cache_bytes);
  identity_ = "hdf5-images|" + file_identity(path_) + "|" + options_.images + "|" + options_.labels;
}

Example Hdf5ImageDataset::get(int64_t index) const {
  check_index(index, size_, path_);
  Tensor image = sample_tensor({channels_, height_, width_}, kUInt8);
  reader_->read(index, index + 1, image.data_ptr());
  Tensor label = sample_tensor({}, kInt64);
  *label.data_ptr<int64_t>() = labels_.data_ptr<int64_t>()[index];
  return {image, label};
}

Tensor Hdf5ImageDataset::images(int64_t begin, int64_t end) const {
  LOOM_CHECK(0 <= begin && begin <= end && end <= size_, path_, ": images [", begin, ", ", end,
             ") out of range [0, ", size_, ")");
  Tensor out = empty({end - begin, channels_, height_, width_}, kUInt8);
  reader_->read(begin, end, out.data_ptr());
  return out;
}

Tensor Hdf5ImageDataset::images_hyperslab(int64_t begin, int64_t end) const {
  LOOM_CHECK(0 <= begin && begin <= end && end <= size_, path_, ": images [", begin, ", ", end,
             ") out of range [0, ", size_, ")");
  Tensor out = empty({end - begin, channels_, height_, width_}, kUInt8);
  reader_->read_hyperslab(begin, end, out.data_ptr());
  return out;
}

}  // namespace loom::data
