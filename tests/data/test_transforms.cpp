/*
 * Transforms: values checked against the definitions (Normalize against PyTorch's
 * arithmetic, RandomCrop against pad-then-slice with tensor ops, the flip against flip()),
 * the distribution of crop offsets and flips, determinism per (seed, epoch, index), token
 * windows, Compose, and MapDataset's refusal of random transforms.
 */
#include <map>
#include <set>

#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;

namespace {

Tensor image_u8(int64_t c, int64_t h, int64_t w, uint64_t seed) {
  Generator g(seed);
  return randint(0, 256, {c, h, w}, kInt64, &g).to(kUInt8);
}

Example apply(const Transform& t, const Tensor& x, uint64_t seed = 0, int64_t epoch = 0, int64_t index = 0) {
  SampleRng rng(seed, epoch, index);
  return t.apply({x, scalar_tensor(7, kInt64)}, rng);
}

}  // namespace

TEST_CASE("Normalize maps bytes through x / 255 then (x - mean) / std, per channel, in float32") {
  Tensor x = image_u8(3, 4, 5, 1);
  Normalize n({0.5f, 0.25f, 0.125f}, {0.2f, 0.4f, 0.8f});
  Example e = apply(n, x);
  REQUIRE(e.data.dtype() == kFloat32);
  REQUIRE(e.data.sizes() == IntArrayRef{3, 4, 5});
  CHECK(e.target.item<int64_t>() == 7);
  const std::vector<float> mean = {0.5f, 0.25f, 0.125f}, stdev = {0.2f, 0.4f, 0.8f};
  auto in = x.to_vector<int64_t>();
  auto out = e.data.to_vector<float>();
  int64_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t c = i / 20;
    const float expected = (static_cast<float>(in[i]) / 255.0f - mean[c]) / stdev[c];
    bad += out[i] != expected;  // bit-exact: the same float operations as PyTorch's
  }
  CHECK(bad == 0);
  // Float input is not rescaled; one mean/std applies to every channel.
  Example f = apply(Normalize({1.0f}, {2.0f}), tensor<float>({3.0f, 5.0f, 7.0f, 9.0f}, {1, 2, 2}));
  CHECK(f.data.to_vector<float>() == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  CHECK(test::contains_all(test::error_of([] {
                             apply(Normalize({0.f, 0.f}, {1.f, 1.f}), zeros({3, 2, 2}));
                           }),
                           {"Normalize", "2 means", "3 channels"}));
  CHECK_THROWS_AS(Normalize({0.5f}, {0.0f}), Error);
}

TEST_CASE("RandomCrop equals padding with zeros then slicing at the drawn offset") {
  Tensor x = image_u8(2, 9, 7, 2);
  RandomCrop crop(9, 7, 3);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int64_t index = 0; index < 300; ++index) {
    Example e = apply(crop, x, 11, 0, index);
    // Recover the offsets the transform drew, from the same stream.
    SampleRng rng(11, 0, index);
    const int64_t dy = rng.randint(0, 7), dx = rng.randint(0, 7);
    seen.insert({dy, dx});
    Tensor padded = pad(x.to(kInt64), {3, 3, 3, 3});
    Tensor expected = padded.slice(1, dy, dy + 9).slice(2, dx, dx + 7);
    REQUIRE(e.data.dtype() == kUInt8);
    CHECK(e.data.to_vector<int64_t>() == expected.to_vector<int64_t>());
  }
  CHECK(seen.size() == 49);  // every offset in 0..6 x 0..6 occurs
  // A smaller crop of a float image, and an impossible one.
  Example small = apply(RandomCrop(2, 3, 0), arange(20, kFloat32).view({1, 4, 5}));
  CHECK(small.data.sizes() == IntArrayRef{1, 2, 3});
  CHECK(test::contains_all(test::error_of([] {
                             apply(RandomCrop(10, 10, 1), zeros({1, 4, 4}));
                           }),
                           {"RandomCrop", "10x10", "4x4"}));
}

