// Host NPU: ONNX model metadata without libprotobuf (see onnx_model.h).
//
// Wire format: a message is a sequence of (tag, payload); tag = field_number << 3 | wire_type, as a varint.
// Wire types: 0 varint, 1 fixed64, 2 length-delimited (varint length + bytes), 3/4 start/end group (not
// supported: ONNX never writes groups), 5 fixed32; 6 and 7 are invalid.
//
// Field numbers (onnx/onnx-ml.proto, onnx 1.23):
//   ModelProto: ir_version=1 (varint), producer_name=2, opset_import=8 (OperatorSetIdProto), graph=7
//   OperatorSetIdProto: domain=1, version=2 (varint)
//   GraphProto: node=1, name=2, initializer=5 (TensorProto), sparse_initializer=15 (SparseTensorProto),
//               input=11, output=12 (ValueInfoProto)
//   TensorProto: name=8; SparseTensorProto: values=1 (TensorProto)
//   ValueInfoProto: name=1, type=2 (TypeProto)
//   TypeProto: oneof value { tensor_type=1, sequence_type=4, map_type=5, opaque_type=7, sparse_tensor_type=8,
//              optional_type=9 }, denotation=6
//   TypeProto.Tensor: elem_type=1 (varint int32), shape=2 (TensorShapeProto)
//   TensorShapeProto: dim=1; Dimension: oneof { dim_value=1 (varint int64), dim_param=2 }, denotation=3
//
// Recursion is bounded by the fixed nesting of the messages read (nodes and non-tensor types are skipped,
// never descended into), so hostile input cannot exhaust the stack.
#include "onnx_model.h"

#include <unordered_set>

namespace hostnpu {
namespace onnx {

namespace {

constexpr uint64_t kMaxFieldNumber = (1u << 29) - 1;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

enum class Msg { Model, OpsetId, Graph, Node, Attribute, Tensor, SparseTensor, ValueInfo, Type, TypeTensor, Shape, Dim };

const char *field_name(Msg m, uint64_t f) {
  switch (m) {
    case Msg::Model:
      switch (f) {
        case 1: return "ir_version";
        case 2: return "producer_name";
        case 3: return "producer_version";
        case 4: return "domain";
        case 5: return "model_version";
        case 6: return "doc_string";
        case 7: return "graph";
        case 8: return "opset_import";
        case 14: return "metadata_props";
        case 20: return "training_info";
        case 25: return "functions";
        case 26: return "configuration";
      }
      break;
    case Msg::OpsetId:
      switch (f) {
        case 1: return "domain";
        case 2: return "version";
      }
      break;
    case Msg::Graph:
      switch (f) {
        case 1: return "node";
        case 2: return "name";
        case 5: return "initializer";
        case 10: return "doc_string";
        case 11: return "input";
        case 12: return "output";
        case 13: return "value_info";
        case 14: return "quantization_annotation";
        case 15: return "sparse_initializer";
        case 16: return "metadata_props";
      }
      break;
    case Msg::Node:
      switch (f) {
        case 1: return "input";
        case 2: return "output";
        case 3: return "name";
        case 4: return "op_type";
        case 5: return "attribute";
        case 7: return "domain";
      }
      break;
    case Msg::Attribute:
      switch (f) {
        case 1: return "name";
        case 3: return "i";
        case 5: return "t";
        case 6: return "g";
        case 10: return "tensors";
        case 11: return "graphs";
      }
      break;
    case Msg::Tensor:
      switch (f) {
        case 1: return "dims";
        case 2: return "data_type";
        case 8: return "name";
        case 9: return "raw_data";
      }
      break;
    case Msg::SparseTensor:
      switch (f) {
        case 1: return "values";
        case 2: return "indices";
        case 3: return "dims";
      }
      break;
    case Msg::ValueInfo:
      switch (f) {
        case 1: return "name";
        case 2: return "type";
        case 3: return "doc_string";
        case 4: return "metadata_props";
      }
      break;
    case Msg::Type:
      switch (f) {
        case 1: return "tensor_type";
        case 4: return "sequence_type";
        case 5: return "map_type";
        case 6: return "denotation";
        case 7: return "opaque_type";
        case 8: return "sparse_tensor_type";
        case 9: return "optional_type";
      }
      break;
    case Msg::TypeTensor:
      switch (f) {
        case 1: return "elem_type";
        case 2: return "shape";
      }
      break;
    case Msg::Shape:
      if (f == 1) return "dim";
      break;
    case Msg::Dim:
      switch (f) {
        case 1: return "dim_value";
        case 2: return "dim_param";
        case 3: return "denotation";
      }
      break;
  }
  return nullptr;
}

// Where a nested message sits, as a chain to the root: "graph.input[2].type.tensor_type.shape.dim[1]".
// Only turned into text when an error is reported.
struct Where {
  const Where *parent;
  const char *name;
  int64_t index;  // -1: not an element of a repeated field
};

std::string path_of(const Where *w) {
  if (w == nullptr) return std::string();
  std::string s = path_of(w->parent);
  if (!s.empty()) s += '.';
  s += w->name;
  if (w->index >= 0) s += "[" + std::to_string(w->index) + "]";
  return s;
}

struct Field {
  uint64_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;          // varint / fixed32 / fixed64 payload
  size_t begin = 0, end = 0;   // length-delimited payload [begin, end) as offsets into the whole buffer
};

// Iterates the fields of one message occupying [pos, end) of the buffer. Offsets are absolute, so errors
// point into the original data.
class Reader {
 public:
  Reader(const uint8_t *data, size_t begin, size_t end, Msg msg, const Where *where, std::string &err)
      : d_(data), pos_(begin), end_(end), msg_(msg), where_(where), err_(err) {}

