/*
 * Shapes and strides: DimVector (sizes kept inline up to 6 dims, so that creating a tensor
 * does not allocate for its shape), IntArrayRef (a non-owning view that binds to a braced
 * list, a vector or a DimVector), and the shape arithmetic every op shares: element counts,
 * contiguous strides, NumPy broadcasting and negative-dim wrapping.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string_view>
#include <vector>

namespace loom {

class DimVector;

// Non-owning view of int64 values. Like c10::IntArrayRef: bind to temporaries only for the
// duration of a call.
class IntArrayRef {
 public:
  constexpr IntArrayRef() = default;
  constexpr IntArrayRef(const int64_t* data, size_t size) : data_(data), size_(size) {}
  constexpr IntArrayRef(const int64_t& single) : data_(&single), size_(1) {}  // NOLINT
#if defined(__GNUC__) && !defined(__clang__)  // a GCC warning; clang has no such group
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"  // by design: valid for the call it is passed to
#endif
  constexpr IntArrayRef(std::initializer_list<int64_t> list)  // NOLINT
      : data_(list.begin()), size_(list.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}  // NOLINT
  inline IntArrayRef(const DimVector& v);                                            // NOLINT

  constexpr const int64_t* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr const int64_t* begin() const { return data_; }
  constexpr const int64_t* end() const { return data_ + size_; }
  constexpr int64_t operator[](size_t i) const { return data_[i]; }
  constexpr int64_t front() const { return data_[0]; }
  constexpr int64_t back() const { return data_[size_ - 1]; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(IntArrayRef a, IntArrayRef b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

// Growable int64 array with inline room for kInline values.
class DimVector {
 public:
  static constexpr size_t kInline = 6;

  DimVector() = default;
  explicit DimVector(size_t n, int64_t value = 0) { assign(n, value); }
  DimVector(IntArrayRef values) { assign(values); }  // NOLINT: implicit from any int list
  DimVector(std::initializer_list<int64_t> values) { assign(IntArrayRef(values)); }
  DimVector(const std::vector<int64_t>& values) { assign(IntArrayRef(values)); }  // NOLINT
  DimVector(const DimVector& other) { assign(IntArrayRef(other)); }
  DimVector& operator=(const DimVector& other) {
    if (this != &other) assign(IntArrayRef(other));
    return *this;
  }
  DimVector(DimVector&& other) noexcept { *this = std::move(other); }
  DimVector& operator=(DimVector&& other) noexcept {
    if (this == &other) return *this;
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
      size_ = other.size_;
      other.capacity_ = kInline;
      other.size_ = 0;
    } else {
      assign(IntArrayRef(other));
    }
    return *this;
  }

  void assign(size_t n, int64_t value) {
    reserve(n);
    std::fill_n(data(), n, value);
    size_ = n;
  }
  void assign(IntArrayRef values) {
    reserve(values.size());
    if (!values.empty()) std::memmove(data(), values.data(), values.size() * sizeof(int64_t));
    size_ = values.size();
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto fresh = std::make_unique<int64_t[]>(n);
    if (size_) std::memcpy(fresh.get(), data(), size_ * sizeof(int64_t));
    heap_ = std::move(fresh);
    capacity_ = n;
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = n;
  }
  void push_back(int64_t v) {
    if (size_ == capacity_) reserve(capacity_ * 2);
    data()[size_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    push_back(0);
    std::memmove(data() + pos + 1, data() + pos, (size_ - 1 - pos) * sizeof(int64_t));
    data()[pos] = v;
  }
  void erase(size_t pos) {
    std::memmove(data() + pos, data() + pos + 1, (size_ - 1 - pos) * sizeof(int64_t));
    --size_;
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }

  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& back() { return data()[size_ - 1]; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(const DimVector& a, const DimVector& b) { return IntArrayRef(a) == IntArrayRef(b); }

 private:
  int64_t inline_[kInline] = {};
  std::unique_ptr<int64_t[]> heap_;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

inline IntArrayRef::IntArrayRef(const DimVector& v) : data_(v.data()), size_(v.size()) {}

std::ostream& operator<<(std::ostream& os, IntArrayRef values);
inline std::ostream& operator<<(std::ostream& os, const DimVector& values) { return os << IntArrayRef(values); }

// Product of the sizes (1 for a 0-dim shape). Throws on a negative size.
int64_t shape_numel(IntArrayRef sizes);

// Row-major strides for `sizes`.
DimVector contiguous_strides(IntArrayRef sizes);

// NumPy broadcasting of two shapes; `op` names the caller in the error.
DimVector broadcast_shapes(IntArrayRef a, IntArrayRef b, std::string_view op);

// Maps dim in [-ndim, ndim) to [0, ndim); `op` names the caller in the error. For ops that
// insert a dim (unsqueeze, stack) pass ndim + 1.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

}  // namespace loom
