/*
 * libFuzzer target: nn::load_safetensors_from_bytes on arbitrary bytes (docs/fuzzing.md).
 *
 * Every tensor that loads is read end to end and reduced, so a header that describes more
 * bytes, other strides or another element count than the loader allocated shows up as an
 * ASan or UBSan report here rather than in whoever uses the weights later.
 */
#include <cstdint>

#include "fuzz_util.h"
#include "nn/serialize/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom;
  try {
    nn::SafetensorsFile file = nn::load_safetensors_from_bytes(fuzz::as_chars(data, size), "fuzz");
    double total = 0;
    for (const auto& [name, tensor] : file.tensors) {
      // The loader's promise: CPU, contiguous, exactly numel x element size bytes of its own.
      if (!tensor.is_cpu() || !tensor.is_contiguous()) {
        std::fprintf(stderr, "fuzz_safetensors: tensor '%s' is not a contiguous CPU tensor\n", name.c_str());
        std::abort();
      }
      total += fuzz::touch(tensor);
    }
    for (const auto& [key, value] : file.metadata) total += static_cast<double>(key.size() + value.size());
    volatile double sink = total;
    (void)sink;
  } catch (const Error&) {
    // The loader's answer to bad input.
  }
  return 0;
}
