/* gert: CANN 8.5 graph/graph.h (METADEF; shipped by GE as inc/graph_metadef/external/graph/graph.h),
 * the subset gert uses: a ge::Graph is created empty and filled by a parser (parser/onnx_parser.h).
 * CANN's header also declares the Operator / GNode graph-building API, which gert does not use. */
#ifndef INC_EXTERNAL_GRAPH_GRAPH_H_
#define INC_EXTERNAL_GRAPH_GRAPH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "graph/ascend_string.h"
#include "graph/ge_error_codes.h"
#include "graph/types.h"

namespace ge {
class Graph;
class GraphImpl;
class GraphUtils;
class GraphUtilsEx;

using GraphImplPtr = std::shared_ptr<GraphImpl>;
using GraphPtr = std::shared_ptr<Graph>;
using ConstGraphPtr = std::shared_ptr<const Graph>;

class GE_FUNC_DEV_VISIBILITY GE_FUNC_HOST_VISIBILITY Graph {
 public:
  ATTRIBUTED_DEPRECATED(Graph(const char_t *))
  explicit Graph(const std::string &name);
  explicit Graph(const char_t *name);
  Graph() = default;
  ~Graph() = default;

  /* False for a default-constructed graph that no parser has filled. */
  bool IsValid() const;

  graphStatus SaveToFile(const char_t *file_name) const;
  graphStatus LoadFromFile(const char_t *file_name);
  graphStatus GetName(AscendString &name) const;

 private:
  friend class GraphUtils;    /* as in CANN: the library reaches the implementation through these */
  friend class GraphUtilsEx;
  GraphImplPtr impl_{nullptr};
};
}  // namespace ge

#endif  // INC_EXTERNAL_GRAPH_GRAPH_H_
