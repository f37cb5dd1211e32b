/* gert: CANN 8.5 ge/ge_graph_compile_summary.h, the subset gert uses: what
 * Session::GetCompiledGraphSummary reports about a compiled graph.  Only the library creates
 * summaries (through its CompiledGraphSummary::Builder); callers hold them by CompiledGraphSummaryPtr.
 * CANN's header also declares feature-memory, stream and external-weight queries and the stream
 * allocation summary classes, which gert does not use. */
#ifndef INC_EXTERNAL_GE_GE_GRAPH_COMPILE_SUMMARY_H
#define INC_EXTERNAL_GE_GE_GRAPH_COMPILE_SUMMARY_H

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>
#include "ge_api_types.h"
#include "ge_error_codes.h"
#include "graph/tensor.h"
#include "graph/types.h"

namespace ge {
class GE_FUNC_VISIBILITY CompiledGraphSummary {
 public:
  class Builder;
  class SummaryData;

  ~CompiledGraphSummary();
  CompiledGraphSummary &operator=(const CompiledGraphSummary &) & = delete;
  CompiledGraphSummary(const CompiledGraphSummary &) = delete;

  /* True if every shape was fixed at compile time (a static graph). */
  bool IsStatic() const;
  Status GetConstMemorySize(size_t &size) const;
  /* Feature-map memory, inputs and outputs excluded. */
  Status GetFeatureMemorySize(size_t &size) const;
  Status GetOutputShapes(std::vector<ge::Shape> &shapes) const;
  Status GetOutputDtypes(std::vector<ge::DataType> &dtypes) const;

 private:
  CompiledGraphSummary() = default;
  std::shared_ptr<SummaryData> data_{nullptr};
};

using CompiledGraphSummaryPtr = std::shared_ptr<CompiledGraphSummary>;
}  // namespace ge

#endif  // INC_EXTERNAL_GE_GE_GRAPH_COMPILE_SUMMARY_H
