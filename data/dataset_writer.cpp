/* Atomic writers for image and token datasets (see dataset_writer.h). */
#include "data/dataset_writer.h"

#include <filesystem>

#include "data/file_util.h"
#include "ops/ops.h"

namespace loom::data {

namespace {

void make_parent_dirs(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  LOOM_CHECK(!ec, path, ": cannot create directory ", dir.string(), ": ", ec.message());
}

}  // namespace

void write_image_dataset(const std::string& path, const Tensor& images, const Tensor& labels,
                         DatasetInfo info, const WriteOptions& options) {
  LOOM_CHECK(images.dtype() == kUInt8 && images.dim() == 4, path, ": images must be uint8 [N, C, H, W], got ",
             images.dtype(), " ", images.sizes());
  LOOM_CHECK(labels.dim() == 1 && labels.size(0) == images.size(0) && is_integral(labels.dtype()), path,
             ": labels must be integers [", images.size(0), "], got ", labels.dtype(), " ", labels.sizes());
  const Tensor x = images.contiguous().to(kCPU);
  const Tensor y64 = labels.to(kCPU).to(kInt64).contiguous();
  const std::vector<int64_t> y = y64.to_vector<int64_t>();
  int64_t max_label = 0;
  for (int64_t v : y) {
    LOOM_CHECK(v >= 0, path, ": negative label ", v);
    max_label = std::max(max_label, v);
  }
  if (!info.class_names.empty())
    LOOM_CHECK(max_label < static_cast<int64_t>(info.class_names.size()), path, ": label ", max_label,
               " but only ", info.class_names.size(), " class names");
  const Tensor y_stored = max_label < 256 ? y64.to(kUInt8) : y64.to(kInt32);
  info.kind = "images";
  make_parent_dirs(path);
  write_file_atomically(path, [&](const std::string& tmp) {
    auto file = Hdf5File::create(tmp);
    file->write_dataset("images", kUInt8, x.sizes().vec(), x.data_ptr(), options.chunk_rows,
                        options.deflate_level);
    file->write_dataset("labels", y_stored.dtype(), y_stored.sizes().vec(), y_stored.data_ptr());
    write_dataset_info(*file, info);
    file->close();
  });
}

void write_token_dataset(const std::string& path, const Tensor& tokens, DatasetInfo info,
                         const WriteOptions& options) {
  LOOM_CHECK(tokens.dim() == 1 && is_integral(tokens.dtype()), path, ": tokens must be integers [L], got ",
             tokens.dtype(), " ", tokens.sizes());
  LOOM_CHECK(!info.vocab.empty(), path, ": a token dataset needs its vocabulary (info.vocab)");
  const auto vocab = static_cast<int64_t>(info.vocab.size());
  const Tensor t64 = tokens.to(kCPU).to(kInt64).contiguous();
  const int64_t* t = t64.data_ptr<int64_t>();
  for (int64_t i = 0; i < t64.numel(); ++i)
    LOOM_CHECK(t[i] >= 0 && t[i] < vocab, path, ": token ", t[i], " at position ", i,
               " is outside the vocabulary [0, ", vocab, ")");
  const Tensor stored = vocab <= 256 ? t64.to(kUInt8) : t64.to(kInt32);
  info.kind = "tokens";
  make_parent_dirs(path);
  write_file_atomically(path, [&](const std::string& tmp) {
    auto file = Hdf5File::create(tmp);
    file->write_dataset("tokens", stored.dtype(), stored.sizes().vec(), stored.data_ptr(), options.chunk_rows,
                        options.deflate_level);
    write_dataset_info(*file, info);
    file->close();
  });
}

}  // namespace loom::data
