/* gert: CANN 8.5 ge/ge_api_types.h (METADEF inc/external/ge_common/ge_api_types.h), the subset gert
 * uses: ge::Status, the run callbacks, and the option keys of shared/docs/cann-api.md sections 2-3.
 * Each key has CANN's C++ type as well as its string: some are `const char *const`, some
 * `const std::string` (the probe checks both). */
#ifndef INC_EXTERNAL_GE_COMMON_GE_API_TYPES_H_
#define INC_EXTERNAL_GE_COMMON_GE_API_TYPES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>
#include "graph/tensor.h"
#include "graph/types.h"
#include "exe_graph/runtime/tensor.h"

namespace ge {
/* ---- options of GEInitialize (global), Session (session) and AddGraph (graph) ---- */
const char_t *const OPTION_GRAPH_RUN_MODE = "ge.graphRunMode";  /* "0" inference (PREDICTION), "1" train */
const char_t *const OPTION_EXEC_DEVICE_ID = "ge.exec.deviceId";
const char_t *const OPTION_SESSION_DEVICE_ID = "ge.session_device_id";

const char_t *const OPTION_EXEC_ENABLE_DUMP = "ge.exec.enableDump";
const char_t *const OPTION_EXEC_DUMP_PATH = "ge.exec.dumpPath";
const char_t *const OPTION_EXEC_DUMP_MODE = "ge.exec.dumpMode";

const char_t *const OPTION_EXEC_DYNAMIC_INPUT = "ge.exec.dynamicInput";
const char_t *const OPTION_EXEC_DYNAMIC_EXECUTE_MODE = "ge.exec.dynamicGraphExecuteMode";
const char_t *const OPTION_EXEC_DATA_INPUTS_SHAPE_RANGE = "ge.exec.dataInputsShapeRange";

const std::string MEMORY_OPTIMIZATION_POLICY = "ge.exec.memoryOptimizationPolicy";
const std::string STATIC_MEMORY_POLICY = "ge.exec.staticMemoryPolicy";
const char_t *const OPTION_FEATURE_BASE_REFRESHABLE = "ge.featureBaseRefreshable";
const char_t *const OPTION_CONST_LIFECYCLE = "ge.constLifecycle";

/* The same keys as `const char *` (CANN's configure_option namespace). */
namespace configure_option {
const char_t *const STREAM_NUM = "ge.streamNum";
const char_t *const OUTPUT_NODE_NAME = "ge.outputNodeName";
const char_t *const PRECISION_MODE = "ge.exec.precision_mode";
const char_t *const PRECISION_MODE_V2 = "ge.exec.precision_mode_v2";
const char_t *const STREAM_MAX_PARALLEL_NUM = "ge.streamMaxParallelNum";
const char_t *const OUTPUT_DATATYPE = "ge.outputDatatype";
const char_t *const SOC_VERSION = "ge.socVersion";
const char_t *const AICORE_NUM = "ge.aicoreNum";
const char_t *const INPUT_FP16_NODES = "ge.INPUT_NODES_SET_FP16";
const char_t *const STATIC_MEMORY_POLICY = "ge.exec.staticMemoryPolicy";
}  // namespace configure_option

const std::string STREAM_NUM = "ge.streamNum";
const std::string OUTPUT_NODE_NAME = "ge.outputNodeName";
const std::string PRECISION_MODE = "ge.exec.precision_mode";
const std::string PRECISION_MODE_V2 = "ge.exec.precision_mode_v2";
const std::string STREAM_MAX_PARALLEL_NUM = "ge.streamMaxParallelNum";
const std::string OUTPUT_DATATYPE = "ge.outputDatatype";

const char_t *const kDynamicBatchSize = "ge.dynamicBatchSize";
const std::string INPUT_SHAPE = "ge.inputShape";  /* session/graph key; the parser key is ir_option::INPUT_SHAPE */
const char_t *const INPUT_HINT_SHAPE = "ge.inputHintShape";
const std::string DYNAMIC_NODE_TYPE = "ge.dynamicNodeType";
const char_t *const kDynamicImageSize = "ge.dynamicImageSize";
const char_t *const kDynamicDims = "ge.dynamicDims";

const std::string SOC_VERSION = "ge.socVersion";
const std::string AICORE_NUM = "ge.aicoreNum";  /* "cube|vector", e.g. "12|10" */
const std::string INPUT_FP16_NODES = "ge.INPUT_NODES_SET_FP16";
const std::string JIT_COMPILE = "ge.jit_compile";
const char_t *const OO_LEVEL = "ge.oo.level";
/* GE's graph compile cache: the directory (a Session option; it must exist) and the graph's key (graph or Session) */
const char_t *const OPTION_GRAPH_COMPILER_CACHE_DIR = "ge.graph_compiler_cache_dir";
const char_t *const OPTION_GRAPH_KEY = "ge.graph_key";

enum GraphRunMode : std::int32_t { PREDICTION = 0, TRAIN };

using Status = uint32_t;
using RunAsyncCallback = std::function<void(Status, std::vector<ge::Tensor> &)>;
using RunAsyncCallbackV2 = std::function<void(Status, std::vector<gert::Tensor> &)>;

/* ---- keys of aclgrphParseONNX's parser_params (and of aclgrphBuildModel) ---- */
namespace ir_option {
static const char_t *const INPUT_SHAPE = "input_shape";  /* "x:1,3,224,224;y:1,10" */
static const char_t *const IS_INPUT_ADJUST_HW_LAYOUT = "is_input_adjust_hw_layout";
static const char_t *const IS_OUTPUT_ADJUST_HW_LAYOUT = "is_output_adjust_hw_layout";
static const char_t *const ENABLE_SCOPE_FUSION_PASSES = "enable_scope_fusion_passes";
static const char_t *const OUTPUT = "output";
static const char_t *const OUT_NODES = ge::OUTPUT_NODE_NAME.c_str();
static const char_t *const INPUT_FP16_NODES = ge::INPUT_FP16_NODES.c_str();
static const char_t *const INPUT_DATA_NAMES = "input_data_names";
#ifdef __GNUC__
/* The only keys aclgrphParse* accept; any other key fails with a parameter error. */
const std::set<std::string> ir_parser_suppported_options = {
    INPUT_FP16_NODES, IS_INPUT_ADJUST_HW_LAYOUT, IS_OUTPUT_ADJUST_HW_LAYOUT, OUTPUT,
    OUT_NODES,        ENABLE_SCOPE_FUSION_PASSES, INPUT_DATA_NAMES,          INPUT_SHAPE};
#endif
}  // namespace ir_option

/* ---- node attributes (not options) ---- */
namespace public_attr {
static const char_t *const OP_AI_CORE_NUM = "_op_aicore_num";
static const char_t *const OP_VECTOR_CORE_NUM = "_op_vectorcore_num";
static const char_t *const GE_AI_CORE_NUM = "ge.aicoreNum";
static const char_t *const GE_VECTOR_CORE_NUM = "ge.vectorcoreNum";
}  // namespace public_attr
}  // namespace ge

#endif  // INC_EXTERNAL_GE_COMMON_GE_API_TYPES_H_
