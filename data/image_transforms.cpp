/* Normalize, RandomCrop and RandomHorizontalFlip as loops over raw memory (see image_transforms.h). */
#include "data/image_transforms.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "data/sample_memory.h"
#include "ops/ops.h"

namespace loom::data {

namespace {

std::string list(const std::vector<float>& v) {
  std::ostringstream os;
  os.precision(9);
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

void check_image(const Tensor& x, const char* who) {
  LOOM_CHECK(x.defined(), who, ": example has no data");
  LOOM_CHECK(x.dim() >= 2, who, ": expected an image [..., H, W], got shape ", x.sizes());
  LOOM_CHECK(x.is_cpu(), who, ": expected a CPU tensor, got one on ", x.device());
  LOOM_CHECK(x.size(-1) > 0 && x.size(-2) > 0, who, ": image of shape ", x.sizes(), " is empty");
}

// The number of H x W planes of an image tensor.
int64_t planes(const Tensor& x) {
  return x.numel() / (x.size(-1) * x.size(-2));
}

}  // namespace

// ---- Normalize -------------------------------------------------------------------------------

Normalize::Normalize(std::vector<float> mean, std::vector<float> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  LOOM_CHECK(!mean_.empty() && mean_.size() == std_.size(),
             "Normalize: mean and std need the same, non-zero, length; got ", mean_.size(), " and ",
             std_.size());
  for (float s : std_) LOOM_CHECK(s != 0.0f, "Normalize: std ", list(std_), " has a zero");
}

Example Normalize::apply(const Example& example, SampleRng&) const {
  const Tensor x = example.data.contiguous();
  check_image(x, "Normalize");
  const int64_t channels = x.dim() >= 3 ? x.size(-3) : 1;
  LOOM_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == channels, "Normalize: ", mean_.size(),
             " means for an image of ", channels, " channels (shape ", x.sizes(), ")");
  const int64_t plane = x.size(-1) * x.size(-2), n_planes = planes(x);
  Tensor out = sample_tensor(x.sizes(), kFloat32);
  float* dst = out.data_ptr<float>();
  if (x.dtype() == kUInt8) {
    const uint8_t* src = x.data_ptr<uint8_t>();
    for (int64_t p = 0; p < n_planes; ++p) {
      const size_t c = mean_.size() == 1 ? 0 : static_cast<size_t>(p % channels);
      const float m = mean_[c], s = std_[c];
      // Exactly x.float() / 255 then (x - mean) / std, as PyTorch computes it; divisions, not
      // multiplications by reciprocals, so the loop vectorises without changing a bit.
      const uint8_t* in = src + p * plane;
      float* o = dst + p * plane;
      for (int64_t i = 0; i < plane; ++i) o[i] = (static_cast<float>(in[i]) / 255.0f - m) / s;
    }
  } else {
    const Tensor xf = x.to(kFloat32);
    const float* src = xf.data_ptr<float>();
    for (int64_t p = 0; p < n_planes; ++p) {
      const size_t c = mean_.size() == 1 ? 0 : static_cast<size_t>(p % channels);
      const float m = mean_[c], s = std_[c];
      for (int64_t i = 0; i < plane; ++i) dst[p * plane + i] = (src[p * plane + i] - m) / s;
    }
  }
  return {out, example.target};
}

std::string Normalize::description() const {
  return "Normalize(mean=" + list(mean_) + ", std=" + list(std_) + ")";
}

// ---- RandomCrop ------------------------------------------------------------------------------

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  LOOM_CHECK(height > 0 && width > 0 && padding >= 0, "RandomCrop: size ", height, "x", width,
             " and padding ", padding, " must be positive (padding >= 0)");
}

Example RandomCrop::apply(const Example& example, SampleRng& rng) const {
  const Tensor x = example.data.contiguous();
  check_image(x, "RandomCrop");
  const int64_t h = x.size(-2), w = x.size(-1);
  LOOM_CHECK(h + 2 * padding_ >= height_ && w + 2 * padding_ >= width_, "RandomCrop: cannot cut ", height_,
             "x", width_, " from an image of ", h, "x", w, " padded by ", padding_);
  const int64_t dy = rng.randint(0, h + 2 * padding_ - height_ + 1) - padding_;
  const int64_t dx = rng.randint(0, w + 2 * padding_ - width_ + 1) - padding_;

  DimVector sizes(x.sizes());
  sizes[sizes.size() - 2] = height_;
  sizes[sizes.size() - 1] = width_;
  Tensor out = sample_tensor(sizes, x.dtype());
  const size_t es = x.element_size();
  const auto* src = static_cast<const uint8_t*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  // Output (y, x) reads input (y + dy, x + dx); what falls outside is padding (zeros).
  const int64_t x0 = std::clamp<int64_t>(-dx, 0, width_), x1 = std::clamp<int64_t>(w - dx, 0, width_);
  const int64_t y0 = std::clamp<int64_t>(-dy, 0, height_), y1 = std::clamp<int64_t>(h - dy, 0, height_);
  if (x0 > 0 || x1 < width_ || y0 > 0 || y1 < height_) std::memset(dst, 0, out.nbytes());
  if (x1 > x0) {
    const size_t row_bytes = static_cast<size_t>(x1 - x0) * es;
    for (int64_t p = 0, n = planes(x); p < n; ++p)
      for (int64_t y = y0; y < y1; ++y)
        std::memcpy(dst + static_cast<size_t>((p * height_ + y) * width_ + x0) * es,
                    src + static_cast<size_t>((p * h + y + dy) * w + x0 + dx) * es, row_bytes);
  }
  return {out, example.target};
}

std::string RandomCrop::description() const {
  return "RandomCrop(" + std::to_string(height_) + "x" + std::to_string(width_) +
         ", padding=" + std::to_string(padding_) + ")";
}

// ---- RandomHorizontalFlip ----------------------------------------------------------------------

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: probability ", p, " is not in [0, 1]");
}

Example RandomHorizontalFlip::apply(const Example& example, SampleRng& rng) const {
  check_image(example.data, "RandomHorizontalFlip");
  if (!rng.bernoulli(p_)) return example;
  const Tensor x = example.data.contiguous();
  Tensor out = sample_tensor(x.sizes(), x.dtype());
  const int64_t w = x.size(-1), rows = x.numel() / w;
  const size_t es = x.element_size();
  const auto* src = static_cast<const uint8_t*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  auto mirror = [&](auto tag) {
    using T = decltype(tag);
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    // Index loops rather than std::reverse_copy: GCC vectorises these (a byte permute per row).
    for (int64_t r = 0; r < rows; ++r) {
      const T* in = s + r * w;
      T* o = d + r * w;
      for (int64_t i = 0; i < w; ++i) o[i] = in[w - 1 - i];
    }
  };
  switch (es) {  // typed copies: a byte image row is one vector shuffle, not w calls to memcpy
    case 1:
      mirror(uint8_t{});
      break;
    case 2:
      mirror(uint16_t{});
      break;
    case 4:
      mirror(uint32_t{});
      break;
    case 8:
      mirror(uint64_t{});
      break;
    default:
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < w; ++i)
          std::memcpy(dst + static_cast<size_t>(r * w + i) * es,
                      src + static_cast<size_t>(r * w + w - 1 - i) * es, es);
  }
  return {out, example.target};
}

std::string RandomHorizontalFlip::description() const {
  std::ostringstream os;
  os << "RandomHorizontalFlip(p=" << p_ << ")";
  return os.str();
}

}  // namespace loom::data
