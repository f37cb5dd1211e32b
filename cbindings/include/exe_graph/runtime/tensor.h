/* gert: CANN 8.5 exe_graph/runtime/tensor.h (METADEF) -- gert::Tensor, the device-side tensor of
 * Session::ExecuteGraphWithStreamAsync: shapes, formats, data type and a TensorData.  Move-only
 * (TensorData is), standard-layout, header-only, CANN layout.  CANN's static CreateFollowing()
 * helpers and TensorV2 (strided tensors, stride.h) are not declared here; gert does not use them.
 *
 * Typical use (both TRITON-GE and GE's examples): a caller-owned device buffer, no manager:
 *   gert::Tensor t(gert::StorageShape({1, 3}, {1, 3}), gert::StorageFormat(ge::FORMAT_ND, ge::FORMAT_ND, {}),
 *                  gert::kOnDeviceHbm, ge::DT_FLOAT, dev_ptr);
 *   outputs.emplace_back(std::move(t));   // std::vector<gert::Tensor> cannot copy
 */
#ifndef METADEF_CXX_INC_EXE_GRAPH_TENSOR_H_
#define METADEF_CXX_INC_EXE_GRAPH_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include "graph/ge_error_codes.h"
#include "graph/types.h"
#include "storage_shape.h"
#include "storage_format.h"
#include "tensor_data.h"

namespace gert {
using TensorAddress = void *;
using ConstTensorAddress = void *const;

enum TensorVersion : uint8_t {
  kTensorV1 = 0,  /* contiguous */
  kTensorV2 = 1,  /* carries a stride (TensorV2) */
};

class Tensor {
 public:
  /* CANN leaves the data type indeterminate here; gert's header sets DT_UNDEFINED.  Set it. */
  Tensor() : version_(kTensorV1), data_type_(ge::DT_UNDEFINED) { ClearReserved(); }

  /* No manager: addr stays the caller's.  The size is GetSizeInBytes(storage shape size, data_type). */
  Tensor(const StorageShape &storage_shape, const StorageFormat &storage_format, const TensorPlacement placement,
         const ge::DataType data_type, TensorAddress addr)
      : Tensor(storage_shape, storage_format, placement, data_type, addr, nullptr) {}
  /* No data yet (placement kTensorPlacementEnd, size 0). */
  Tensor(const StorageShape &storage_shape, const StorageFormat &storage_format, ge::DataType data_type)
      : storage_shape_(storage_shape), storage_format_(storage_format), version_(kTensorV1), data_type_(data_type) {
    ClearReserved();
  }
  Tensor(const StorageShape &storage_shape, const StorageFormat &storage_format, const TensorPlacement placement,
         const ge::DataType data_type, TensorAddress addr, TensorAddrManager manager)
      : storage_shape_(storage_shape), storage_format_(storage_format), version_(kTensorV1), data_type_(data_type),
        tensor_data_(addr, manager,
                     static_cast<size_t>(ge::GetSizeInBytes(storage_shape.GetStorageShape().GetShapeSize(), data_type)),
                     placement) {
    ClearReserved();
  }

  /* Elements in the storage shape. */
  int64_t GetShapeSize() const { return storage_shape_.GetStorageShape().GetShapeSize(); }

  template <class T>
  const T *GetData() const {
    return static_cast<const T *>(GetAddr());
  }
  template <class T>
  auto GetData() -> T * {
    return static_cast<T *>(GetAddr());
  }
  void SetData(TensorData &&data) { tensor_data_ = std::move(data); }

  /* For kFollowing the data sits right after this object. */
  const void *GetAddr() const {
    if (tensor_data_.GetPlacement() == kFollowing) {
      return reinterpret_cast<const uint8_t *>(this) + sizeof(*this);
    }
    return tensor_data_.GetAddr();
  }
  void *GetAddr() {
    if (tensor_data_.GetPlacement() == kFollowing) {
      return reinterpret_cast<uint8_t *>(this) + sizeof(*this);
    }
    return tensor_data_.GetAddr();
  }
  size_t GetSize() const { return tensor_data_.GetSize(); }
  void SetSize(const size_t size) { tensor_data_.SetSize(size); }

  ge::DataType GetDataType() const { return data_type_; }
  void SetDataType(const ge::DataType data_type) { data_type_ = data_type; }

  const Shape &GetStorageShape() const { return storage_shape_.GetStorageShape(); }
  Shape &MutableStorageShape() { return storage_shape_.MutableStorageShape(); }
  const Shape &GetOriginShape() const { return storage_shape_.GetOriginShape(); }
  Shape &MutableOriginShape() { return storage_shape_.MutableOriginShape(); }
  const StorageShape &GetShape() const { return storage_shape_; }
  StorageShape &GetShape() { return storage_shape_; }

  ge::Format GetStorageFormat() const { return storage_format_.GetStorageFormat(); }
  void SetStorageFormat(const ge::Format storage_format) { storage_format_.SetStorageFormat(storage_format); }
  ge::Format GetOriginFormat() const { return storage_format_.GetOriginFormat(); }
  void SetOriginFormat(const ge::Format origin_format) { storage_format_.SetOriginFormat(origin_format); }
  const StorageFormat &GetFormat() const { return storage_format_; }
  StorageFormat &MutableFormat() { return storage_format_; }
  ExpandDimsType GetExpandDimsType() const { return storage_format_.GetExpandDimsType(); }
  void SetExpandDimsType(const ExpandDimsType &expand_dims_type) { storage_format_.SetExpandDimsType(expand_dims_type); }

  TensorPlacement GetPlacement() const { return tensor_data_.GetPlacement(); }
  void SetPlacement(const TensorPlacement placement) { tensor_data_.SetPlacement(placement); }
  const TensorData &GetTensorData() const { return tensor_data_; }
  TensorData &MutableTensorData() { return tensor_data_; }
  TensorVersion GetVersion() const { return version_; }

 private:
  void ClearReserved() {
    (void)memset(reserved_, 0, sizeof(reserved_));
    (void)memset(reserved_field_, 0, sizeof(reserved_field_));
  }

  StorageShape storage_shape_;
  StorageFormat storage_format_;
  TensorVersion version_;
  uint8_t reserved_[3];
  ge::DataType data_type_;
  TensorData tensor_data_;
  uint8_t reserved_field_[40];
};
static_assert(std::is_standard_layout<Tensor>::value, "gert::Tensor must be standard-layout");
}  // namespace gert

#endif  // METADEF_CXX_INC_EXE_GRAPH_TENSOR_H_
