/* gert: CANN 8.5 ge/ge_api.h (GE inc/external/ge/ge_api.h), the subset gert uses: GE initialization,
 * error messages, and ge::Session with the compile / load / execute-on-stream flow
 *   AddGraph -> CompileGraph -> GetCompiledGraphSummary -> LoadGraph(stream) -> ExecuteGraphWithStreamAsync
 * and the synchronous RunGraph.  Signatures are CANN's; the library (libge_runner, or the host NPU)
 * defines them.  Session methods mostly return FAILED on error; GEGetErrorMsgV2() has the text.
 * Not declared here: BuildGraph, RunGraphAsync, the feature-memory setters, external allocators,
 * variables, callbacks, data-flow feed/fetch, graph sharding and saving. */
#ifndef INC_EXTERNAL_GE_GE_API_H_
#define INC_EXTERNAL_GE_GE_API_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ge/ge_api_error_codes.h"
#include "ge/ge_api_types.h"
#include "ge/ge_graph_compile_summary.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "exe_graph/runtime/tensor.h"

namespace ge {
ATTRIBUTED_DEPRECATED(GE_FUNC_VISIBILITY Status GEInitialize(const std::map<AscendString, AscendString> &))
GE_FUNC_VISIBILITY Status GEInitialize(const std::map<std::string, std::string> &options);
GE_FUNC_VISIBILITY Status GEInitialize(const std::map<AscendString, AscendString> &options);
/* Releases everything GE holds; Sessions must be gone. */
GE_FUNC_VISIBILITY Status GEFinalize();

/* The error / warning text of the last failing GE call (in this thread). */
GE_FUNC_VISIBILITY ge::AscendString GEGetErrorMsgV2();
GE_FUNC_VISIBILITY ge::AscendString GEGetWarningMsgV2();

class GE_FUNC_VISIBILITY Session {
 public:
  ATTRIBUTED_DEPRECATED(Session(const std::map<AscendString, AscendString> &))
  explicit Session(const std::map<std::string, std::string> &options);
  explicit Session(const std::map<AscendString, AscendString> &options);
  ~Session();

  Status AddGraph(uint32_t graph_id, const Graph &graph);
  ATTRIBUTED_DEPRECATED(Status AddGraph(uint32_t, const Graph &, const std::map<AscendString, AscendString> &))
  Status AddGraph(uint32_t graph_id, const Graph &graph, const std::map<std::string, std::string> &options);
  Status AddGraph(uint32_t graph_id, const Graph &graph, const std::map<AscendString, AscendString> &options);
  Status AddGraphWithCopy(uint32_t graph_id, const Graph &graph);
  Status AddGraphWithCopy(uint32_t graph_id, const Graph &graph, const std::map<AscendString, AscendString> &options);
  Status RemoveGraph(uint32_t graph_id);

  /* Synchronous, host tensors in and out. */
  Status RunGraph(uint32_t graph_id, const std::vector<Tensor> &inputs, std::vector<Tensor> &outputs);

  /* Only for a graph that CompileGraph has compiled, and only once per graph. */
  Status LoadGraph(const uint32_t graph_id, const std::map<AscendString, AscendString> &options, void *stream) const;

  Status RunGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<Tensor> &inputs,
                                 std::vector<Tensor> &outputs);
  /* Enqueues one run on stream.  Inputs must be device memory.  A dynamic graph accepts an empty
   * outputs vector and allocates the outputs; a static graph needs them allocated by the caller. */
  Status ExecuteGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<gert::Tensor> &inputs,
                                     std::vector<gert::Tensor> &outputs);

  Status CompileGraph(uint32_t graph_id);
  CompiledGraphSummaryPtr GetCompiledGraphSummary(uint32_t graph_id);

  uint64_t GetSessionId() const;

 private:
  uint64_t sessionId_{0};
};
}  // namespace ge

/* The same operations in C-linkage form. */
extern "C" {
ge::Status GeSessionLoadGraph(ge::Session &session, uint32_t graph_id,
                              const std::map<ge::AscendString, ge::AscendString> &options, void *stream);
ge::Status GeSessionExecuteGraphWithStreamAsync(ge::Session &session, uint32_t graph_id, void *stream,
                                                const std::vector<gert::Tensor> &inputs,
                                                std::vector<gert::Tensor> &outputs);
}  // extern "C"

#endif  // INC_EXTERNAL_GE_GE_API_H_
