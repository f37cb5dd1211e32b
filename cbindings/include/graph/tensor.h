/* gert: CANN 8.5 graph/tensor.h (METADEF), the subset gert uses: ge::Shape, ge::TensorDesc and
 * ge::Tensor, the host-side tensor of Session::RunGraph.  All three are handles to a shared
 * implementation (copying a Tensor shares its data; Clone() copies it). */
#ifndef INC_EXTERNAL_GRAPH_TENSOR_H_
#define INC_EXTERNAL_GRAPH_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "./ge_error_codes.h"
#include "./types.h"
#include "ascend_string.h"

namespace ge {
class ShapeImpl;
class GE_FUNC_DEV_VISIBILITY GE_FUNC_HOST_VISIBILITY Shape {
 public:
  Shape();
  ~Shape() = default;
  explicit Shape(const std::vector<int64_t> &dims);

  /* Number of known dims: 0 for a scalar and for unknown rank ([-2]); GetDims().size() differs there. */
  size_t GetDimNum() const;
  int64_t GetDim(size_t idx) const;  /* 0 for an invalid index */
  graphStatus SetDim(size_t idx, int64_t value);
  std::vector<int64_t> GetDims() const;
  /* Product of the dims: -1 if any dim is unknown, 0 for a scalar, an empty tensor or on overflow. */
  int64_t GetShapeSize() const;

 private:
  std::shared_ptr<ShapeImpl> impl_;
};

class TensorDescImpl;
class GE_FUNC_DEV_VISIBILITY GE_FUNC_HOST_VISIBILITY TensorDesc {
 public:
  TensorDesc();
  ~TensorDesc() = default;
  explicit TensorDesc(Shape shape, Format format = FORMAT_ND, DataType dt = DT_FLOAT);
  TensorDesc(const TensorDesc &desc);
  TensorDesc(TensorDesc &&desc);
  TensorDesc &operator=(const TensorDesc &desc);
  TensorDesc &operator=(TensorDesc &&desc);

  void Update(const Shape &shape, Format format = FORMAT_ND, DataType dt = DT_FLOAT);
  Shape GetShape() const;
  void SetShape(const Shape &shape);
  graphStatus SetUnknownDimNumShape();
  graphStatus SetShapeRange(const std::vector<std::pair<int64_t, int64_t>> &range);
  graphStatus GetShapeRange(std::vector<std::pair<int64_t, int64_t>> &range) const;

  Format GetFormat() const;
  void SetFormat(Format format);
  Shape GetOriginShape() const;
  void SetOriginShape(const Shape &origin_shape);
  Format GetOriginFormat() const;
  void SetOriginFormat(Format origin_format);
  DataType GetDataType() const;
  void SetDataType(DataType dt);

  graphStatus GetName(AscendString &name) const;
  void SetName(const char_t *name);

  void SetSize(int64_t size);
  int64_t GetSize() const;
  int64_t GetRealDimCnt() const;
  void SetRealDimCnt(const int64_t real_dim_cnt);

  void SetPlacement(Placement placement);
  Placement GetPlacement() const;

 private:
  std::shared_ptr<TensorDescImpl> impl;
};

class TensorImpl;
class GE_FUNC_DEV_VISIBILITY GE_FUNC_HOST_VISIBILITY Tensor {
 public:
  using DeleteFunc = std::function<void(uint8_t *)>;

  Tensor();
  ~Tensor() = default;
  explicit Tensor(const TensorDesc &tensor_desc);
  Tensor(const TensorDesc &tensor_desc, const std::vector<uint8_t> &data);
  Tensor(const TensorDesc &tensor_desc, const uint8_t *data, size_t size);
  Tensor(TensorDesc &&tensor_desc, std::vector<uint8_t> &&data);

  TensorDesc GetTensorDesc() const;
  graphStatus SetTensorDesc(const TensorDesc &tensor_desc);

  const uint8_t *GetData() const;
  uint8_t *GetData();
  size_t GetSize() const;

  graphStatus SetData(std::vector<uint8_t> &&data);
  graphStatus SetData(const std::vector<uint8_t> &data);
  graphStatus SetData(const uint8_t *data, size_t size);  /* copies */
  /* Takes ownership of data without copying; deleter_func releases it. */
  graphStatus SetData(uint8_t *data, size_t size, const Tensor::DeleteFunc &deleter_func);
  graphStatus IsValid();

  graphStatus SetOriginShapeDimNum(const size_t dim_num);
  size_t GetOriginShapeDimNum() const;
  graphStatus SetOriginShapeDim(const size_t idx, const int64_t dim_value);
  int64_t GetOriginShapeDim(const size_t idx) const;
  graphStatus SetOriginFormat(const ge::Format &format);
  ge::Format GetOriginFormat() const;

  graphStatus SetShapeDimNum(const size_t dim_num);
  size_t GetShapeDimNum() const;
  graphStatus SetShapeDim(const size_t idx, const int64_t dim_value);
  int64_t GetShapeDim(const size_t idx) const;
  graphStatus SetFormat(const ge::Format &format);
  ge::Format GetFormat() const;

  graphStatus SetDataType(const ge::DataType &dtype);
  ge::DataType GetDataType() const;
  graphStatus SetPlacement(const ge::Placement &placement);
  ge::Placement GetPlacement() const;

  /* Like SetData with a deleter, for memory this tensor owns exclusively (no new shared state). */
  graphStatus ResetData(uint8_t *data, size_t size, const Tensor::DeleteFunc &deleter_func);
  Tensor Clone() const;

 private:
  std::shared_ptr<TensorImpl> impl;
};
}  // namespace ge

#endif  // INC_EXTERNAL_GRAPH_TENSOR_H_