  // 1: a field was read into f; 0: end of the message; -1: malformed (err set).
  int next(Field &f) {
    if (pos_ >= end_) return 0;
    const size_t tag_off = pos_;
    uint64_t tag = 0;
    if (!varint(tag, kTagVarint, 0, tag_off)) return -1;
    f.number = tag >> 3;
    f.wire = static_cast<uint32_t>(tag & 7);
    f.value = 0;
    f.begin = f.end = 0;
    if (f.number == 0 || f.number > kMaxFieldNumber) {
      err_ = "not an ONNX model (or a corrupt one): invalid field number " + std::to_string(f.number) +
             " at offset " + std::to_string(tag_off) + in_where();
      return -1;
    }
    switch (f.wire) {
      case kVarint:
        return varint(f.value, kValueVarint, f.number, pos_) ? 1 : -1;
      case kFixed64:
        return fixed(f, 8) ? 1 : -1;
      case kFixed32:
        return fixed(f, 4) ? 1 : -1;
      case kLen: {
        uint64_t len = 0;
        if (!varint(len, kLengthVarint, f.number, pos_)) return -1;
        const size_t remain = end_ - pos_;
        if (len > remain) {
          err_ = prefix() + ": " + field_desc(f.number) + " needs " + std::to_string(len) + " bytes at offset " +
                 std::to_string(pos_) + " but only " + std::to_string(remain) + " remain" + in_where();
          return -1;
        }
        f.begin = pos_;
        f.end = pos_ + static_cast<size_t>(len);
        pos_ = f.end;
        return 1;
      }
      case kStartGroup:
      case kEndGroup:
        err_ = "not an ONNX model (or a corrupt one): unsupported wire type " + std::to_string(f.wire) +
               (f.wire == kStartGroup ? " (start group)" : " (end group)") + " for " + field_desc(f.number) +
               " at offset " + std::to_string(tag_off) + in_where() + " (ONNX does not use protobuf groups)";
        return -1;
      default:
        err_ = "not an ONNX model (or a corrupt one): invalid wire type " + std::to_string(f.wire) + " for " +
               field_desc(f.number) + " at offset " + std::to_string(tag_off) + in_where();
        return -1;
    }
  }

