/*
 * safetensors reader and writer. The header is parsed with nlohmann-json's SAX interface into
 * a bounded DOM: that is where duplicate keys are caught (a DOM parser silently keeps one of
 * them, so two readers could disagree about which tensor a name means) and where nesting the
 * format does not have is refused before it can cost memory. Every field is then validated
 * against the size of the data buffer before a single byte of data is touched.
 */
#include "nn/serialize/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_set>
#include <vector>

#include "core/grad_mode.h"
#include "nn/serialize/atomic_file.h"
#include "ops/ops.h"

namespace loom::nn {
namespace {

// The format is little-endian; on a big-endian host every element would need a byte swap.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

using Json = nlohmann::ordered_json;  // ordered: tensors come back in the file's header order

// The safetensors reference implementation refuses larger headers; so do we, which also
// bounds what a hostile file can make the parser allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Deepest nesting in a valid header: top object > entry object > shape / offsets list.
constexpr size_t kMaxJsonDepth = 3;
// Longest list in a valid header (a shape); far above any real tensor's rank.
constexpr size_t kMaxListLength = 64;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeCode {
  std::string_view code;
  DType dtype;
};
constexpr DTypeCode kDTypeCodes[] = {
    {"F64", kFloat64}, {"F32", kFloat32}, {"F16", kFloat16}, {"BF16", kBFloat16}, {"I64", kInt64},
    {"I32", kInt32},   {"I8", kInt8},     {"U8", kUInt8},    {"BOOL", kBool},
};
// Valid safetensors dtypes that Loom has no tensor type for.
constexpr std::string_view kUnsupportedCodes[] = {"I16",     "U16",     "U32",     "U64",
                                                  "F8_E4M3", "F8_E5M2", "F8_E8M0", "C64"};

std::string_view code_of(DType dtype) {
  for (const auto& c : kDTypeCodes)
    if (c.dtype == dtype) return c.code;
  LOOM_FAIL("save_safetensors: dtype ", dtype, " has no safetensors code");
}

// The header as JSON, with duplicate keys and impossible nesting rejected during the parse.
class HeaderSax {
 public:
  bool null() { return place(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return place(Json(v)) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return place(Json(v)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return place(Json(v)) != nullptr; }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return place(Json(v)) != nullptr; }
  bool string(Json::string_t& v) { return place(Json(std::move(v))) != nullptr; }
  bool binary(Json::binary_t&) { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) {
    if (!open(Json::object())) return false;
    keys_.emplace_back();
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    close();
    return true;
  }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_array() {
    close();
    return true;
  }
  bool key(Json::string_t& k) {
    if (!keys_.back().insert(k).second) return fail("duplicate key \"" + k + "\"" + context());
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    return fail(e.what());
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  // " in entry 'name'" when inside an entry, for the error messages.
  std::string context() const { return path_.size() >= 2 ? " in entry '" + path_[1] + "'" : ""; }

  // Adds v where the parse currently is (the root, the open list, or the open object under
  // the last key) and returns where it went; nullptr (with error_ set) when refused.
  Json* place(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      if (parent.size() >= kMaxListLength) {
        fail("a list has more than " + std::to_string(kMaxListLength) + " elements" + context() +
             " (a shape has at most " + std::to_string(kMaxListLength) + " dimensions)");
        return nullptr;
      }
      parent.push_back(std::move(v));
      return &parent.back();
    }
    Json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  // Pointers into the tree stay valid while open: a container only grows while it is the
  // innermost open one, and then nothing below it is on the stack.
  bool open(Json&& container) {
    if (stack_.size() >= kMaxJsonDepth)
      return fail("JSON nested deeper than the format allows" + context() +
                  " (an object of entries whose fields are strings or lists of integers)");
    std::string name = stack_.empty() ? "" : (stack_.back()->is_object() ? key_ : "[]");
    Json* where = place(std::move(container));
    if (where == nullptr) return false;
    stack_.push_back(where);
    path_.push_back(std::move(name));
    return true;
  }
  void close() {
    stack_.pop_back();
    path_.pop_back();
  }

  Json root_;
  std::vector<Json*> stack_;
  std::vector<std::string> path_;  // the key each open container sits under
  std::vector<std::unordered_set<std::string>> keys_;
  std::string key_;
  std::string error_;
};

// One validated header entry.
struct Entry {
  std::string name;
  DType dtype;
  DimVector shape;
  uint64_t begin, end;  // within the data buffer
};

struct Header {
  std::vector<Entry> entries;  // header order
  std::map<std::string, std::string> metadata;
};

std::string json_type(const Json& v) {
  if (v.is_number_unsigned() || v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "floating-point number";
  return v.type_name();
}

// Reads a JSON integer that must be >= 0; false when it is anything else.
bool non_negative_integer(const Json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

// Parses and validates the header against a data buffer of `buffer_size` bytes.
Header parse_header(std::string_view text, uint64_t buffer_size, std::string_view file) {
  const std::string where = "load_safetensors: '" + std::string(file) + "': ";
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{...}\0<anything>" would
  // parse; no JSON text contains one (not even inside a string), and other readers reject it.
  const size_t nul = text.find('\0');
  LOOM_CHECK(nul == std::string_view::npos, where, "the header is not valid JSON: NUL byte at header offset ",
             nul);
  HeaderSax sax;
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                         /*strict=*/true,
                         /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL(where, "the header is not valid JSON: ", e.what());
  }
  LOOM_CHECK(ok, where, "the header is not valid JSON: ", sax.error().empty() ? "parse failed" : sax.error());
  const Json& root = sax.root();
  LOOM_CHECK(root.is_object(), where, "the header must be a JSON object, got ", json_type(root));

  Header header;
  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      LOOM_CHECK(value.is_object(), where, "\"__metadata__\" must be an object of strings, got ",
                 json_type(value));
      for (const auto& [key, text_value] : value.items()) {
        LOOM_CHECK(text_value.is_string(), where, "\"__metadata__\" must map strings to strings; key '", key,
                   "' maps to ", json_type(text_value), ", not a string");
        header.metadata.emplace(key, text_value.get<std::string>());
      }
      continue;
    }
    const std::string tensor = where + "tensor '" + name + "': ";
    LOOM_CHECK(value.is_object(), tensor, "the entry must be an object, got ", json_type(value));
    for (const auto& [field, unused] : value.items()) {
      LOOM_CHECK(field == "dtype" || field == "shape" || field == "data_offsets", tensor,
                 "unexpected field '", field, "' (an entry has exactly dtype, shape and data_offsets)");
    }
    for (const char* field : {"dtype", "shape", "data_offsets"})
      LOOM_CHECK(value.contains(field), tensor, "missing field '", field, "'");

    // dtype
    const Json& dtype_value = value["dtype"];
    LOOM_CHECK(dtype_value.is_string(), tensor, "dtype must be a string, got ", json_type(dtype_value));
    const std::string code = dtype_value.get<std::string>();
    const auto* known = std::find_if(std::begin(kDTypeCodes), std::end(kDTypeCodes),
                                     [&](const DTypeCode& c) { return c.code == code; });
    if (known == std::end(kDTypeCodes)) {
      const bool unsupported = std::find(std::begin(kUnsupportedCodes), std::end(kUnsupportedCodes), code) !=
                               std::end(kUnsupportedCodes);
      LOOM_FAIL(tensor, "dtype '", code, "'",
                unsupported ? " is a safetensors dtype that Loom has no tensor type for"
                            : " is not a safetensors dtype",
                " (Loom reads F64, F32, F16, BF16, I64, I32, I8, U8, BOOL)");
    }
    const DType dtype = known->dtype;

    // shape, and the byte count it implies (checked: a hostile shape must not wrap around)
    const Json& shape_value = value["shape"];
    LOOM_CHECK(shape_value.is_array(), tensor, "shape must be a list of non-negative integers, got ",
               json_type(shape_value));
    DimVector shape;
    uint64_t numel = 1;
    // The product with zeros counted as ones: what a tensor's strides multiply up to. An empty
    // tensor such as [0, 2^40, 2^40] has no bytes to check against the buffer, yet its strides
    // (and a running element count) would overflow int64 all the same.
    uint64_t extent = 1;
    for (const Json& dim_value : shape_value) {
      uint64_t dim = 0;
      LOOM_CHECK(non_negative_integer(dim_value, dim), tensor,
                 "shape must be a list of non-negative integers, got ", shape_value.dump());
      LOOM_CHECK(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), tensor, "shape ",
                 shape_value.dump(), " has a dimension larger than 2^63 - 1");
      LOOM_CHECK(!__builtin_mul_overflow(numel, dim, &numel), tensor, "shape ", shape_value.dump(),
                 ": the element count overflows 64 bits");
      LOOM_CHECK(!__builtin_mul_overflow(extent, std::max<uint64_t>(dim, 1), &extent) &&
                     extent <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                 tensor, "shape ", shape_value.dump(),
                 ": the product of its non-zero dimensions overflows int64 (no tensor has such strides)");
      shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = 0;
    LOOM_CHECK(numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                   !__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(dtype)), &nbytes),
               tensor, "shape ", shape_value.dump(), " of ", code, ": the byte count overflows 64 bits");

