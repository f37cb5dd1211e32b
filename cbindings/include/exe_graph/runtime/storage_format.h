/* gert: CANN 8.5 exe_graph/runtime/storage_format.h (METADEF) -- origin format, storage format and
 * expand-dims rule of a gert::Tensor.  Header-only, CANN layout. */
#ifndef METADEF_CXX_INC_EXE_GRAPH_STORAGE_FORMAT_H_
#define METADEF_CXX_INC_EXE_GRAPH_STORAGE_FORMAT_H_

#include <cstring>
#include <memory>
#include <type_traits>
#include "graph/types.h"
#include "expand_dims_type.h"

namespace gert {
struct StorageFormat {
 public:
  /* CANN leaves both formats indeterminate here; gert's header sets FORMAT_ND.  Do not rely on either. */
  StorageFormat() : origin_format_(ge::FORMAT_ND), storage_format_(ge::FORMAT_ND) {
    (void)memset(reserved_, 0, sizeof(reserved_));
  }
  StorageFormat(const ge::Format origin_format, const ge::Format storage_format, const ExpandDimsType &expand_dims_type)
      : origin_format_(origin_format), storage_format_(storage_format), expand_dims_type_(expand_dims_type) {
    (void)memset(reserved_, 0, sizeof(reserved_));
  }

  ge::Format GetOriginFormat() const { return origin_format_; }
  void SetOriginFormat(const ge::Format origin_format) { origin_format_ = origin_format; }
  ge::Format GetStorageFormat() const { return storage_format_; }
  void SetStorageFormat(const ge::Format storage_format) { storage_format_ = storage_format; }
  ExpandDimsType GetExpandDimsType() const { return expand_dims_type_; }
  void SetExpandDimsType(const ExpandDimsType &expand_dims_type) { expand_dims_type_ = expand_dims_type; }
  ExpandDimsType &MutableExpandDimsType() { return expand_dims_type_; }

  bool operator==(const StorageFormat &other) const {
    return origin_format_ == other.origin_format_ && storage_format_ == other.storage_format_ &&
           expand_dims_type_ == other.expand_dims_type_;
  }
  bool operator!=(const StorageFormat &other) const { return !(*this == other); }

 private:
  ge::Format origin_format_;
  ge::Format storage_format_;
  ExpandDimsType expand_dims_type_;
  uint8_t reserved_[40];
};
static_assert(std::is_standard_layout<StorageFormat>::value, "gert::StorageFormat must be standard-layout");
}  // namespace gert

#endif  // METADEF_CXX_INC_EXE_GRAPH_STORAGE_FORMAT_H_
