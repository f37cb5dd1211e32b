/* gert: CANN 8.5 exe_graph/runtime/expand_dims_type.h (METADEF), the subset gert uses --
 * gert::ExpandDimsType, the rule for padding a shape with 1-dims (part of a StorageFormat).  gert
 * always passes the empty rule ({}); CANN's Expand() helpers are not declared here.
 * Header-only, CANN layout (8-bit length + 56-bit mask, 40 reserved bytes). */
#ifndef METADEF_CXX_INC_EXE_GRAPH_RUNTIME_EXPAND_DIMS_TYPE_H_
#define METADEF_CXX_INC_EXE_GRAPH_RUNTIME_EXPAND_DIMS_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include "graph/ge_error_codes.h"
#include "graph/types.h"
#include "shape.h"

namespace gert {
class ExpandDimsType {
 public:
  using AxisIndex = uint64_t;
  static constexpr size_t kMaxExpandSize = 56;

  /* The empty rule: nothing is expanded. */
  ExpandDimsType() : size_(0U), mask_(0U) { (void)memset(reserved_, 0, sizeof(reserved_)); }

  /* From a string of '0' (original axis) and '1' (inserted axis), left to right, e.g. "0110"
   * turns [2, 2] into [2, 1, 1, 2].  nullptr or more than kMaxExpandSize characters: empty rule. */
  explicit ExpandDimsType(const ge::char_t *const expand_dims_type) : ExpandDimsType() {
    if (expand_dims_type == nullptr) {
      return;
    }
    const size_t n = strlen(expand_dims_type);
    if (n > kMaxExpandSize) {
      return;
    }
    size_ = n;
    for (AxisIndex i = 0U; i < n; ++i) {
      if (expand_dims_type[i] == '1') {
        SetExpandIndex(i);
      }
    }
  }

  /* From a packed rule: length in the top 8 bits, the mask (bit i = axis i) in the low 56 bits. */
  explicit ExpandDimsType(const int64_t reshape_type_mask) : ExpandDimsType() {
    const uint64_t packed = static_cast<uint64_t>(reshape_type_mask);
    const uint64_t n = packed >> kMaxExpandSize;
    if (packed == 0U || n > kMaxExpandSize) {
      return;
    }
    size_ = n;
    mask_ = packed & ((1ULL << kMaxExpandSize) - 1U);
  }

  bool operator==(const ExpandDimsType &other) const { return size_ == other.size_ && mask_ == other.mask_; }

  /* Number of dims after expansion (0 for the empty rule). */
  AxisIndex GetFullSize() const { return size_; }
  void SetExpandIndex(const AxisIndex index) { mask_ |= (1ULL << index); }
  bool IsExpandIndex(const AxisIndex index) const { return ((1ULL << index) & mask_) != 0U; }

 private:
  uint64_t size_ : 8;
  uint64_t mask_ : kMaxExpandSize;
  uint8_t reserved_[40];
};
}  // namespace gert

#endif  // METADEF_CXX_INC_EXE_GRAPH_RUNTIME_EXPAND_DIMS_TYPE_H_
