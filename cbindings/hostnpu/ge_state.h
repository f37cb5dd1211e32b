// Host NPU GE: graphs, sessions and the compute provider, shared by the GE entry points.
#pragma once

#include <atomic>
#include <cxxabi.h>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ge/ge_api.h"
#include "gert_host/graph_provider.h"
#include "onnx_model.h"

namespace hostnpu {

// One graph input or output as GE sees it: dims < 0 are dynamic.
struct IOSpec {
  std::string name;
  ge::DataType dtype = ge::DT_UNDEFINED;
  int32_t onnx_type = 0;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;  // ONNX dim_param per axis ("" when fixed or unnamed)
};

std::string dims_str(const std::vector<int64_t> &dims);

// "a;b;" -> {"a", "b", ""}: a trailing separator leaves an empty last item, so "1,2," has a bad (empty) dim.
std::vector<std::string> split(const std::string &s, char sep);
bool parse_i64(const std::string &s, int64_t &v);
// A shape spec "name:d0,d1,...;name:..." (parser input_shape, option ge.inputShape): dims >= -1, -1 dynamic.
// Fails with `code`, naming `key` and the bad entry.
ge::Status parse_shape_spec(const std::string &spec, const char *key, const char *api, ge::Status code,
                            std::vector<std::pair<std::string, std::vector<int64_t>>> &out);
ge::DataType dtype_from_onnx(int32_t onnx_type);
const char *dtype_name(ge::DataType dt);

// Sets the calling thread's GEGetErrorMsgV2 / GEGetWarningMsgV2 text.
ge::Status ge_fail(ge::Status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ge_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The status a GE entry point returns for a C++ exception it caught (call it from a catch block): ge::FAILED, with
// the exception's text as GEGetErrorMsgV2. Entry points called from Cython never let an exception escape.
ge::Status ge_internal_failure(const char *api);
// Ends a GE entry point's function-try-block: `Status f(args) try { ... } HOSTNPU_GE_GUARD`.
#define HOSTNPU_GE_GUARD \
  catch (abi::__forced_unwind &) { throw; } catch (...) { return ::hostnpu::ge_internal_failure(__func__); }

ge::CompiledGraphSummaryPtr make_summary(bool is_static, size_t const_memory, size_t feature_memory,
                                         const std::vector<std::vector<int64_t>> &shapes,
                                         const std::vector<ge::DataType> &dtypes);

// Builds a Graph from a serialized ONNX model (or a model file) and parser_params; `api` names the caller in errors.
ge::graphStatus parse_onnx(std::shared_ptr<const std::string> bytes, const char *api,
                           const std::map<ge::AscendString, ge::AscendString> &params, ge::Graph &graph);
ge::graphStatus parse_onnx_file(const char *path, const char *api,
                                const std::map<ge::AscendString, ge::AscendString> &params, ge::Graph &graph);

// gertHostCompileOption's key for the compiled graph's model directory (GraphImpl::model_dir), not a GE option.
constexpr const char *kModelDirOption = "gert.host.model_dir";

// The provider registered by gertHostSetGraphProvider (a copy), or null.
std::shared_ptr<const gertHostGraphProvider> graph_provider();

}  // namespace hostnpu

namespace ge {
// A parsed ONNX model. Immutable after parsing, so Graph copies share it.
class GraphImpl {
 public:
  std::string name;
  std::shared_ptr<const std::string> model;  // the serialized ONNX ModelProto
  // The directory of the model file it was parsed from (aclgrphParseONNX: its external data resolves there), "" when
  // parsed from memory. Canonical (symlinks resolved), so the provider checks external data paths against it.
  std::string model_dir;
  std::vector<hostnpu::IOSpec> inputs, outputs;
  size_t node_count = 0;
};

// The host NPU's access to a Graph's implementation (CANN's graph.h befriends GraphUtilsEx).
class GraphUtilsEx {
 public:
  static const GraphImplPtr &Impl(const Graph &g) { return g.impl_; }
  static void SetImpl(Graph &g, GraphImplPtr impl) { g.impl_ = std::move(impl); }
};
}  // namespace ge