  std::string field_desc(uint64_t number) const {
    std::string s = "field " + std::to_string(number);
    if (const char *n = field_name(msg_, number)) s += std::string(" (") + n + ")";
    return s;
  }

 private:
  bool top() const { return where_ == nullptr; }
  // A field running past the end of the whole buffer means the data was cut short; past the end of a
  // nested message (whose own length fit), the data is inconsistent.
  std::string prefix() const { return top() ? "truncated ONNX model" : "corrupt ONNX model"; }
  std::string in_where() const { return top() ? std::string() : " in " + path_of(where_); }
  std::string end_desc() const {
    return top() ? std::string("the end of the data")
                 : "the end of " + path_of(where_) + " (offset " + std::to_string(end_) + ")";
  }

  enum VarintKind { kTagVarint, kValueVarint, kLengthVarint };

  std::string varint_desc(VarintKind kind, uint64_t number) const {
    if (kind == kTagVarint) return "a field tag";
    return (kind == kValueVarint ? "the value of " : "the length of ") + field_desc(number);
  }

  // Error text is only built on failure: this runs for every field of every message.
  bool varint(uint64_t &v, VarintKind kind, uint64_t number, size_t start) {
    v = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ >= end_) {
        err_ = prefix() + ": " + varint_desc(kind, number) + " at offset " + std::to_string(start) + " runs past " +
               end_desc();
        return false;
      }
      const uint8_t b = d_[pos_++];
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) return true;
    }
    err_ = "not an ONNX model (or a corrupt one): " + varint_desc(kind, number) + " at offset " +
           std::to_string(start) + " is a varint longer than 10 bytes" + in_where();
    return false;
  }

  bool fixed(Field &f, size_t n) {
    const size_t remain = end_ - pos_;
    if (remain < n) {
      err_ = prefix() + ": " + field_desc(f.number) + " (fixed" + std::to_string(n * 8) + ") needs " +
             std::to_string(n) + " bytes at offset " + std::to_string(pos_) + " but only " +
             std::to_string(remain) + " remain" + in_where();
      return false;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(d_[pos_ + i]) << (8 * i);
    pos_ += n;
    f.value = v;
    return true;
  }

  const uint8_t *d_;
  size_t pos_, end_;
  Msg msg_;
  const Where *where_;
  std::string &err_;
};

struct Parser {
  const uint8_t *d;
  std::string &err;

  std::string str(const Field &f) const {
    return std::string(reinterpret_cast<const char *>(d + f.begin), f.end - f.begin);
  }

  // TensorShapeProto.Dimension: dim_value and dim_param are a oneof, so the later one clears the other.
  bool dim(const Field &in, const Where *w, Dim &out) {
    Reader r(d, in.begin, in.end, Msg::Dim, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kVarint) {
        out.value = static_cast<int64_t>(f.value);
        out.param.clear();
      } else if (f.number == 2 && f.wire == kLen) {
        out.param = str(f);
        out.value = -1;
      }
    }
    if (out.value < 0) out.value = -1;  // a negative dim_value is not a size: treat it as symbolic
    return k == 0;
  }

