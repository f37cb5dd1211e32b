/* gert: CANN 8.5 exe_graph/runtime/shape.h (METADEF) -- gert::Shape, a fixed-capacity shape of at
 * most 25 dims.  Header-only in CANN too; the layout (dim count, 25 dims, 40 reserved bytes) is
 * CANN's, so a gert::Shape is the same object on both sides of the API. */
#ifndef METADEF_CXX_INC_EXE_GRAPH_SHAPE_H_
#define METADEF_CXX_INC_EXE_GRAPH_SHAPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

namespace gert {
struct Shape {
 public:
  static constexpr size_t kMaxDimNum = 25;
  static constexpr int64_t kInvalidDimValue = std::numeric_limits<int64_t>::min();

 public:
  /* A scalar: no dims. */
  Shape() : dim_num_(0), dims_{0} { (void)memset(reserved_, 0, sizeof(reserved_)); }

  /* Shape({8, 3, 224, 224}).  More than kMaxDimNum dims leave the shape a scalar. */
  Shape(const std::initializer_list<int64_t> &args) : Shape() {
    if (args.size() > kMaxDimNum) {
      return;
    }
    for (const int64_t d : args) {
      dims_[dim_num_++] = d;
    }
  }

  /* Copies only the dims in use (CANN does the same, for speed). */
  Shape(const Shape &other) : dim_num_(other.dim_num_) {
    for (size_t i = 0U; i < dim_num_; ++i) {
      dims_[i] = other.dims_[i];
    }
    (void)memset(reserved_, 0, sizeof(reserved_));
  }
  Shape &operator=(const Shape &other) {
    if (this != &other) {
      dim_num_ = other.dim_num_;
      for (size_t i = 0U; i < dim_num_; ++i) {
        dims_[i] = other.dims_[i];
      }
    }
    (void)memset(reserved_, 0, sizeof(reserved_));
    return *this;
  }

  bool operator==(const Shape &rht) const {
    if (dim_num_ != rht.dim_num_) {
      return false;
    }
    for (size_t i = 0U; i < dim_num_; ++i) {
      if (dims_[i] != rht.dims_[i]) {
        return false;
      }
    }
    return true;
  }
  bool operator!=(const Shape &rht) const { return !(*this == rht); }

  /* Number of elements: 1 for a scalar, kInvalidDimValue on int64 overflow. */
  int64_t GetShapeSize() const {
    int64_t size = 1;
    for (size_t i = 0U; i < dim_num_; ++i) {
      if (__builtin_mul_overflow(size, dims_[i], &size)) {
        return kInvalidDimValue;
      }
    }
    return size;
  }

  bool IsScalar() const { return dim_num_ == 0U; }
  void SetScalar() { dim_num_ = 0U; }
  size_t GetDimNum() const { return dim_num_; }
  void SetDimNum(const size_t dim_num) { dim_num_ = dim_num; }

  /* kInvalidDimValue for idx >= kMaxDimNum. */
  int64_t GetDim(const size_t idx) const { return idx < kMaxDimNum ? dims_[idx] : kInvalidDimValue; }
  /* Unchecked. */
  const int64_t &operator[](const size_t idx) const { return dims_[idx]; }
  int64_t &operator[](const size_t idx) { return dims_[idx]; }
  /* Ignored for idx >= kMaxDimNum; does not change the dim count. */
  void SetDim(size_t idx, const int64_t dim_value) {
    if (idx < kMaxDimNum) {
      dims_[idx] = dim_value;
    }
  }
  /* Ignored when the shape already has kMaxDimNum dims. */
  Shape &AppendDim(const int64_t value) {
    if (dim_num_ < kMaxDimNum) {
      dims_[dim_num_++] = value;
    }
    return *this;
  }

 private:
  size_t dim_num_;
  int64_t dims_[kMaxDimNum];
  uint8_t reserved_[40];
};
static_assert(std::is_standard_layout<Shape>::value, "gert::Shape must be standard-layout");
}  // namespace gert

#endif  // METADEF_CXX_INC_EXE_GRAPH_SHAPE_H_