TEST_CASE("RandomHorizontalFlip mirrors the last dimension about half of the time") {
  Tensor x = image_u8(3, 4, 6, 3);
  RandomHorizontalFlip flip;
  int flipped = 0;
  for (int64_t index = 0; index < 1000; ++index) {
    Example e = apply(flip, x, 5, 2, index);
    if (e.data.is_same(x)) continue;  // unchanged: the input itself
    ++flipped;
    CHECK(e.data.to_vector<int64_t>() == x.flip({2}).to_vector<int64_t>());
  }
  CHECK(flipped > 440);
  CHECK(flipped < 560);
  CHECK(apply(RandomHorizontalFlip(1.0), x).data.to_vector<int64_t>() == x.flip({2}).to_vector<int64_t>());
  CHECK(apply(RandomHorizontalFlip(0.0), x).data.is_same(x));
  // float32 images flip too.
  Tensor f = randn({2, 3, 5});
  CHECK(apply(RandomHorizontalFlip(1.0), f).data.to_vector<float>() == f.flip({2}).to_vector<float>());
}

TEST_CASE("augmentation is a function of (seed, epoch, index) alone") {
  Tensor x = image_u8(1, 28, 28, 4);
  Compose augment{std::make_shared<RandomCrop>(28, 28, 2), std::make_shared<RandomHorizontalFlip>(),
                  std::make_shared<Normalize>(std::vector<float>{0.286f}, std::vector<float>{0.353f})};
  CHECK(augment.is_random());
  CHECK(augment.description() ==
        "Compose(RandomCrop(28x28, padding=2), RandomHorizontalFlip(p=0.5), Normalize(mean=[0.286000013], "
        "std=[0.352999985]))");
  auto out = [&](uint64_t seed, int64_t epoch, int64_t index) {
    return apply(augment, x, seed, epoch, index).data.to_vector<float>();
  };
  CHECK(out(1, 0, 5) == out(1, 0, 5));
  // Changing any of the three changes the draw (with overwhelming probability over 25 offsets
  // x 2 flips; these particular values are checked to differ).
  int differ = 0;
  for (int64_t k = 0; k < 20; ++k) {
    differ += out(1, 0, k) != out(2, 0, k);
    differ += out(1, 0, k) != out(1, 1, k);
    differ += out(1, 0, k) != out(1, 0, k + 1000);
  }
  CHECK(differ >= 50);
}

TEST_CASE("RandomTokenWindow cuts input and next-token target from a block") {
  Tensor block = arange(100, 120);  // int64 tokens 100..119
  RandomTokenWindow window(8);
  std::set<int64_t> starts;
  for (int64_t index = 0; index < 500; ++index) {
    Example e = apply(window, block, 3, 0, index);
    auto in = e.data.to_vector<int64_t>(), tgt = e.target.to_vector<int64_t>();
    REQUIRE(in.size() == 8);
    const int64_t start = in[0] - 100;
    starts.insert(start);
    for (int64_t t = 0; t < 8; ++t) {
      CHECK(in[static_cast<size_t>(t)] == 100 + start + t);
      CHECK(tgt[static_cast<size_t>(t)] == 100 + start + t + 1);
    }
  }
  CHECK(starts.size() == 12);  // every start in 0..11 (20 - 8 - 1)
  CHECK(*starts.rbegin() == 11);
  // A block of exactly T + 1 tokens gives the one window.
  CHECK(apply(RandomTokenWindow(4), arange(5)).data.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(test::contains_all(test::error_of([] { apply(RandomTokenWindow(8), arange(8)); }),
                           {"RandomTokenWindow", "8 tokens", "window of 8 + 1"}));
}

TEST_CASE("MapDataset applies deterministic transforms and refuses random ones") {
  auto source =
      std::make_shared<TensorDataset>(arange(24).view({2, 1, 3, 4}).to(kUInt8), tensor<int64_t>({0, 1}));
  auto normalize = std::make_shared<Normalize>(std::vector<float>{0.0f}, std::vector<float>{1.0f});
  MapDataset mapped(source, normalize);
  CHECK(mapped.size() == 2);
  Example e = mapped.get(1);
  CHECK(e.data.dtype() == kFloat32);
  CHECK(e.data.to_vector<float>()[0] == 12.0f / 255.0f);
  CHECK(e.target.item<int64_t>() == 1);
  CHECK(mapped.identity().empty());  // an in-memory source has no identity to extend
  CHECK(test::contains_all(
      test::error_of([&] { MapDataset m(source, std::make_shared<RandomHorizontalFlip>()); }),
      {"MapDataset", "RandomHorizontalFlip", "is random"}));
}