  bool shape(const Field &in, const Where *w, ValueInfo &vi) {
    Reader r(d, in.begin, in.end, Msg::Shape, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kLen) {
        const Where dw{w, "dim", static_cast<int64_t>(vi.dims.size())};
        Dim dm;
        if (!dim(f, &dw, dm)) return false;
        vi.dims.push_back(std::move(dm));
      }
    }
    return k == 0;
  }

  bool type_tensor(const Field &in, const Where *w, ValueInfo &vi) {
    Reader r(d, in.begin, in.end, Msg::TypeTensor, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kVarint) {
        vi.elem_type = static_cast<int32_t>(static_cast<uint32_t>(f.value));  // int32 field: low 32 bits
      } else if (f.number == 2 && f.wire == kLen) {
        vi.has_shape = true;
        const Where sw{w, "shape", -1};
        if (!shape(f, &sw, vi)) return false;
      }
    }
    return k == 0;
  }

  // TypeProto: only tensor_type is read; any other member of the oneof makes the value a non-tensor.
  bool type(const Field &in, const Where *w, ValueInfo &vi, bool &is_tensor) {
    Reader r(d, in.begin, in.end, Msg::Type, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.wire != kLen) continue;
      if (f.number == 1) {
        if (!is_tensor) {
          vi.elem_type = 0;
          vi.has_shape = false;
          vi.dims.clear();
          is_tensor = true;
        }
        vi.kind = "tensor";
        const Where tw{w, "tensor_type", -1};
        if (!type_tensor(f, &tw, vi)) return false;
      } else if (f.number == 4 || f.number == 5 || f.number == 7 || f.number == 8 || f.number == 9) {
        is_tensor = false;
        vi.kind = f.number == 4 ? "sequence" : f.number == 5 ? "map" : f.number == 7 ? "opaque"
                  : f.number == 8 ? "sparse_tensor" : "optional";
        vi.elem_type = 0;
        vi.has_shape = false;
        vi.dims.clear();
      }
    }
    return k == 0;
  }

  bool value_info(const Field &in, const Where *w, ValueInfo &vi) {
    Reader r(d, in.begin, in.end, Msg::ValueInfo, w, err);
    Field f;
    int k;
    bool is_tensor = false;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kLen) {
        vi.name = str(f);
      } else if (f.number == 2 && f.wire == kLen) {
        const Where tw{w, "type", -1};
        if (!type(f, &tw, vi, is_tensor)) return false;
      }
    }
    return k == 0;
  }

  bool tensor_name(const Field &in, const Where *w, std::string &name, int64_t *data_type = nullptr) {
    Reader r(d, in.begin, in.end, Msg::Tensor, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.number == 8 && f.wire == kLen) name = str(f);
      if (f.number == 2 && f.wire == kVarint && data_type) *data_type = static_cast<int64_t>(f.value);
    }
    return k == 0;
  }

  static constexpr int kMaxSubgraphDepth = 32;
  static constexpr int64_t kString = 8;  // TensorProto.STRING

  void note_string(ModelInfo &m, const std::string &where) {
    if (m.string_tensor.empty()) m.string_tensor = where;
  }

  // AttributeProto: subgraphs (g, graphs) are scanned; tensors (t, tensors) and Cast's "to" are checked for strings.
  bool attribute(const Field &in, const Where *w, int depth, ModelInfo &m, const NodeInfo &node) {
    Reader r(d, in.begin, in.end, Msg::Attribute, w, err);
    Field f;
    int k;
    std::string name;
    int64_t ival = -1;
    int64_t n_graphs = 0;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kLen) {
        name = str(f);
      } else if (f.number == 3 && f.wire == kVarint) {
        ival = static_cast<int64_t>(f.value);
      } else if ((f.number == 5 || f.number == 10) && f.wire == kLen) {
        const Where tw{w, f.number == 5 ? "t" : "tensors", -1};
        std::string tname;
        int64_t dt = 0;
        if (!tensor_name(f, &tw, tname, &dt)) return false;
        if (dt == kString) note_string(m, "a STRING constant in node '" + node.name + "' (" + node.op_type + ")");
      } else if ((f.number == 6 || f.number == 11) && f.wire == kLen) {
        const Where gw{w, f.number == 6 ? "g" : "graphs", f.number == 11 ? n_graphs++ : -1};
        if (!subgraph(f, &gw, depth + 1, m)) return false;
      }
    }
    if (k == 0 && name == "to" && ival == kString && node.op_type == "Cast")
      note_string(m, "a Cast to STRING in node '" + node.name + "'");
    return k == 0;
  }

  bool node(const Field &in, const Where *w, int depth, ModelInfo &m) {
    Reader r(d, in.begin, in.end, Msg::Node, w, err);
    Field f;
    int k;
    NodeInfo n;
    n.depth = depth;
    std::vector<Field> attrs;
    while ((k = r.next(f)) > 0) {
      if (f.wire != kLen) continue;
      if (f.number == 3) n.name = str(f);
      else if (f.number == 4) n.op_type = str(f);
      else if (f.number == 7) n.domain = str(f);
      else if (f.number == 5) attrs.push_back(f);
    }
    if (k < 0) return false;
    for (size_t i = 0; i < attrs.size(); ++i) {
      const Where aw{w, "attribute", static_cast<int64_t>(i)};
      if (!attribute(attrs[i], &aw, depth, m, n)) return false;
    }
    m.nodes.push_back(std::move(n));
    return true;
  }

  bool string_value_info(const Field &in, const Where *w, ModelInfo &m, const char *what) {
    ValueInfo vi;
    if (!value_info(in, w, vi)) return false;
    if (vi.elem_type == kString) note_string(m, std::string(what) + " '" + vi.name + "'");
    return true;
  }

  // A subgraph (If branch, Loop/Scan body): its nodes are recorded, its tensors checked for strings.
  bool subgraph(const Field &in, const Where *w, int depth, ModelInfo &m) {
    if (depth > kMaxSubgraphDepth) {
      err = "not an ONNX model GE can parse: subgraphs are nested more than " + std::to_string(kMaxSubgraphDepth) +
            " deep at " + path_of(w);
      return false;
    }
    Reader r(d, in.begin, in.end, Msg::Graph, w, err);
    Field f;
    int k;
    int64_t idx = 0;
    while ((k = r.next(f)) > 0) {
      if (f.wire != kLen) continue;
      const Where ew{w, field_name(Msg::Graph, f.number) ? field_name(Msg::Graph, f.number) : "field", idx++};
      if (f.number == 1) {
        if (!node(f, &ew, depth, m)) return false;
      } else if (f.number == 5) {
        std::string tname;
        int64_t dt = 0;
        if (!tensor_name(f, &ew, tname, &dt)) return false;
        if (dt == kString) note_string(m, "subgraph initializer '" + tname + "'");
      } else if (f.number == 11 || f.number == 12 || f.number == 13) {
        if (!string_value_info(f, &ew, m, "subgraph tensor")) return false;
      }
    }
    return k == 0;
  }

  bool sparse_name(const Field &in, const Where *w, std::string &name) {
    Reader r(d, in.begin, in.end, Msg::SparseTensor, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kLen) {
        const Where vw{w, "values", -1};
        if (!tensor_name(f, &vw, name)) return false;
      }
    }
    return k == 0;
  }

  // A graph field seen more than once is merged, as protobuf does: repeated fields append, the name is the last.
  bool graph(const Field &in, const Where *w, ModelInfo &m, std::vector<ValueInfo> &all_inputs,
             std::vector<std::string> &sparse_names) {
    Reader r(d, in.begin, in.end, Msg::Graph, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.wire != kLen) continue;
      switch (f.number) {
        case 1: {
          const Where nw{w, "node", static_cast<int64_t>(m.node_count)};
          ++m.node_count;
          if (!node(f, &nw, 0, m)) return false;
          break;
        }
        case 13: {
          const Where vw{w, "value_info", -1};
          if (!string_value_info(f, &vw, m, "tensor")) return false;
          break;
        }
        case 2:
          m.graph_name = str(f);
          break;
        case 5: {
          const Where iw{w, "initializer", static_cast<int64_t>(m.initializer_names.size())};
          std::string name;
          int64_t dt = 0;
          if (!tensor_name(f, &iw, name, &dt)) return false;
          if (dt == kString) note_string(m, "initializer '" + name + "'");
          m.initializer_names.push_back(std::move(name));
          break;
        }
        case 15: {
          const Where iw{w, "sparse_initializer", static_cast<int64_t>(sparse_names.size())};
          std::string name;
          if (!sparse_name(f, &iw, name)) return false;
          sparse_names.push_back(std::move(name));
          break;
        }
        case 11:
        case 12: {
          std::vector<ValueInfo> &list = f.number == 11 ? all_inputs : m.outputs;
          const Where vw{w, f.number == 11 ? "input" : "output", static_cast<int64_t>(list.size())};
          ValueInfo vi;
          if (!value_info(f, &vw, vi)) return false;
          list.push_back(std::move(vi));
          break;
        }
        default:
          break;
      }
    }
    return k == 0;
  }

  bool opset(const Field &in, const Where *w, std::pair<std::string, int64_t> &op) {
    Reader r(d, in.begin, in.end, Msg::OpsetId, w, err);
    Field f;
    int k;
    while ((k = r.next(f)) > 0) {
      if (f.number == 1 && f.wire == kLen)
        op.first = str(f);
      else if (f.number == 2 && f.wire == kVarint)
        op.second = static_cast<int64_t>(f.value);
    }
    return k == 0;
  }
};

}  // namespace

