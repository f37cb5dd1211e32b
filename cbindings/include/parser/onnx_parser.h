/* gert: CANN 8.5 parser/onnx_parser.h (GE inc/parser/external/parser/onnx_parser.h; library
 * libfmk_onnx_parser) -- ONNX model (file or memory) to ge::Graph.  parser_params keys must be in
 * ge::ir_option::ir_parser_suppported_options (ge/ge_api_types.h); any other key fails. */
#ifndef INC_EXTERNAL_PARSER_ONNX_PARSER_H_
#define INC_EXTERNAL_PARSER_ONNX_PARSER_H_

#ifndef PARSER_FUNC_VISIBILITY
#if defined(FUNC_VISIBILITY) && defined(_MSC_VER)
#define PARSER_FUNC_VISIBILITY _declspec(dllexport)
#elif defined(FUNC_VISIBILITY)
#define PARSER_FUNC_VISIBILITY __attribute__((visibility("default")))
#else
#define PARSER_FUNC_VISIBILITY
#endif
#endif

#include <cstddef>
#include <map>
#include "graph/ascend_string.h"
#include "graph/ge_error_codes.h"
#include "graph/graph.h"

namespace ge {
PARSER_FUNC_VISIBILITY graphStatus aclgrphParseONNX(const char *model_file,
                                                    const std::map<ge::AscendString, ge::AscendString> &parser_params,
                                                    ge::Graph &graph);
PARSER_FUNC_VISIBILITY graphStatus aclgrphParseONNXFromMem(const char *buffer, size_t size,
                                                           const std::map<ge::AscendString, ge::AscendString> &parser_params,
                                                           ge::Graph &graph);
}  // namespace ge

#endif  // INC_EXTERNAL_PARSER_ONNX_PARSER_H_
