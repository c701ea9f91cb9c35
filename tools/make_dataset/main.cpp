/*
 * make_dataset: converts the datasets that ship with Debian (and any text file) to Loom's HDF5
 * layout, and describes HDF5 dataset files. A thin main over loom::data (builtin_datasets.h).
 *
 *   make_dataset fashion-mnist --out data/             # fashion-mnist-{train,test}.h5
 *   make_dataset kjv --out data/                       # kjv.h5 (character tokens)
 *   make_dataset text --input book.txt --out book.h5 --name book
 *   make_dataset info data/fashion-mnist-train.h5      # layout, attributes, a loading check
 */
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "data/data.h"

namespace {

std::string default_dir() {
  const char* env = std::getenv("LOOM_DATA_DIR");
  return env && *env ? env : ".";
}

void describe(const std::string& path) {
  using namespace loom::data;
  auto file = Hdf5File::open(path);
  const DatasetInfo info = read_dataset_info(*file);
  std::printf("%s\n", path.c_str());
  for (const std::string& name : file->dataset_names()) {
    if (!file->has_dataset(name)) continue;
    const Hdf5DatasetInfo d = file->describe(name);
    std::string dims, chunks, filters;
    for (int64_t v : d.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(v);
    for (int64_t v : d.chunk_dims) chunks += (chunks.empty() ? "" : ", ") + std::to_string(v);
    for (const auto& f : d.filters) filters += (filters.empty() ? "" : ", ") + f.name;
    std::printf("  /%-10s %-8s [%s]  %s%s\n", name.c_str(), d.type_name().c_str(), dims.c_str(),
                d.chunked ? ("chunks [" + chunks + "]").c_str() : "contiguous",
                filters.empty() ? "" : (", filters: " + filters).c_str());
  }
  for (auto [key, member] : loom::data::kInfoStringFields)
    if (!(info.*member).empty()) std::printf("  %-12s %s\n", key, (info.*member).c_str());
  if (info.version) std::printf("  %-12s %lld\n", "version", static_cast<long long>(info.version));
  if (!info.class_names.empty()) {
    std::string names;
    for (const auto& n : info.class_names) names += (names.empty() ? "" : ", ") + n;
    std::printf("  %-12s %s\n", "class_names", names.c_str());
  }
  if (!info.vocab.empty()) std::printf("  %-12s %zu entries\n", "vocab", info.vocab.size());
  // Open it the way training would, which runs every check on the contents.
  if (file->has_dataset("images")) {
    Hdf5ImageDataset ds(path);
    std::printf("  loads as    %lld images of %lldx%lldx%lld, %lld classes (%s)\n",
                static_cast<long long>(ds.size()), static_cast<long long>(ds.channels()),
                static_cast<long long>(ds.height()), static_cast<long long>(ds.width()),
                static_cast<long long>(ds.num_classes()),
                ds.raw_chunks() ? "raw chunks decoded outside the HDF5 lock" : "read by hyperslab");
  } else if (file->has_dataset("tokens")) {
    Hdf5TokenDataset ds(path, {.block_size = 2});
    (void)ds.tokens(0, ds.num_tokens());  // checks every token against the vocabulary
    std::printf("  loads as    %lld tokens, vocabulary of %lld\n", static_cast<long long>(ds.num_tokens()),
                static_cast<long long>(ds.vocab_size()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom::data;
  CLI::App app{
      "Converts Debian's bundled datasets (and text files) to Loom's HDF5 layout; describes HDF5 files."};
  app.require_subcommand(1);

  std::string out = default_dir(), source = kFashionMnistDir;
  WriteOptions options;
  auto* fm = app.add_subcommand("fashion-mnist",
                                "Fashion-MNIST (dataset-fashion-mnist) -> fashion-mnist-{train,test}.h5");
  fm->add_option("--out", out, "Output directory (default: $LOOM_DATA_DIR or .)");
  fm->add_option("--source", source, "Directory of the IDX files")->capture_default_str();
  fm->add_option("--chunk", options.chunk_rows, "Images per HDF5 chunk")->capture_default_str();
  fm->add_option("--deflate", options.deflate_level, "gzip level 1-9, 0 for none")->capture_default_str();

  std::string bible = "bible", bible_data = "/usr/lib";
  auto* kjv = app.add_subcommand(
      "kjv", "The King James Bible (bible-kjv, bible-kjv-text) -> kjv.h5, character tokens");
  kjv->add_option("--out", out, "Output directory (default: $LOOM_DATA_DIR or .)");
  kjv->add_option("--bible", bible, "The bible(1) program")->capture_default_str();
  kjv->add_option("--bible-data", bible_data, "Where bible.data is")->capture_default_str();

  std::string input, out_file, name = "text";
  auto* text = app.add_subcommand("text", "A UTF-8 text file -> a character-level token dataset");
  text->add_option("--input", input, "The text file")->required();
  text->add_option("--out", out_file, "The HDF5 file to write")->required();
  text->add_option("--name", name, "The dataset's name attribute")->capture_default_str();

  std::vector<std::string> files;
  auto* info = app.add_subcommand("info", "Describe HDF5 dataset files and check that they load");
  info->add_option("files", files, "HDF5 files")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (fm->parsed()) {
      for (const char* split : {"train", "test"}) {
        const std::string path =
            (std::filesystem::path(out) / ("fashion-mnist-" + std::string(split) + ".h5")).string();
        convert_fashion_mnist(split, path, options, source);
        std::printf("wrote %s\n", path.c_str());
      }
    } else if (kjv->parsed()) {
      const std::string path = (std::filesystem::path(out) / "kjv.h5").string();
      convert_kjv(path, bible, bible_data);
      std::printf("wrote %s\n", path.c_str());
    } else if (text->parsed()) {
      convert_text_file(input, out_file, name);
      std::printf("wrote %s\n", out_file.c_str());
    } else {
      for (const auto& f : files) describe(f);
    }
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "make_dataset: %s\n", e.what());
    return 1;
  }
  return 0;
}
