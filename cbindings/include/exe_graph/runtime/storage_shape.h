/* gert: CANN 8.5 exe_graph/runtime/storage_shape.h (METADEF) -- the origin shape (as the model sees
 * it) and the storage shape (as the device lays it out) of a gert::Tensor.  Header-only, CANN layout. */
#ifndef METADEF_CXX_INC_EXE_GRAPH_STORAGE_SHAPE_H_
#define METADEF_CXX_INC_EXE_GRAPH_STORAGE_SHAPE_H_

#include <cstring>
#include <initializer_list>
#include <type_traits>
#include "shape.h"

namespace gert {
struct StorageShape {
 public:
  StorageShape() { (void)memset(reserved_, 0, sizeof(reserved_)); }
  StorageShape(const std::initializer_list<int64_t> &origin_shape, const std::initializer_list<int64_t> &storage_shape)
      : origin_shape_(origin_shape), storage_shape_(storage_shape) {
    (void)memset(reserved_, 0, sizeof(reserved_));
  }

  const Shape &GetOriginShape() const { return origin_shape_; }
  const Shape &GetShape() const { return origin_shape_; }  /* the origin shape */
  const Shape &GetStorageShape() const { return storage_shape_; }
  Shape &MutableShape() { return origin_shape_; }
  Shape &MutableOriginShape() { return origin_shape_; }
  Shape &MutableStorageShape() { return storage_shape_; }

  bool operator==(const StorageShape &other) const {
    return origin_shape_ == other.origin_shape_ && storage_shape_ == other.storage_shape_;
  }
  bool operator!=(const StorageShape &other) const { return !(*this == other); }

 private:
  Shape origin_shape_;
  Shape storage_shape_;
  uint8_t reserved_[40];
};
static_assert(std::is_standard_layout<StorageShape>::value, "gert::StorageShape must be standard-layout");
}  // namespace gert

#endif  // METADEF_CXX_INC_EXE_GRAPH_STORAGE_SHAPE_H_
