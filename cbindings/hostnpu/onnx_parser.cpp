// Host NPU GE: the ONNX parser's entry points (parser/onnx_parser.h). In the toolkit layout (build_toolkit.py)
// this is libfmk_onnx_parser.so, as in CANN; the parsing itself lives with ge::Graph (ge_graph.cpp).
#include <memory>
#include <string>

#include "ge_state.h"
#include "parser/onnx_parser.h"

namespace ge {

graphStatus aclgrphParseONNX(const char *model_file, const std::map<AscendString, AscendString> &parser_params,
                             Graph &graph) try {
  return hostnpu::parse_onnx_file(model_file, "aclgrphParseONNX", parser_params, graph);
} HOSTNPU_GE_GUARD

graphStatus aclgrphParseONNXFromMem(const char *buffer, size_t size,
                                    const std::map<AscendString, AscendString> &parser_params, Graph &graph) try {
  if (!buffer || size == 0)
    return hostnpu::ge_fail(GRAPH_PARAM_INVALID, "aclgrphParseONNXFromMem: the buffer is empty");
  auto bytes = std::make_shared<std::string>(buffer, size);
  return hostnpu::parse_onnx(*bytes, hostnpu::ModelBytes::held(bytes), "aclgrphParseONNXFromMem", parser_params, graph);
} HOSTNPU_GE_GUARD

}  // namespace ge