    // data_offsets
    const Json& offsets = value["data_offsets"];
    uint64_t begin = 0, end = 0;
    LOOM_CHECK(offsets.is_array() && offsets.size() == 2 && non_negative_integer(offsets[0], begin) &&
                   non_negative_integer(offsets[1], end),
               tensor, "data_offsets must be two non-negative integers [begin, end], got ", offsets.dump());
    LOOM_CHECK(begin <= end, tensor, "data_offsets ", offsets.dump(), ": begin is after end");
    LOOM_CHECK(end <= buffer_size, tensor, "data_offsets ", offsets.dump(),
               ": end is beyond the data buffer of ", buffer_size, " bytes");
    LOOM_CHECK(end - begin == nbytes, tensor, "shape ", shape_value.dump(), " of ", code, " needs ", nbytes,
               " bytes but data_offsets ", offsets.dump(), " span ", end - begin);
    header.entries.push_back({name, dtype, std::move(shape), begin, end});
  }

  // The tensors must tile the buffer exactly: walk them in offset order.
  std::vector<size_t> order(header.entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Entry &x = header.entries[a], &y = header.entries[b];
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (size_t i : order) {
    const Entry& e = header.entries[i];
    LOOM_CHECK(e.begin >= covered, where, "tensors '", previous ? previous->name : "", "' [",
               previous ? previous->begin : 0, ", ", covered, ") and '", e.name, "' [", e.begin, ", ", e.end,
               ") overlap in the data buffer");
    LOOM_CHECK(e.begin == covered, where, "bytes [", covered, ", ", e.begin,
               ") of the data buffer belong to no tensor (the format forbids holes)");
    covered = e.end;
    previous = &e;
  }
  LOOM_CHECK(covered == buffer_size, where, "bytes [", covered, ", ", buffer_size,
             ") at the end of the data buffer belong to no tensor (the format forbids trailing data)");
  return header;
}

// Reads the 8-byte header length and checks it against the file size.
uint64_t header_length(const unsigned char* prefix, uint64_t file_size, std::string_view file) {
  uint64_t n = 0;
  std::memcpy(&n, prefix, sizeof n);  // little-endian host (static_assert above)
  LOOM_CHECK(n <= kMaxHeaderBytes, "load_safetensors: '", file, "': header length ", n,
             " is over the 100 MB limit");
  LOOM_CHECK(n <= file_size - 8, "load_safetensors: '", file, "': header length ", n, " exceeds the ",
             file_size - 8, " bytes that follow the length field");
  return n;
}

void check_bool_bytes(const Tensor& t, const Entry& e, std::string_view file) {
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    // Any other byte is not a valid C++ bool: reading it would be undefined behaviour.
    LOOM_CHECK(p[i] <= 1, "load_safetensors: '", file, "': tensor '", e.name, "': BOOL element ", i,
               " is byte ", static_cast<int>(p[i]), ", expected 0 or 1");
  }
}

// Closes the descriptor when the scope ends.
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes at `offset`, or throws (a file that shrank under us is an error).
void pread_exact(int fd, void* out, uint64_t n, uint64_t offset, const std::filesystem::path& path) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    LOOM_CHECK(got >= 0, "load_safetensors: reading '", path.string(), "' failed: ", std::strerror(errno));
    LOOM_CHECK(got > 0, "load_safetensors: '", path.string(), "' ended early (it shrank while being read)");
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const StateDict& tensors,
                      const std::map<std::string, std::string>& metadata) {
  struct Item {
    const std::string* name;
    Tensor data;  // CPU, contiguous
    uint64_t begin = 0, end = 0;
  };
  std::vector<Item> items;
  items.reserve(tensors.size());
  {
    NoGradGuard no_grad;  // copying to the CPU or to contiguous memory is not part of any graph
    for (const auto& [name, tensor] : tensors) {
      LOOM_CHECK(name != kMetadataKey, "save_safetensors: '", path.string(),
                 "': a tensor may not be named \"", kMetadataKey, "\" (the key is reserved for metadata)");
      LOOM_CHECK(tensor.defined(), "save_safetensors: '", path.string(), "': tensor '", name,
                 "' is undefined");
      Tensor data = tensor.detach();
      if (!data.is_cpu()) data = data.to(kCPU);
      items.push_back({&name, data.contiguous()});
    }
  }

  // Data by decreasing element size, so that each tensor starts at a multiple of its own
  // element size (the buffer itself starts 8-aligned); stable, to keep the order otherwise.
  std::vector<Item*> layout;
  for (Item& item : items) layout.push_back(&item);
  std::stable_sort(layout.begin(), layout.end(), [](const Item* a, const Item* b) {
    return a->data.element_size() > b->data.element_size();
  });
  uint64_t offset = 0;
  for (Item* item : layout) {
    item->begin = offset;
    offset += item->data.nbytes();
    item->end = offset;
  }

  Json root = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    root[std::string(kMetadataKey)] = std::move(meta);
  }
  for (const Item& item : items) {
    Json shape = Json::array();
    for (int64_t d : item.data.sizes()) shape.push_back(d);
    root[*item.name] = Json{{"dtype", code_of(item.data.dtype())},
                            {"shape", std::move(shape)},
                            {"data_offsets", Json::array({item.begin, item.end})}};
  }
  std::string header;
  try {
    header = root.dump();
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL("save_safetensors: '", path.string(),
              "': a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  // Hugging Face pads with spaces (valid JSON whitespace) so the data buffer is 8-aligned.
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');

  write_file_atomically(path, [&](FileSink& sink) {
    const uint64_t n = header.size();
    sink.write(&n, sizeof n);
    sink.write(header);
    for (const Item* item : layout) {
      if (item->data.nbytes() > 0) sink.write(item->data.data_ptr(), item->data.nbytes());
    }
  });
}

SafetensorsFile load_safetensors_from_bytes(std::string_view bytes, std::string_view name_for_errors) {
  LOOM_CHECK(bytes.size() >= 8, "load_safetensors: '", name_for_errors, "': ", bytes.size(),
             " bytes is shorter than the 8-byte header length field");
  const uint64_t n =
      header_length(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), name_for_errors);
  const std::string_view buffer = bytes.substr(8 + n);
  Header header = parse_header(bytes.substr(8, n), buffer.size(), name_for_errors);

  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (const Entry& e : header.entries) {
    Tensor t = empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), buffer.data() + e.begin, e.end - e.begin);
    if (e.dtype == kBool) check_bool_bytes(t, e, name_for_errors);
    out.tensors.insert(e.name, std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  const std::string file = path.string();
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  LOOM_CHECK(guard.fd >= 0, "load_safetensors: cannot open '", file, "': ", std::strerror(errno));
  struct stat st {};
  LOOM_CHECK(::fstat(guard.fd, &st) == 0, "load_safetensors: cannot stat '", file,
             "': ", std::strerror(errno));
  LOOM_CHECK(S_ISREG(st.st_mode), "load_safetensors: '", file, "' is not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  LOOM_CHECK(size >= 8, "load_safetensors: '", file, "': ", size,
             " bytes is shorter than the 8-byte header length field");

  unsigned char prefix[8];
  pread_exact(guard.fd, prefix, 8, 0, path);
  const uint64_t n = header_length(prefix, size, file);
  std::string text(n, '\0');
  pread_exact(guard.fd, text.data(), n, 8, path);
  Header header = parse_header(text, size - 8 - n, file);

  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  for (const Entry& e : header.entries) {
    // Straight into the tensor's storage: no second copy of the data in memory.
    Tensor t = empty(e.shape, e.dtype);
    pread_exact(guard.fd, t.data_ptr(), e.end - e.begin, 8 + n + e.begin, path);
    if (e.dtype == kBool) check_bool_bytes(t, e, file);
    out.tensors.insert(e.name, std::move(t));
  }
  return out;
}

}  // namespace loom::nn
