/* gert: CANN 8.5 exe_graph/runtime/tensor_data.h (METADEF) -- gert::TensorData: an address, an
 * optional manager function that owns it, a size and a placement.  Move-only; the destructor
 * releases the address through the manager (manager == nullptr: the caller owns the memory and
 * nothing is freed, which is how gert passes its device buffers).  Header-only, CANN layout. */
#ifndef METADEF_CXX_INC_EXE_GRAPH_TENSOR_DATA_H_
#define METADEF_CXX_INC_EXE_GRAPH_TENSOR_DATA_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include "graph/ge_error_codes.h"

namespace gert {
using TensorAddress = void *;
using ConstTensorAddressPtr = const void *;

enum TensorPlacement : int32_t {
  kOnDeviceHbm = 0,  /* device memory (HBM) */
  kOnHost = 1,       /* host memory */
  kFollowing = 2,    /* host memory placed right after the gert::Tensor object itself */
  kOnDeviceP2p = 3,  /* device P2P memory */
  kTensorPlacementEnd
};

class TensorPlacementUtils {
 public:
  static bool IsOnDevice(TensorPlacement placement) { return placement == kOnDeviceHbm || placement == kOnDeviceP2p; }
  static bool IsOnHost(TensorPlacement placement) { return placement == kOnHost || placement == kFollowing; }
  static bool IsOnHostFollowing(TensorPlacement placement) { return placement == kFollowing; }
  static bool IsOnHostNotFollowing(TensorPlacement placement) { return placement == kOnHost; }
  static bool IsOnDeviceHbm(TensorPlacement placement) { return placement == kOnDeviceHbm; }
  static bool IsOnDeviceP2p(TensorPlacement placement) { return placement == kOnDeviceP2p; }
};

/* What a TensorAddrManager is asked to do. */
enum TensorOperateType : int32_t {
  kGetTensorAddress = 0,  /* *out = the data address behind addr */
  kFreeTensor = 1,        /* release addr */
  kPlusShareCount = 2,    /* one more TensorData shares addr */
  kTensorOperateType
};

using TensorAddrManager = ge::graphStatus (*)(TensorAddress addr, TensorOperateType operate_type, void **out);

class TensorData {
 public:
  explicit TensorData(TensorAddress addr = nullptr, const TensorAddrManager manager = nullptr)
      : TensorData(addr, manager, 0U, kTensorPlacementEnd) {}
  explicit TensorData(TensorAddress addr, const TensorAddrManager manager, size_t size, TensorPlacement placement)
      : addr_(addr), manager_(manager), size_(size), placement_(placement), reserved_0_(0U) {
    (void)memset(reserved_1_, 0, sizeof(reserved_1_));
  }

  TensorData(const TensorData &) = delete;
  TensorData &operator=(const TensorData &other) = delete;

  /* The source is left empty (no address, no manager, size 0, kTensorPlacementEnd). */
  TensorData(TensorData &&other) noexcept
      : addr_(other.addr_), manager_(other.manager_), size_(other.size_), placement_(other.placement_),
        reserved_0_(other.reserved_0_) {
    (void)memcpy(reserved_1_, other.reserved_1_, sizeof(reserved_1_));
    other.Clear();
  }
  /* Frees what this object held, then takes over other's content. */
  TensorData &operator=(TensorData &&other) noexcept {
    if (this != &other) {
      (void)Free();
      addr_ = other.addr_;
      manager_ = other.manager_;
      size_ = other.size_;
      placement_ = other.placement_;
      reserved_0_ = other.reserved_0_;
      (void)memcpy(reserved_1_, other.reserved_1_, sizeof(reserved_1_));
      other.Clear();
    }
    return *this;
  }
  ~TensorData() noexcept { (void)Free(); }

  /* The data address: addr itself without a manager, otherwise what the manager resolves it to
   * (nullptr if the manager fails). */
  TensorAddress GetAddr() const {
    if (manager_ == nullptr || addr_ == nullptr) {
      return addr_;
    }
    TensorAddress resolved = nullptr;
    return manager_(addr_, kGetTensorAddress, &resolved) == ge::GRAPH_SUCCESS ? resolved : nullptr;
  }
  size_t GetSize() const { return size_; }
  void SetSize(const size_t size) { size_ = size; }
  TensorPlacement GetPlacement() const { return placement_; }
  void SetPlacement(const TensorPlacement placement) { placement_ = placement; }

  /* Releases the address through the manager, if there is one; on success forgets both. */
  ge::graphStatus Free() {
    if (manager_ == nullptr) {
      return ge::GRAPH_SUCCESS;
    }
    const ge::graphStatus ret = manager_(addr_, kFreeTensor, nullptr);
    if (ret == ge::GRAPH_SUCCESS) {
      addr_ = nullptr;
      manager_ = nullptr;
    }
    return ret;
  }
  /* Frees the current address, then holds addr (size and placement are kept). */
  ge::graphStatus SetAddr(const ConstTensorAddressPtr addr, TensorAddrManager manager) {
    const ge::graphStatus ret = Free();
    if (ret != ge::GRAPH_SUCCESS) {
      return ret;
    }
    addr_ = const_cast<TensorAddress>(addr);
    manager_ = manager;
    return ge::GRAPH_SUCCESS;
  }

  bool IsSharedWith(const TensorData &other) const {
    return addr_ == other.addr_ && manager_ == other.manager_ && size_ == other.size_ &&
           placement_ == other.placement_;
  }
  /* Frees the current content and shares other's (the manager is told kPlusShareCount). */
  ge::graphStatus ShareFrom(const TensorData &other) {
    if (IsSharedWith(other)) {
      return ge::GRAPH_SUCCESS;
    }
    const ge::graphStatus ret = Free();
    if (ret != ge::GRAPH_SUCCESS) {
      return ret;
    }
    addr_ = other.addr_;
    manager_ = other.manager_;
    size_ = other.size_;
    placement_ = other.placement_;
    if (manager_ == nullptr) {
      return ge::GRAPH_SUCCESS;
    }
    const ge::graphStatus share_ret = manager_(addr_, kPlusShareCount, nullptr);
    if (share_ret != ge::GRAPH_SUCCESS) {
      Clear();
    }
    return share_ret;
  }
  /* Gives up ownership without freeing: returns the address, and its manager through `manager`. */
  TensorAddress Release(TensorAddrManager &manager) {
    TensorAddress addr = addr_;
    manager = manager_;
    Clear();
    return addr;
  }

 private:
  void Clear() {
    addr_ = nullptr;
    manager_ = nullptr;
    size_ = 0U;
    placement_ = kTensorPlacementEnd;
  }

  TensorAddress addr_;
  TensorAddrManager manager_;
  size_t size_;
  TensorPlacement placement_;
  uint32_t reserved_0_;
  uint8_t reserved_1_[40];
};
}  // namespace gert

#endif  // METADEF_CXX_INC_EXE_GRAPH_TENSOR_DATA_H_
