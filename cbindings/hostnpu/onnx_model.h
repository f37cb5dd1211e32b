// Host NPU: ONNX model metadata without libprotobuf.
// A small reader of the protobuf wire format that pulls out what the GE graph layer needs from a serialized
// ONNX ModelProto: IR version, opset imports, graph name, the graph's inputs and outputs (name, element type,
// shape), the node count and the initializer names. Field numbers follow onnx/onnx-ml.proto (onnx 1.23).
// Parsing follows protobuf's rules where they matter for this subset: unknown fields are skipped (as are
// known fields arriving with an unexpected wire type), the last value of a scalar wins, a message field seen
// twice is merged, and a oneof member resets the others. Groups (wire types 3/4) are rejected: ONNX never
// writes them. Every read is bounds-checked, so any byte string is safe to pass.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hostnpu {
namespace onnx {

// value >= 0: fixed; otherwise symbolic (param = dim_param, may be empty for an unnamed dynamic dim)
struct Dim {
  int64_t value = -1;
  std::string param;
};

// elem_type = ONNX TensorProto.DataType value; 0 and has_shape false for non-tensor types (sequence, map, ...)
struct ValueInfo {
  std::string name;
  std::string kind;  // the TypeProto member: "tensor", "sequence", "map", "optional", ...; "" when there is no type
  int32_t elem_type = 0;
  bool has_shape = false;
  std::vector<Dim> dims;
};

// A node of the graph or of a subgraph (an If branch, a Loop body): what the GE parser's pre-check looks at.
struct NodeInfo {
  std::string op_type, domain, name;
  int depth = 0;  // 0: the main graph, 1: a subgraph of one of its nodes, ...
};

struct ModelInfo {
  int64_t ir_version = 0;
  std::vector<std::pair<std::string, int64_t>> opsets;  // (domain, version)
  std::string graph_name;
  std::vector<ValueInfo> inputs;  // graph inputs that are NOT initializers (older IRs list initializers as inputs too)
  std::vector<ValueInfo> outputs;
  size_t declared_inputs = 0;     // graph.input as written, initializers included (GE's ParseInput counts these)
  size_t node_count = 0;
  std::vector<std::string> initializer_names;
  std::vector<NodeInfo> nodes;    // every node, subgraphs included, depth first
  // The first string (DT_STRING) tensor anywhere: a graph input/output/value_info/initializer or constant of
  // element type STRING, or a Cast to STRING ("" if none). Says where, e.g. "initializer 'vocab'".
  std::string string_tensor;
};

// Parses a serialized ONNX ModelProto. On failure returns false and sets err to one clear sentence saying what is wrong
// and where (e.g. "truncated ONNX model: field 7 (graph) needs 1234 bytes at offset 56 but only 99 remain",
// "not an ONNX model: no graph (field 7) found", "invalid wire type 7 at offset 3").
bool parse_model(const uint8_t *data, size_t size, ModelInfo &out, std::string &err);
const char *elem_type_name(int32_t elem_type);  // "FLOAT", "UINT8", ... "UNDEFINED" / "unknown"

}  // namespace onnx
}  // namespace hostnpu