bool parse_model(const uint8_t *data, size_t size, ModelInfo &out, std::string &err) {
  out = ModelInfo{};
  err.clear();
  if (size == 0) {
    err = "not an ONNX model: the data is empty";
    return false;
  }
  if (data == nullptr) {
    err = "not an ONNX model: the data pointer is null";
    return false;
  }
  ModelInfo m;
  std::vector<ValueInfo> all_inputs;
  std::vector<std::string> sparse_names;
  bool has_graph = false;
  Parser p{data, err};
  Reader r(data, 0, size, Msg::Model, nullptr, err);
  Field f;
  int k;
  while ((k = r.next(f)) > 0) {
    if (f.number == 1 && f.wire == kVarint) {
      m.ir_version = static_cast<int64_t>(f.value);
    } else if (f.number == 8 && f.wire == kLen) {
      const Where ow{nullptr, "opset_import", static_cast<int64_t>(m.opsets.size())};
      std::pair<std::string, int64_t> op{std::string(), 0};
      if (!p.opset(f, &ow, op)) return false;
      m.opsets.push_back(std::move(op));
    } else if (f.number == 7 && f.wire == kLen) {
      has_graph = true;
      const Where gw{nullptr, "graph", -1};
      if (!p.graph(f, &gw, m, all_inputs, sparse_names)) return false;
    }
  }
  if (k < 0) return false;
  if (!has_graph) {
    err = "not an ONNX model: no graph (field 7) found";
    return false;
  }
  for (auto &n : sparse_names) m.initializer_names.push_back(std::move(n));
  m.declared_inputs = all_inputs.size();
  std::string io_string;  // a string graph input or output is named first: it says the most
  for (auto *list : {&all_inputs, &m.outputs})
    for (auto &vi : *list)
      if (vi.elem_type == 8 && io_string.empty())
        io_string = std::string(list == &all_inputs ? "graph input '" : "graph output '") + vi.name + "'";
  if (!io_string.empty()) m.string_tensor = io_string;
  const std::unordered_set<std::string> inits(m.initializer_names.begin(), m.initializer_names.end());
  for (auto &vi : all_inputs)
    if (inits.count(vi.name) == 0) m.inputs.push_back(std::move(vi));
  out = std::move(m);
  return true;
}

const char *elem_type_name(int32_t elem_type) {
  static const char *const kNames[] = {
      "UNDEFINED",      "FLOAT",      "UINT8",        "INT8",       "UINT16",     "INT16",
      "INT32",          "INT64",      "STRING",       "BOOL",       "FLOAT16",    "DOUBLE",
      "UINT32",         "UINT64",     "COMPLEX64",    "COMPLEX128", "BFLOAT16",   "FLOAT8E4M3FN",
      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",    "INT4",       "FLOAT4E2M1",
      "FLOAT8E8M0",     "UINT2",      "INT2",         "FLOAT6E2M3", "FLOAT6E3M2",
  };
  if (elem_type < 0 || static_cast<size_t>(elem_type) >= sizeof(kNames) / sizeof(kNames[0])) return "unknown";
  return kNames[elem_type];
}

}  // namespace onnx
}  // namespace hostnpu
