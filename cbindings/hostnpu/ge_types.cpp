// Host NPU: the value types of the GE API (AscendString, ge::Shape, TensorDesc, ge::Tensor, the compile summary).
#include <cstring>
#include <functional>

#include "ge/ge_api.h"
#include "ge_state.h"

namespace ge {

// ---- AscendString -------------------------------------------------------------------------
AscendString::AscendString(const char_t *const name) {
  if (name) name_ = std::make_shared<std::string>(name);
}
AscendString::AscendString(const char_t *const name, size_t length) {
  if (name) name_ = std::make_shared<std::string>(name, length);
}
const char_t *AscendString::GetString() const { return name_ ? name_->c_str() : ""; }
size_t AscendString::GetLength() const { return name_ ? name_->size() : 0; }
size_t AscendString::Find(const AscendString &s) const {
  if (!name_ || !s.name_) return std::string::npos;
  return name_->find(*s.name_);
}
size_t AscendString::Hash() const { return std::hash<std::string>()(name_ ? *name_ : std::string()); }
static int cmp(const AscendString &a, const AscendString &b) { return std::strcmp(a.GetString(), b.GetString()); }
bool AscendString::operator<(const AscendString &d) const { return cmp(*this, d) < 0; }
bool AscendString::operator>(const AscendString &d) const { return cmp(*this, d) > 0; }
bool AscendString::operator<=(const AscendString &d) const { return cmp(*this, d) <= 0; }
bool AscendString::operator>=(const AscendString &d) const { return cmp(*this, d) >= 0; }
bool AscendString::operator==(const AscendString &d) const { return cmp(*this, d) == 0; }
bool AscendString::operator!=(const AscendString &d) const { return cmp(*this, d) != 0; }
bool AscendString::operator==(const char_t *const d) const { return std::strcmp(GetString(), d ? d : "") == 0; }
bool AscendString::operator!=(const char_t *const d) const { return !(*this == d); }

int64_t GetSizeInBytes(int64_t element_count, DataType data_type) {
  if (element_count < 0) return -1;
  int size = GetSizeByDataType(data_type);
  if (size < 0) return -1;
  int64_t out = 0;
  if (size > kDataTypeSizeBitOffset) {  // sub-byte types: (count * bits + 7) / 8, -1 when it overflows
    int64_t bits = 0;
    if (__builtin_mul_overflow(element_count, static_cast<int64_t>(size - kDataTypeSizeBitOffset), &bits) ||
        bits > INT64_MAX - 7)
      return -1;
    return (bits + 7) / 8;
  }
  if (__builtin_mul_overflow(element_count, static_cast<int64_t>(size), &out)) return -1;  // GE: overflow is invalid
  return out;
}

// ---- ge::Shape ----------------------------------------------------------------------------
class ShapeImpl {
 public:
  std::vector<int64_t> dims;
};

Shape::Shape() : impl_(std::make_shared<ShapeImpl>()) {}
Shape::Shape(const std::vector<int64_t> &dims) : impl_(std::make_shared<ShapeImpl>()) { impl_->dims = dims; }
size_t Shape::GetDimNum() const { return impl_ ? impl_->dims.size() : 0; }
int64_t Shape::GetDim(size_t idx) const { return impl_ && idx < impl_->dims.size() ? impl_->dims[idx] : 0; }
graphStatus Shape::SetDim(size_t idx, int64_t value) {
  if (!impl_ || idx >= impl_->dims.size()) return GRAPH_FAILED;
  impl_->dims[idx] = value;
  return GRAPH_SUCCESS;
}
std::vector<int64_t> Shape::GetDims() const { return impl_ ? impl_->dims : std::vector<int64_t>(); }
int64_t Shape::GetShapeSize() const {
  if (!impl_) return 0;
  int64_t n = 1;
  for (int64_t d : impl_->dims) {
    if (d < 0) return -1;
  }
  for (int64_t d : impl_->dims) {
    if (__builtin_mul_overflow(n, d, &n)) return 0;  // as GE (CheckInt64MulOverflow): 0 on overflow
  }
  return n;
}

// ---- TensorDesc ---------------------------------------------------------------------------
class TensorDescImpl {
 public:
  Shape shape, origin_shape;
  Format format = FORMAT_ND, origin_format = FORMAT_ND;
  DataType dtype = DT_FLOAT;
  std::string name;
  int64_t size = 0, real_dim_cnt = 0;
  Placement placement = kPlacementHost;
  std::vector<std::pair<int64_t, int64_t>> range;
};

TensorDesc::TensorDesc() : impl(std::make_shared<TensorDescImpl>()) {}
TensorDesc::TensorDesc(Shape shape, Format format, DataType dt) : impl(std::make_shared<TensorDescImpl>()) {
  Update(shape, format, dt);
}
TensorDesc::TensorDesc(const TensorDesc &desc) : impl(std::make_shared<TensorDescImpl>(*desc.impl)) {}
TensorDesc::TensorDesc(TensorDesc &&desc) : impl(std::move(desc.impl)) {}
TensorDesc &TensorDesc::operator=(const TensorDesc &desc) {
  if (this != &desc) impl = std::make_shared<TensorDescImpl>(*desc.impl);
  return *this;
}
TensorDesc &TensorDesc::operator=(TensorDesc &&desc) {
  impl = std::move(desc.impl);
  return *this;
}
void TensorDesc::Update(const Shape &shape, Format format, DataType dt) {
  impl->shape = Shape(shape.GetDims());
  impl->origin_shape = Shape(shape.GetDims());
  impl->format = impl->origin_format = format;
  impl->dtype = dt;
  impl->real_dim_cnt = static_cast<int64_t>(shape.GetDimNum());
}
Shape TensorDesc::GetShape() const { return Shape(impl->shape.GetDims()); }
void TensorDesc::SetShape(const Shape &shape) {
  impl->shape = Shape(shape.GetDims());
  impl->real_dim_cnt = static_cast<int64_t>(shape.GetDimNum());
}
graphStatus TensorDesc::SetUnknownDimNumShape() {
  impl->shape = Shape({-2});
  return GRAPH_SUCCESS;
}
graphStatus TensorDesc::SetShapeRange(const std::vector<std::pair<int64_t, int64_t>> &range) {
  impl->range = range;
  return GRAPH_SUCCESS;
}
graphStatus TensorDesc::GetShapeRange(std::vector<std::pair<int64_t, int64_t>> &range) const {
  range = impl->range;
  return GRAPH_SUCCESS;
}
Format TensorDesc::GetFormat() const { return impl->format; }
void TensorDesc::SetFormat(Format format) { impl->format = format; }
Shape TensorDesc::GetOriginShape() const { return Shape(impl->origin_shape.GetDims()); }
void TensorDesc::SetOriginShape(const Shape &s) { impl->origin_shape = Shape(s.GetDims()); }
Format TensorDesc::GetOriginFormat() const { return impl->origin_format; }
void TensorDesc::SetOriginFormat(Format f) { impl->origin_format = f; }
DataType TensorDesc::GetDataType() const { return impl->dtype; }
void TensorDesc::SetDataType(DataType dt) { impl->dtype = dt; }
graphStatus TensorDesc::GetName(AscendString &name) const {
  name = AscendString(impl->name.c_str());
  return GRAPH_SUCCESS;
}
void TensorDesc::SetName(const char_t *name) { impl->name = name ? name : ""; }
void TensorDesc::SetSize(int64_t size) { impl->size = size; }
int64_t TensorDesc::GetSize() const { return impl->size; }
int64_t TensorDesc::GetRealDimCnt() const { return impl->real_dim_cnt; }
void TensorDesc::SetRealDimCnt(const int64_t n) { impl->real_dim_cnt = n; }
void TensorDesc::SetPlacement(Placement p) { impl->placement = p; }
Placement TensorDesc::GetPlacement() const { return impl->placement; }

// ---- ge::Tensor (host tensors for RunGraph) -----------------------------------------------
class TensorImpl {
 public:
  TensorDesc desc;
  std::vector<uint8_t> owned;
  uint8_t *external = nullptr;
  size_t external_size = 0;
  Tensor::DeleteFunc deleter;
  ~TensorImpl() { release(); }
  void release() {
    if (external && deleter) deleter(external);
    external = nullptr;
    external_size = 0;
    deleter = nullptr;
  }
  uint8_t *data() { return external ? external : owned.data(); }
  size_t size() const { return external ? external_size : owned.size(); }
};

Tensor::Tensor() : impl(std::make_shared<TensorImpl>()) {}
Tensor::Tensor(const TensorDesc &d) : impl(std::make_shared<TensorImpl>()) { impl->desc = d; }
Tensor::Tensor(const TensorDesc &d, const std::vector<uint8_t> &data) : impl(std::make_shared<TensorImpl>()) {
  impl->desc = d;
  impl->owned = data;
}
Tensor::Tensor(const TensorDesc &d, const uint8_t *data, size_t size) : impl(std::make_shared<TensorImpl>()) {
  impl->desc = d;
  if (data) impl->owned.assign(data, data + size);
}
Tensor::Tensor(TensorDesc &&d, std::vector<uint8_t> &&data) : impl(std::make_shared<TensorImpl>()) {
  impl->desc = std::move(d);
  impl->owned = std::move(data);
}
TensorDesc Tensor::GetTensorDesc() const { return impl->desc; }
graphStatus Tensor::SetTensorDesc(const TensorDesc &d) {
  impl->desc = d;
  return GRAPH_SUCCESS;
}
const uint8_t *Tensor::GetData() const { return impl->data(); }
uint8_t *Tensor::GetData() { return impl->data(); }
size_t Tensor::GetSize() const { return impl->size(); }
graphStatus Tensor::SetData(std::vector<uint8_t> &&data) {
  impl->release();
  impl->owned = std::move(data);
  return GRAPH_SUCCESS;
}
graphStatus Tensor::SetData(const std::vector<uint8_t> &data) {
  impl->release();
  impl->owned = data;
  return GRAPH_SUCCESS;
}
graphStatus Tensor::SetData(const uint8_t *data, size_t size) {
  impl->release();
  impl->owned.assign(data, data + size);
  return GRAPH_SUCCESS;
}
graphStatus Tensor::SetData(uint8_t *data, size_t size, const Tensor::DeleteFunc &deleter_func) {
  impl->release();
  impl->owned.clear();
  impl->external = data;
  impl->external_size = size;
  impl->deleter = deleter_func;
  return GRAPH_SUCCESS;
}
graphStatus Tensor::ResetData(uint8_t *data, size_t size, const Tensor::DeleteFunc &deleter_func) {
  return SetData(data, size, deleter_func);
}
graphStatus Tensor::IsValid() {
  int64_t n = impl->desc.GetShape().GetShapeSize();
  int64_t need = GetSizeInBytes(n, impl->desc.GetDataType());
  return need >= 0 && static_cast<size_t>(need) == impl->size() ? GRAPH_SUCCESS : GRAPH_FAILED;
}
graphStatus Tensor::SetOriginShapeDimNum(const size_t n) {
  auto dims = impl->desc.GetOriginShape().GetDims();
  dims.resize(n, 0);
  impl->desc.SetOriginShape(Shape(dims));
  return GRAPH_SUCCESS;
}
size_t Tensor::GetOriginShapeDimNum() const { return impl->desc.GetOriginShape().GetDimNum(); }
graphStatus Tensor::SetOriginShapeDim(const size_t idx, const int64_t v) {
  auto dims = impl->desc.GetOriginShape().GetDims();
  if (idx >= dims.size()) return GRAPH_FAILED;
  dims[idx] = v;
  impl->desc.SetOriginShape(Shape(dims));
  return GRAPH_SUCCESS;
}
int64_t Tensor::GetOriginShapeDim(const size_t idx) const { return impl->desc.GetOriginShape().GetDim(idx); }
graphStatus Tensor::SetOriginFormat(const ge::Format &f) {
  impl->desc.SetOriginFormat(f);
  return GRAPH_SUCCESS;
}
ge::Format Tensor::GetOriginFormat() const { return impl->desc.GetOriginFormat(); }
graphStatus Tensor::SetShapeDimNum(const size_t n) {
  auto dims = impl->desc.GetShape().GetDims();
  dims.resize(n, 0);
  impl->desc.SetShape(Shape(dims));
  return GRAPH_SUCCESS;
}
size_t Tensor::GetShapeDimNum() const { return impl->desc.GetShape().GetDimNum(); }
graphStatus Tensor::SetShapeDim(const size_t idx, const int64_t v) {
  auto dims = impl->desc.GetShape().GetDims();
  if (idx >= dims.size()) return GRAPH_FAILED;
  dims[idx] = v;
  impl->desc.SetShape(Shape(dims));
  return GRAPH_SUCCESS;
}
int64_t Tensor::GetShapeDim(const size_t idx) const { return impl->desc.GetShape().GetDim(idx); }
graphStatus Tensor::SetFormat(const ge::Format &f) {
  impl->desc.SetFormat(f);
  return GRAPH_SUCCESS;
}
ge::Format Tensor::GetFormat() const { return impl->desc.GetFormat(); }
graphStatus Tensor::SetDataType(const ge::DataType &dt) {
  impl->desc.SetDataType(dt);
  return GRAPH_SUCCESS;
}
ge::DataType Tensor::GetDataType() const { return impl->desc.GetDataType(); }
graphStatus Tensor::SetPlacement(const ge::Placement &p) {
  impl->desc.SetPlacement(p);
  return GRAPH_SUCCESS;
}
ge::Placement Tensor::GetPlacement() const { return impl->desc.GetPlacement(); }
Tensor Tensor::Clone() const {
  Tensor t(impl->desc);
  t.impl->owned.assign(impl->data(), impl->data() + impl->size());
  return t;
}

// ---- CompiledGraphSummary ------------------------------------------------------------------
class CompiledGraphSummary::SummaryData {
 public:
  bool is_static = false;
  size_t const_memory = 0, feature_memory = 0;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DataType> dtypes;
};

class CompiledGraphSummary::Builder {
 public:
  static CompiledGraphSummaryPtr Build(bool is_static, size_t const_memory, size_t feature_memory,
                                       const std::vector<std::vector<int64_t>> &shapes,
                                       const std::vector<DataType> &dtypes) {
    CompiledGraphSummaryPtr p(new CompiledGraphSummary());
    p->data_ = std::make_shared<SummaryData>();
    p->data_->is_static = is_static;
    p->data_->const_memory = const_memory;
    p->data_->feature_memory = feature_memory;
    p->data_->shapes = shapes;
    p->data_->dtypes = dtypes;
    return p;
  }
};

CompiledGraphSummary::~CompiledGraphSummary() = default;
// GE (graph_compile_summary_impl.cc): on a graph that is not static these getters fail and report nothing (never a
// -1 shape); a memory size of 0 is reported as 512.
bool CompiledGraphSummary::IsStatic() const { return data_ && data_->is_static; }
Status CompiledGraphSummary::GetConstMemorySize(size_t &size) const {
  if (!IsStatic()) return FAILED;
  size = data_->const_memory ? data_->const_memory : 512;
  return SUCCESS;
}
Status CompiledGraphSummary::GetFeatureMemorySize(size_t &size) const {
  if (!IsStatic()) return FAILED;
  size = data_->feature_memory ? data_->feature_memory : 512;
  return SUCCESS;
}
Status CompiledGraphSummary::GetOutputShapes(std::vector<ge::Shape> &shapes) const {
  if (!IsStatic()) return FAILED;
  shapes.clear();
  for (auto &d : data_->shapes) shapes.emplace_back(d);
  return SUCCESS;
}
Status CompiledGraphSummary::GetOutputDtypes(std::vector<ge::DataType> &dtypes) const {
  if (!IsStatic()) return FAILED;
  dtypes = data_->dtypes;
  return SUCCESS;
}

}  // namespace ge

namespace hostnpu {
ge::CompiledGraphSummaryPtr make_summary(bool is_static, size_t const_memory, size_t feature_memory,
                                         const std::vector<std::vector<int64_t>> &shapes,
                                         const std::vector<ge::DataType> &dtypes) {
  return ge::CompiledGraphSummary::Builder::Build(is_static, const_memory, feature_memory, shapes, dtypes);
}
}  // namespace hostnpu
