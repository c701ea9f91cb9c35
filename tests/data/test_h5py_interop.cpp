/*
 * Files written by someone else load too: h5py (python3-h5py) writes image and token
 * datasets in every way a user might (gzip with and without shuffle, the uncompressed defaults,
 * contiguous, fletcher32 checksums, rank-3 images, big-endian or 16-bit labels, fixed-length
 * string attributes), and Loom reads the values h5py wrote. The other way round, h5py reads
 * what Loom writes, attributes included.
 */
#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;
using test::pixel;

namespace {

// The same pixel pattern as data_test_util.h's pixel(), in numpy.
const char* kPrelude = R"(
import h5py, numpy as np, sys
def images(n, c, h, w):
    i, k, y, x = np.meshgrid(np.arange(n), np.arange(c), np.arange(h), np.arange(w), indexing='ij')
    return ((i * 7 + k * 31 + y * 5 + x * 3) % 251).astype(np.uint8)
)";

void check_pixels(const Hdf5ImageDataset& ds, int64_t i) {
  Tensor img = ds.get(i).data;
  const uint8_t* p = img.data_ptr<uint8_t>();
  int64_t bad = 0;
  for (int64_t c = 0; c < ds.channels(); ++c)
    for (int64_t y = 0; y < ds.height(); ++y)
      for (int64_t x = 0; x < ds.width(); ++x) bad += *p++ != pixel(i, c, y, x);
  CHECK_MESSAGE(bad == 0, "image ", i, ": ", bad, " pixels differ");
}

}  // namespace

TEST_CASE("image files written by h5py load, whatever their storage") {
  test::ScratchDir dir("h5py_images");
  const std::string script = std::string(kPrelude) + R"(
d = ')" + dir.path().string() +
                             R"('
x = images(300, 3, 6, 5)
y = (np.arange(300) % 4)
names = ['cat', 'dog', 'emu', 'fox']
def write(name, **kw):
    with h5py.File(f'{d}/{name}.h5', 'w') as f:
        f.create_dataset('images', data=x, **kw)
        f.create_dataset('labels', data=y.astype(np.int64))
        f.attrs['class_names'] = names
        f.attrs['name'] = 'h5py-' + name
write('gzip', chunks=(64, 3, 6, 5), compression='gzip', compression_opts=4)
write('gzip_shuffle', chunks=(50, 3, 6, 5), compression='gzip', shuffle=True)
write('contiguous')
write('fletcher32', chunks=(64, 3, 6, 5), fletcher32=True)
write('chunked_inner', chunks=(10, 1, 3, 5), compression='gzip')
with h5py.File(f'{d}/rank3_be.h5', 'w') as f:
    f.create_dataset('images', data=x[:, 0], chunks=(100, 6, 5), compression='gzip')
    f.create_dataset('labels', data=y.astype('>i2'))
    f.attrs['class_names'] = np.array([b'cat', b'dog', b'emu', b'fox'], dtype='S3')
    f.attrs['num_classes'] = 4
)";
  REQUIRE(test::run_python(dir, script) == 0);
  struct Case {
    const char* file;
    bool raw;  // decoded outside the HDF5 lock
    int64_t channels;
  };
  for (const Case& c :
       {Case{"gzip", true, 3}, Case{"gzip_shuffle", true, 3}, Case{"contiguous", false, 3},
        Case{"fletcher32", false, 3}, Case{"chunked_inner", false, 3}, Case{"rank3_be", true, 1}}) {
    CAPTURE(c.file);
    Hdf5ImageDataset ds(dir.file(std::string(c.file) + ".h5"));
    CHECK(ds.size() == 300);
    CHECK(ds.channels() == c.channels);
    CHECK(ds.raw_chunks() == c.raw);
    CHECK(ds.info().class_names == std::vector<std::string>{"cat", "dog", "emu", "fox"});
    CHECK(ds.num_classes() == 4);
    CHECK(ds.info().layout_version == 0);  // not written by Loom
    for (int64_t i : {0, 49, 50, 63, 64, 150, 299}) {
      check_pixels(ds, i);
      CHECK(ds.get(i).target.item<int64_t>() == i % 4);
    }
    CHECK(test::values_equal(ds.images(40, 140), ds.images_hyperslab(40, 140)));
  }
  CHECK(Hdf5ImageDataset(dir.file("gzip.h5")).info().name == "h5py-gzip");
}

TEST_CASE("token files written by h5py load, with a vocabulary of strings") {
  test::ScratchDir dir("h5py_tokens");
  const std::string script = std::string(kPrelude) + R"(
d = ')" + dir.path().string() +
                             R"('
text = 'to be or not to be, that is the question. ' * 50
vocab = sorted(set(text))
ids = np.array([vocab.index(ch) for ch in text], dtype=np.int32)
with h5py.File(f'{d}/i32.h5', 'w') as f:
    f.create_dataset('tokens', data=ids, chunks=(333,), compression='gzip')
    f.attrs['vocab'] = vocab
with h5py.File(f'{d}/u16.h5', 'w') as f:
    f.create_dataset('tokens', data=ids.astype(np.uint16))
    f.attrs['vocab_size'] = len(vocab)
open(f'{d}/text.txt', 'w').write(text)
)";
  REQUIRE(test::run_python(dir, script) == 0);
  std::string text;
  for (int i = 0; i < 50; ++i) text += "to be or not to be, that is the question. ";
  Hdf5TokenDataset a(dir.file("i32.h5"), {.block_size = 64, .stride = 32});
  CHECK(a.raw_chunks());
  CHECK(a.decode(a.tokens(0, a.num_tokens())) == text);
  CHECK(a.decode(a.get(3).data) == text.substr(96, 64));
  Hdf5TokenDataset b(dir.file("u16.h5"), {.block_size = 64});
  CHECK(b.vocab_size() == a.vocab_size());
  CHECK(test::values_equal(b.tokens(100, 900), a.tokens(100, 900)));
}

TEST_CASE("h5py reads what Loom writes, attributes included") {
  test::ScratchDir dir("loom_to_h5py");
  test::write_synthetic(dir, "loom.h5", 70, 2, 3, 4, {.chunk_rows = 32, .deflate_level = 3});
  CharTokens chars = tokenize_chars("héllo wörld", "greeting");
  DatasetInfo info;
  info.name = "greeting";
  info.vocab = chars.vocab;
  const auto n = static_cast<int64_t>(chars.tokens.size());
  write_token_dataset(dir.file("text.h5"), from_blob(chars.tokens.data(), {n}, kInt32), info);
  const std::string script = std::string(kPrelude) + R"(
d = ')" + dir.path().string() +
                             R"('
with h5py.File(f'{d}/loom.h5', 'r') as f:
    assert f['images'].dtype == np.uint8 and f['images'].shape == (70, 2, 3, 4), f['images']
    assert f['images'].compression == 'gzip' and f['images'].chunks == (32, 2, 3, 4)
    assert (f['images'][:] == images(70, 2, 3, 4)).all()
    assert (f['labels'][:] == np.arange(70) % 10).all()
    assert list(f.attrs['class_names']) == ['c%d' % i for i in range(10)], f.attrs['class_names']
    assert f.attrs['name'] == 'synthetic' and f.attrs['kind'] == 'images' and f.attrs['loom_layout'] == 1
with h5py.File(f'{d}/text.h5', 'r') as f:
    vocab = list(f.attrs['vocab'])
    assert ''.join(vocab[t] for t in f['tokens'][:]) == 'héllo wörld', vocab
print('h5py checks passed')
)";
  CHECK(test::run_python(dir, script) == 0);
}
