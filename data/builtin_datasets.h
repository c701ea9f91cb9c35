/*
 * The real datasets that ship with Debian, converted to Loom's HDF5 layout:
 *   Fashion-MNIST (package dataset-fashion-mnist, MIT): 60,000 train + 10,000 test images of
 *     28x28 clothes in 10 classes, from /usr/share/datasets/fashion-mnist;
 *   the King James Bible (packages bible-kjv + bible-kjv-text, public domain): about 4.3 MB of
 *     text, one verse per line, as character tokens.
 *
 * convert_* write a file; *_hdf5 return the path of an up-to-date conversion in a directory,
 * converting first when it is missing or was written by an older converter.
 */
#pragma once

#include <string>
#include <vector>

#include "data/dataset_writer.h"

namespace loom::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Bumped whenever a converter's output changes, so old conversions are redone.
inline constexpr int64_t kFashionMnistVersion = 1;
inline constexpr int64_t kKjvVersion = 1;

// Fashion-MNIST's class names, in label order.
const std::vector<std::string>& fashion_mnist_classes();

// Converts split "train" or "test" of Fashion-MNIST (IDX files in source_dir) to out_path.
// Throws loom::Error saying to install dataset-fashion-mnist when the files are missing.
void convert_fashion_mnist(const std::string& split, const std::string& out_path,
                           const WriteOptions& options = {},
                           const std::string& source_dir = kFashionMnistDir);

// "<dir>/fashion-mnist-<split>.h5" (with "-chunk<N>-deflate<L>" before ".h5" for options other
// than the defaults), converted if needed.
std::string fashion_mnist_hdf5(const std::string& split, const std::string& dir,
                               const WriteOptions& options = {},
                               const std::string& source_dir = kFashionMnistDir);

// Converts the King James Bible (via kjv_text) to a token dataset at out_path.
void convert_kjv(const std::string& out_path, const std::string& bible = "bible",
                 const std::string& data_dir = "/usr/lib");

// "<dir>/kjv.h5", converted if needed.
std::string kjv_hdf5(const std::string& dir, const std::string& bible = "bible",
                     const std::string& data_dir = "/usr/lib");

// Converts any UTF-8 text file to a character-level token dataset.
void convert_text_file(const std::string& text_path, const std::string& out_path, const std::string& name);

}  // namespace loom::data
