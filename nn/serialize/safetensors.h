/*
 * safetensors files (https://huggingface.co/docs/safetensors): the format Hugging Face and
 * PyTorch users exchange weights in, and the one Loom's checkpoints are made of.
 *
 *   [8 bytes: N, little-endian u64][N bytes: JSON header][data buffer]
 *   header = {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *             "__metadata__": {"key": "value", ...}}          (metadata is optional)
 *
 * Offsets are relative to the start of the data buffer; the tensors tile it exactly (no
 * overlaps, no holes, nothing after the last one). Data is little-endian, row-major.
 *
 * Loading validates everything before trusting any number in the header, so a truncated,
 * corrupted or malicious file produces a loom::Error that names the file, the tensor and the
 * field, never a crash or an out-of-bounds read (docs/checkpoints.md lists the checks).
 */
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "nn/state_dict.h"

namespace loom::nn {

// What a safetensors file holds: tensors in header order (CPU, contiguous, each with its own
// storage) and the string -> string "__metadata__" table.
struct SafetensorsFile {
  StateDict tensors;
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` (any shape, including 0-dim and empty; any Loom dtype) and `metadata` to
// `path`, atomically (write_file_atomically: a crash leaves the old file or the new one).
// Non-contiguous tensors are written in row-major order; CUDA tensors are copied to the CPU.
// The header keeps the StateDict's order and is padded with spaces so that the data buffer
// starts 8-byte aligned; the data is laid out by decreasing element size so that every
// tensor is aligned to its element size (zero-copy readers such as safetensors' mmap rely on it).
// Throws loom::Error for an undefined tensor, a tensor named "__metadata__", a name or
// metadata string that is not valid UTF-8, or an I/O failure (naming the path).
void save_safetensors(const std::filesystem::path& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a safetensors file. Tensor data is read straight into each tensor's
// storage, so peak memory is the size of the tensors plus the header.
// Throws loom::Error naming the file (and the tensor and field where there is one) for any
// I/O failure or invalid content; see load_safetensors_from_bytes for the checks.
SafetensorsFile load_safetensors(const std::filesystem::path& path);

// Parses a whole safetensors file held in memory; `name_for_errors` is what errors call it.
// Safe on any input: every length, offset, shape and dtype is checked before use, and bad
// input throws loom::Error — file shorter than 8 bytes; header length beyond the file or over
// 100 MB; header not a JSON object (or with duplicate keys, or nested deeper than the format
// allows); an entry that is not an object, lacks or adds fields; an unknown or unsupported
// dtype; a shape that is not a list of non-negative integers, or whose non-zero dimensions
// multiply past int64 (even when another is 0); numel × element size that overflows or
// differs from end - begin; data_offsets that are not two non-negative integers
// with begin <= end <= buffer size; overlapping tensors; bytes of the buffer that no tensor
// covers; metadata that is not string -> string; a BOOL byte other than 0 or 1.
SafetensorsFile load_safetensors_from_bytes(std::string_view bytes,
                                            std::string_view name_for_errors = "<memory>");

}  // namespace loom::nn
