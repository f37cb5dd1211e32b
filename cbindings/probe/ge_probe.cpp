/* gert GE API fidelity probe (compile-only, plus an optional runtime check of string values;
 * driven by tests/test_ge_api_fidelity.py).
 *
 *   g++ -std=c++17 -fsyntax-only -I <include dir> cbindings/probe/ge_probe.cpp
 *
 * <include dir> is gert's own headers (cbindings/include) or a real CANN include/ directory.  The
 * file compiles only if the headers declare every GE signature gert uses exactly as CANN 8.5 does
 * (shared/docs/cann-api.md sections 1-3):
 *   - free functions: exact type (return and parameter types, C or C++ linkage as declared);
 *   - member functions: exact pointer-to-member type, including const;  overloaded names are checked
 *     with a static_cast to the exact pointer type, which selects only an exact match;
 *   - constructors: constructible from exactly these arguments, and explicit where CANN's are;
 *   - typedefs, constants (type and value), enumerators (enum and value);
 *   - gert::Tensor / gert::TensorData are move-only, standard-layout, and have CANN's layout size.
 * Option keys are strings: their C++ type is checked here, their text by the runtime part.
 *
 * Sections
 *   A  what the older real headers in the torch-npu wheel (torch_npu/include: ge/, graph/) declare as
 *      well.  -DGERT_PROBE_REAL_SUBSET compiles section A alone, against those headers.
 *   B  what only CANN 8.x declares (the wheel's ge/ge_api.h predates it, and the wheel ships no
 *      exe_graph/, parser/ or ge/ge_graph_compile_summary.h): the CompileGraph / LoadGraph /
 *      ExecuteGraphWithStreamAsync flow, GEGetErrorMsgV2, gert::Tensor, the ONNX parser.
 *
 * -DGERT_PROBE_MAIN adds main(): it prints and counts option keys whose text differs from CANN's and
 * checks ge::GetSizeByDataType (header-only, so no GE library is needed to link).
 * -DGERT_PROBE_SELFTEST=<n> adds one deliberately wrong expectation: 1, 2 (section A, both header
 * sets) and 3, 4 (section B) make the build fail; 5 (section A) makes main() fail.
 */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "ge/ge_api.h"
#ifndef GERT_PROBE_REAL_SUBSET
#include "ge/ge_graph_compile_summary.h"
#include "exe_graph/runtime/tensor.h"
#include "parser/onnx_parser.h"
#endif

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/* ---- expectation macros ---------------------------------------------------------------------- */

/* A free function that is not overloaded: decltype(&name) is exactly R(*)P. */
#define GERT_EXPECT_FN(name, R, P)                                            \
  static_assert(std::is_same<decltype(&name), R(*) P>::value,                 \
                "gert probe: prototype of " #name " is not " #R " " #name #P)

/* One overload of a free function: static_cast to the exact pointer type (fails to compile otherwise). */
#define GERT_EXPECT_OVERLOAD(name, R, P) \
  static_assert(std::is_same<decltype(static_cast<R(*) P>(&name)), R(*) P>::value, "gert probe: " #name)

/* A member function that is not overloaded: exact pointer-to-member type.  Q is const or empty. */
#define GERT_EXPECT_METHOD(C, name, R, P, Q)                                          \
  static_assert(std::is_same<decltype(&C::name), R(C::*) P Q>::value,                 \
                "gert probe: " #C "::" #name " is not " #R " " #name #P " " #Q)

/* One overload of a member function. */
#define GERT_EXPECT_METHOD_OVERLOAD(C, name, R, P, Q)                                         \
  static_assert(std::is_same<decltype(static_cast<R(C::*) P Q>(&C::name)), R(C::*) P Q>::value, \
                "gert probe: " #C "::" #name)

/* A typedef. */
#define GERT_EXPECT_TYPE(name, ...) \
  static_assert(std::is_same<name, __VA_ARGS__>::value, "gert probe: typedef " #name " is not " #__VA_ARGS__)

/* A constant: type (cv dropped) and value. */
#define GERT_EXPECT_CONST(name, T, V)                                                     \
  static_assert(std::is_same<typename std::remove_cv<decltype(name)>::type, T>::value,   \
                "gert probe: constant " #name " is not of type " #T);                    \
  static_assert((name) == (V), "gert probe: constant " #name " != " #V)

/* An enumerator: belongs to enum E and has value V. */
#define GERT_EXPECT_ENUM(E, name, V)                                                  \
  static_assert(std::is_same<decltype(name), E>::value,                              \
                "gert probe: enumerator " #name " is not of enum " #E);               \
  static_assert(static_cast<long long>(name) == (V), "gert probe: " #name " != " #V)

/* A one-argument constructor, explicit or implicit. */
#define GERT_EXPECT_CTOR1(C, is_explicit, A)                                                   \
  static_assert(std::is_constructible<C, A>::value, "gert probe: no constructor " #C "(" #A ")"); \
  static_assert(std::is_convertible<A, C>::value == !(is_explicit),                              \
                "gert probe: constructor " #C "(" #A ") explicit-ness differs")

/* A constructor with these exact argument types. */
#define GERT_EXPECT_CTOR(C, ...) \
  static_assert(std::is_constructible<C, __VA_ARGS__>::value, "gert probe: no constructor " #C "(" #__VA_ARGS__ ")")

/* An option key: its C++ type here; its text is compared by main() (GERT_PROBE_MAIN). */
namespace gert_probe {
struct KeyCheck;
KeyCheck *g_keys = nullptr;
struct KeyCheck {
  const char *name;
  const char *actual;
  const char *expected;
  KeyCheck *next;
  KeyCheck(const char *n, const char *a, const char *e) : name(n), actual(a), expected(e), next(g_keys) {
    g_keys = this;
  }
};
inline const char *c_str(const char *s) { return s; }
inline const char *c_str(const std::string &s) { return s.c_str(); }
}  // namespace gert_probe
#define GERT_PROBE_CAT2(a, b) a##b
#define GERT_PROBE_CAT(a, b) GERT_PROBE_CAT2(a, b)
#define GERT_EXPECT_KEY(name, T, text)                                                             \
  static_assert(std::is_same<decltype(name), T>::value, "gert probe: option key " #name " is not " #T); \
  static const gert_probe::KeyCheck GERT_PROBE_CAT(gert_probe_key_, __LINE__)(#name, gert_probe::c_str(name), text)

using AStrMap = std::map<ge::AscendString, ge::AscendString>;
using StrMap = std::map<std::string, std::string>;

/* ================================================================================================
 * Section A: also declared by the torch-npu wheel's headers.
 * ================================================================================================ */

/* ---- types ---- */
GERT_EXPECT_TYPE(ge::Status, uint32_t);
GERT_EXPECT_TYPE(ge::graphStatus, uint32_t);
GERT_EXPECT_TYPE(ge::char_t, char);
GERT_EXPECT_TYPE(ge::float32_t, float);
GERT_EXPECT_TYPE(ge::float64_t, double);
GERT_EXPECT_TYPE(ge::RunAsyncCallback, std::function<void(ge::Status, std::vector<ge::Tensor> &)>);
GERT_EXPECT_TYPE(ge::Tensor::DeleteFunc, std::function<void(uint8_t *)>);
GERT_EXPECT_TYPE(ge::GraphPtr, std::shared_ptr<ge::Graph>);
GERT_EXPECT_TYPE(ge::GraphImplPtr, std::shared_ptr<ge::GraphImpl>);

/* ---- status codes ---- */
GERT_EXPECT_CONST(ge::SUCCESS, uint32_t, 0U);
GERT_EXPECT_CONST(ge::FAILED, uint32_t, 0xFFFFFFFFU);
GERT_EXPECT_CONST(ge::GRAPH_SUCCESS, uint32_t, 0U);
GERT_EXPECT_CONST(ge::GRAPH_FAILED, uint32_t, 0xFFFFFFFFU);
GERT_EXPECT_CONST(ge::GRAPH_PARAM_INVALID, uint32_t, 50331649U);
GERT_EXPECT_CONST(ge::GRAPH_NOT_CHANGED, uint32_t, 1343242304U);
GERT_EXPECT_CONST(ge::GRAPH_NODE_WITHOUT_CONST_INPUT, uint32_t, 50331648U);
GERT_EXPECT_CONST(ge::GRAPH_NODE_NEED_REPASS, uint32_t, 50331647U);
GERT_EXPECT_CONST(ge::GRAPH_INVALID_IR_DEF, uint32_t, 50331646U);
GERT_EXPECT_CONST(ge::GRAPH_PARAM_OUT_OF_RANGE, uint32_t, 50331644U);
GERT_EXPECT_CONST(ge::GRAPH_MEM_OPERATE_FAILED, uint32_t, 50331539U);
GERT_EXPECT_CONST(ge::GRAPH_NULL_PTR, uint32_t, 50331538U);
GERT_EXPECT_CONST(ge::GRAPH_MEMCPY_FAILED, uint32_t, 50331537U);
GERT_EXPECT_CONST(ge::GRAPH_MEMSET_FAILED, uint32_t, 50331536U);
GERT_EXPECT_CONST(ge::GRAPH_MATH_CAL_FAILED, uint32_t, 50331429U);
GERT_EXPECT_CONST(ge::GRAPH_ADD_OVERFLOW, uint32_t, 50331428U);
GERT_EXPECT_CONST(ge::GRAPH_MUL_OVERFLOW, uint32_t, 50331427U);
GERT_EXPECT_CONST(ACL_ERROR_GE_PARAM_INVALID, uint32_t, 145000U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_NOT_INIT, uint32_t, 145001U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID, uint32_t, 145002U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_MODEL_ID_INVALID, uint32_t, 145003U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID, uint32_t, 145006U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID, uint32_t, 145007U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_MODEL_QUEUE_ID_INVALID, uint32_t, 145008U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_LOAD_MODEL_REPEATED, uint32_t, 145009U);
GERT_EXPECT_CONST(ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID, uint32_t, 145011U);
GERT_EXPECT_CONST(ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID, uint32_t, 145012U);
GERT_EXPECT_CONST(ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID, uint32_t, 145013U);
GERT_EXPECT_CONST(ACL_ERROR_GE_AIPP_BATCH_EMPTY, uint32_t, 145014U);
GERT_EXPECT_CONST(ACL_ERROR_GE_AIPP_NOT_EXIST, uint32_t, 145015U);
GERT_EXPECT_CONST(ACL_ERROR_GE_AIPP_MODE_INVALID, uint32_t, 145016U);
GERT_EXPECT_CONST(ACL_ERROR_GE_OP_TASK_TYPE_INVALID, uint32_t, 145017U);
GERT_EXPECT_CONST(ACL_ERROR_GE_OP_KERNEL_TYPE_INVALID, uint32_t, 145018U);
GERT_EXPECT_CONST(ACL_ERROR_GE_PLGMGR_PATH_INVALID, uint32_t, 145019U);
GERT_EXPECT_CONST(ACL_ERROR_GE_FORMAT_INVALID, uint32_t, 145020U);
GERT_EXPECT_CONST(ACL_ERROR_GE_SHAPE_INVALID, uint32_t, 145021U);
GERT_EXPECT_CONST(ACL_ERROR_GE_DATATYPE_INVALID, uint32_t, 145022U);
GERT_EXPECT_CONST(ACL_ERROR_GE_MEMORY_ALLOCATION, uint32_t, 245000U);
GERT_EXPECT_CONST(ACL_ERROR_GE_MEMORY_OPERATE_FAILED, uint32_t, 245001U);
GERT_EXPECT_CONST(ACL_ERROR_GE_DEVICE_MEMORY_OPERATE_FAILED, uint32_t, 245002U);
GERT_EXPECT_CONST(ACL_ERROR_GE_SUBHEALTHY, uint32_t, 345102U);
GERT_EXPECT_CONST(ACL_ERROR_GE_USER_RAISE_EXCEPTION, uint32_t, 345103U);
GERT_EXPECT_CONST(ACL_ERROR_GE_DATA_NOT_ALIGNED, uint32_t, 345104U);
GERT_EXPECT_CONST(ACL_ERROR_GE_INTERNAL_ERROR, uint32_t, 545000U);
GERT_EXPECT_CONST(ACL_ERROR_GE_LOAD_MODEL, uint32_t, 545001U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_LOAD_MODEL_PARTITION_FAILED, uint32_t, 545002U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_LOAD_WEIGHT_PARTITION_FAILED, uint32_t, 545003U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_LOAD_TASK_PARTITION_FAILED, uint32_t, 545004U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_LOAD_KERNEL_PARTITION_FAILED, uint32_t, 545005U);
GERT_EXPECT_CONST(ACL_ERROR_GE_EXEC_RELEASE_MODEL_DATA, uint32_t, 545006U);
GERT_EXPECT_CONST(ACL_ERROR_GE_COMMAND_HANDLE, uint32_t, 545007U);
GERT_EXPECT_CONST(ACL_ERROR_GE_GET_TENSOR_INFO, uint32_t, 545008U);
GERT_EXPECT_CONST(ACL_ERROR_GE_UNLOAD_MODEL, uint32_t, 545009U);
GERT_EXPECT_CONST(ACL_ERROR_GE_MODEL_EXECUTE_TIMEOUT, uint32_t, 545601U);
GERT_EXPECT_CONST(ACL_ERROR_GE_REDEPLOYING, uint32_t, 545602U);

/* ---- graph/types.h ---- */
GERT_EXPECT_CONST(ge::UNKNOWN_DIM, int64_t, -1);
GERT_EXPECT_CONST(ge::UNKNOWN_DIM_NUM, int64_t, -2);
GERT_EXPECT_CONST(ge::SHAPE_RANGE_LOWER_LIMIT, int64_t, 0);
GERT_EXPECT_CONST(ge::kDataTypeSizeBitOffset, int32_t, 1000);
GERT_EXPECT_TYPE(decltype(ge::UNKNOWN_SHAPE), const std::vector<int64_t>);  /* {-1}, checked by main() */
GERT_EXPECT_TYPE(decltype(ge::UNKNOWN_RANK), const std::vector<int64_t>);   /* {-2} */
GERT_EXPECT_FN(ge::GetSizeByDataType, int, (ge::DataType));
GERT_EXPECT_FN(ge::GetSizeInBytes, int64_t, (int64_t, ge::DataType));

static_assert(std::is_enum<ge::DataType>::value && sizeof(ge::DataType) == sizeof(int), "gert probe: ge::DataType");
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT, 0);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT16, 1);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_INT8, 2);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_INT32, 3);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UINT8, 4);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_INT16, 6);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UINT16, 7);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UINT32, 8);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_INT64, 9);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UINT64, 10);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_DOUBLE, 11);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_BOOL, 12);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_STRING, 13);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_DUAL_SUB_INT8, 14);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_DUAL_SUB_UINT8, 15);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_COMPLEX64, 16);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_COMPLEX128, 17);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_QINT8, 18);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_QINT16, 19);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_QINT32, 20);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_QUINT8, 21);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_QUINT16, 22);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_RESOURCE, 23);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_STRING_REF, 24);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_DUAL, 25);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_VARIANT, 26);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_BF16, 27);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UNDEFINED, 28);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_INT4, 29);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UINT1, 30);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_INT2, 31);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_UINT2, 32);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_COMPLEX32, 33);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_HIFLOAT8, 34);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT8_E5M2, 35);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT8_E4M3FN, 36);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT8_E8M0, 37);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT6_E3M2, 38);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT6_E2M3, 39);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT4_E2M1, 40);
GERT_EXPECT_ENUM(ge::DataType, ge::DT_FLOAT4_E1M2, 41);

static_assert(std::is_enum<ge::Format>::value && sizeof(ge::Format) == sizeof(int), "gert probe: ge::Format");
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NCHW, 0);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NHWC, 1);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_ND, 2);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NC1HWC0, 3);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_Z, 4);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NC1C0HWPAD, 5);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NHWC1C0, 6);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FSR_NCHW, 7);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_DECONV, 8);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_C1HWNC0, 9);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_DECONV_TRANSPOSE, 10);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_DECONV_SP_STRIDE_TRANS, 11);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NC1HWC0_C04, 12);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_Z_C04, 13);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_CHWN, 14);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_DECONV_SP_STRIDE8_TRANS, 15);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_HWCN, 16);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NC1KHKWHWC0, 17);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_BN_WEIGHT, 18);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FILTER_HWCK, 19);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_HASHTABLE_LOOKUP_LOOKUPS, 20);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_HASHTABLE_LOOKUP_KEYS, 21);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_HASHTABLE_LOOKUP_VALUE, 22);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_HASHTABLE_LOOKUP_OUTPUT, 23);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_HASHTABLE_LOOKUP_HITS, 24);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_C1HWNCoC0, 25);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_MD, 26);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NDHWC, 27);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_ZZ, 28);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_NZ, 29);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NCDHW, 30);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_DHWCN, 31);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NDC1HWC0, 32);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_Z_3D, 33);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_CN, 34);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NC, 35);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_DHWNC, 36);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_Z_3D_TRANSPOSE, 37);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_ZN_LSTM, 38);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_Z_G, 39);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_RESERVED, 40);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_ALL, 41);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NULL, 42);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_ND_RNN_BIAS, 43);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_ZN_RNN, 44);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NYUV, 45);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NYUV_A, 46);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_NCL, 47);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_Z_WINO, 48);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_C1HWC0, 49);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_NZ_C0_16, 50);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_NZ_C0_32, 51);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_MAX, 0xff);

static_assert(std::is_enum<ge::Placement>::value && sizeof(ge::Placement) == sizeof(int), "gert probe: ge::Placement");
GERT_EXPECT_ENUM(ge::Placement, ge::kPlacementHost, 0);
GERT_EXPECT_ENUM(ge::Placement, ge::kPlacementDevice, 1);
GERT_EXPECT_ENUM(ge::Placement, ge::kPlacementEnd, 2);

GERT_EXPECT_TYPE(std::underlying_type<ge::GraphRunMode>::type, std::int32_t);
GERT_EXPECT_ENUM(ge::GraphRunMode, ge::PREDICTION, 0);
GERT_EXPECT_ENUM(ge::GraphRunMode, ge::TRAIN, 1);

/* ---- ge::AscendString (graph/ascend_string.h) ---- */
static_assert(std::is_default_constructible<ge::AscendString>::value, "gert probe: AscendString()");
GERT_EXPECT_CTOR1(ge::AscendString, false, const char *);
GERT_EXPECT_CTOR(ge::AscendString, const char *, size_t);
GERT_EXPECT_METHOD(ge::AscendString, GetString, const char *, (), const);
GERT_EXPECT_METHOD(ge::AscendString, GetLength, size_t, (), const);
GERT_EXPECT_METHOD(ge::AscendString, Find, size_t, (const ge::AscendString &), const);
GERT_EXPECT_METHOD(ge::AscendString, Hash, size_t, (), const);
GERT_EXPECT_METHOD(ge::AscendString, operator<, bool, (const ge::AscendString &), const);
GERT_EXPECT_METHOD(ge::AscendString, operator>, bool, (const ge::AscendString &), const);
GERT_EXPECT_METHOD(ge::AscendString, operator<=, bool, (const ge::AscendString &), const);
GERT_EXPECT_METHOD(ge::AscendString, operator>=, bool, (const ge::AscendString &), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::AscendString, operator==, bool, (const ge::AscendString &), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::AscendString, operator==, bool, (const char *const), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::AscendString, operator!=, bool, (const ge::AscendString &), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::AscendString, operator!=, bool, (const char *const), const);
GERT_EXPECT_TYPE(decltype(std::hash<ge::AscendString>()(std::declval<const ge::AscendString &>())), size_t);

/* ---- ge::Graph (graph/graph.h) ---- */
static_assert(std::is_default_constructible<ge::Graph>::value, "gert probe: Graph()");
GERT_EXPECT_CTOR1(ge::Graph, true, const char *);
GERT_EXPECT_CTOR1(ge::Graph, true, const std::string &);
GERT_EXPECT_METHOD(ge::Graph, IsValid, bool, (), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::Graph, SaveToFile, ge::graphStatus, (const char *), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::Graph, LoadFromFile, ge::graphStatus, (const char *), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Graph, GetName, ge::graphStatus, (ge::AscendString &), const);

/* ---- ge::Shape / TensorDesc / Tensor (graph/tensor.h) ---- */
static_assert(std::is_default_constructible<ge::Shape>::value, "gert probe: ge::Shape()");
GERT_EXPECT_CTOR1(ge::Shape, true, const std::vector<int64_t> &);
GERT_EXPECT_METHOD(ge::Shape, GetDimNum, size_t, (), const);
GERT_EXPECT_METHOD(ge::Shape, GetDim, int64_t, (size_t), const);
GERT_EXPECT_METHOD(ge::Shape, SetDim, ge::graphStatus, (size_t, int64_t), );
GERT_EXPECT_METHOD(ge::Shape, GetDims, std::vector<int64_t>, (), const);
GERT_EXPECT_METHOD(ge::Shape, GetShapeSize, int64_t, (), const);

static_assert(std::is_default_constructible<ge::TensorDesc>::value, "gert probe: TensorDesc()");
GERT_EXPECT_CTOR1(ge::TensorDesc, true, ge::Shape);  /* format and dtype default to FORMAT_ND, DT_FLOAT */
GERT_EXPECT_CTOR(ge::TensorDesc, ge::Shape, ge::Format, ge::DataType);
static_assert(std::is_copy_constructible<ge::TensorDesc>::value && std::is_move_constructible<ge::TensorDesc>::value &&
                  std::is_copy_assignable<ge::TensorDesc>::value && std::is_move_assignable<ge::TensorDesc>::value,
              "gert probe: TensorDesc copy/move");
GERT_EXPECT_METHOD(ge::TensorDesc, Update, void, (const ge::Shape &, ge::Format, ge::DataType), );
GERT_EXPECT_TYPE(decltype(std::declval<ge::TensorDesc &>().Update(std::declval<const ge::Shape &>())), void);
GERT_EXPECT_METHOD(ge::TensorDesc, GetShape, ge::Shape, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, SetShape, void, (const ge::Shape &), );
GERT_EXPECT_METHOD(ge::TensorDesc, SetUnknownDimNumShape, ge::graphStatus, (), );
GERT_EXPECT_METHOD(ge::TensorDesc, SetShapeRange, ge::graphStatus, (const std::vector<std::pair<int64_t, int64_t>> &), );
GERT_EXPECT_METHOD(ge::TensorDesc, GetShapeRange, ge::graphStatus, (std::vector<std::pair<int64_t, int64_t>> &), const);
GERT_EXPECT_METHOD(ge::TensorDesc, GetFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, SetFormat, void, (ge::Format), );
GERT_EXPECT_METHOD(ge::TensorDesc, GetOriginShape, ge::Shape, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, SetOriginShape, void, (const ge::Shape &), );
GERT_EXPECT_METHOD(ge::TensorDesc, GetOriginFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, SetOriginFormat, void, (ge::Format), );
GERT_EXPECT_METHOD(ge::TensorDesc, GetDataType, ge::DataType, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, SetDataType, void, (ge::DataType), );
GERT_EXPECT_METHOD_OVERLOAD(ge::TensorDesc, GetName, ge::graphStatus, (ge::AscendString &), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::TensorDesc, SetName, void, (const char *), );
GERT_EXPECT_METHOD(ge::TensorDesc, SetSize, void, (int64_t), );
GERT_EXPECT_METHOD(ge::TensorDesc, GetSize, int64_t, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, GetRealDimCnt, int64_t, (), const);
GERT_EXPECT_METHOD(ge::TensorDesc, SetRealDimCnt, void, (const int64_t), );
GERT_EXPECT_METHOD(ge::TensorDesc, SetPlacement, void, (ge::Placement), );
GERT_EXPECT_METHOD(ge::TensorDesc, GetPlacement, ge::Placement, (), const);

static_assert(std::is_default_constructible<ge::Tensor>::value, "gert probe: ge::Tensor()");
GERT_EXPECT_CTOR1(ge::Tensor, true, const ge::TensorDesc &);
GERT_EXPECT_CTOR(ge::Tensor, const ge::TensorDesc &, const std::vector<uint8_t> &);
GERT_EXPECT_CTOR(ge::Tensor, const ge::TensorDesc &, const uint8_t *, size_t);
GERT_EXPECT_CTOR(ge::Tensor, ge::TensorDesc &&, std::vector<uint8_t> &&);
static_assert(std::is_copy_constructible<ge::Tensor>::value, "gert probe: ge::Tensor is copyable (shared data)");
GERT_EXPECT_METHOD(ge::Tensor, GetTensorDesc, ge::TensorDesc, (), const);
GERT_EXPECT_METHOD(ge::Tensor, SetTensorDesc, ge::graphStatus, (const ge::TensorDesc &), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, GetData, const uint8_t *, (), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, GetData, uint8_t *, (), );
GERT_EXPECT_METHOD(ge::Tensor, GetSize, size_t, (), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, SetData, ge::graphStatus, (std::vector<uint8_t> &&), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, SetData, ge::graphStatus, (const std::vector<uint8_t> &), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, SetData, ge::graphStatus, (const uint8_t *, size_t), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, SetData, ge::graphStatus, (uint8_t *, size_t, const ge::Tensor::DeleteFunc &), );
GERT_EXPECT_METHOD(ge::Tensor, IsValid, ge::graphStatus, (), );
GERT_EXPECT_METHOD(ge::Tensor, SetOriginShapeDimNum, ge::graphStatus, (const size_t), );
GERT_EXPECT_METHOD(ge::Tensor, GetOriginShapeDimNum, size_t, (), const);
GERT_EXPECT_METHOD(ge::Tensor, SetOriginShapeDim, ge::graphStatus, (const size_t, const int64_t), );
GERT_EXPECT_METHOD(ge::Tensor, GetOriginShapeDim, int64_t, (const size_t), const);
GERT_EXPECT_METHOD(ge::Tensor, SetOriginFormat, ge::graphStatus, (const ge::Format &), );
GERT_EXPECT_METHOD(ge::Tensor, GetOriginFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(ge::Tensor, SetShapeDimNum, ge::graphStatus, (const size_t), );
GERT_EXPECT_METHOD(ge::Tensor, GetShapeDimNum, size_t, (), const);
GERT_EXPECT_METHOD(ge::Tensor, SetShapeDim, ge::graphStatus, (const size_t, const int64_t), );
GERT_EXPECT_METHOD(ge::Tensor, GetShapeDim, int64_t, (const size_t), const);
GERT_EXPECT_METHOD(ge::Tensor, SetFormat, ge::graphStatus, (const ge::Format &), );
GERT_EXPECT_METHOD(ge::Tensor, GetFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(ge::Tensor, SetDataType, ge::graphStatus, (const ge::DataType &), );
GERT_EXPECT_METHOD(ge::Tensor, GetDataType, ge::DataType, (), const);
GERT_EXPECT_METHOD(ge::Tensor, SetPlacement, ge::graphStatus, (const ge::Placement &), );
GERT_EXPECT_METHOD(ge::Tensor, GetPlacement, ge::Placement, (), const);
GERT_EXPECT_METHOD_OVERLOAD(ge::Tensor, ResetData, ge::graphStatus, (uint8_t *, size_t, const ge::Tensor::DeleteFunc &), );
GERT_EXPECT_METHOD(ge::Tensor, Clone, ge::Tensor, (), const);

/* ---- GE initialization and ge::Session (ge/ge_api.h) ---- */
GERT_EXPECT_OVERLOAD(ge::GEInitialize, ge::Status, (const AStrMap &));
GERT_EXPECT_OVERLOAD(ge::GEInitialize, ge::Status, (const StrMap &));
GERT_EXPECT_FN(ge::GEFinalize, ge::Status, ());

GERT_EXPECT_CTOR1(ge::Session, true, const AStrMap &);
GERT_EXPECT_CTOR1(ge::Session, true, const StrMap &);
static_assert(!std::is_default_constructible<ge::Session>::value, "gert probe: ge::Session has no default constructor");
GERT_EXPECT_METHOD_OVERLOAD(ge::Session, AddGraph, ge::Status, (uint32_t, const ge::Graph &), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Session, AddGraph, ge::Status, (uint32_t, const ge::Graph &, const AStrMap &), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Session, AddGraph, ge::Status, (uint32_t, const ge::Graph &, const StrMap &), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Session, AddGraphWithCopy, ge::Status, (uint32_t, const ge::Graph &), );
GERT_EXPECT_METHOD_OVERLOAD(ge::Session, AddGraphWithCopy, ge::Status, (uint32_t, const ge::Graph &, const AStrMap &), );
GERT_EXPECT_METHOD(ge::Session, RemoveGraph, ge::Status, (uint32_t), );
GERT_EXPECT_METHOD(ge::Session, RunGraph, ge::Status,
                   (uint32_t, const std::vector<ge::Tensor> &, std::vector<ge::Tensor> &), );
GERT_EXPECT_METHOD(ge::Session, RunGraphWithStreamAsync, ge::Status,
                   (uint32_t, void *, const std::vector<ge::Tensor> &, std::vector<ge::Tensor> &), );

/* ---- option keys (ge/ge_api_types.h) ---- */
GERT_EXPECT_KEY(ge::OPTION_GRAPH_RUN_MODE, const char *const, "ge.graphRunMode");
GERT_EXPECT_KEY(ge::OPTION_EXEC_DEVICE_ID, const char *const, "ge.exec.deviceId");
GERT_EXPECT_KEY(ge::OPTION_SESSION_DEVICE_ID, const char *const, "ge.session_device_id");
GERT_EXPECT_KEY(ge::OPTION_EXEC_ENABLE_DUMP, const char *const, "ge.exec.enableDump");
GERT_EXPECT_KEY(ge::OPTION_EXEC_DUMP_PATH, const char *const, "ge.exec.dumpPath");
GERT_EXPECT_KEY(ge::OPTION_EXEC_DUMP_MODE, const char *const, "ge.exec.dumpMode");
GERT_EXPECT_KEY(ge::OPTION_EXEC_DYNAMIC_INPUT, const char *const, "ge.exec.dynamicInput");
GERT_EXPECT_KEY(ge::OPTION_EXEC_DYNAMIC_EXECUTE_MODE, const char *const, "ge.exec.dynamicGraphExecuteMode");
GERT_EXPECT_KEY(ge::OPTION_EXEC_DATA_INPUTS_SHAPE_RANGE, const char *const, "ge.exec.dataInputsShapeRange");
GERT_EXPECT_KEY(ge::MEMORY_OPTIMIZATION_POLICY, const std::string, "ge.exec.memoryOptimizationPolicy");
GERT_EXPECT_KEY(ge::STATIC_MEMORY_POLICY, const std::string, "ge.exec.staticMemoryPolicy");
GERT_EXPECT_KEY(ge::OPTION_FEATURE_BASE_REFRESHABLE, const char *const, "ge.featureBaseRefreshable");
GERT_EXPECT_KEY(ge::OPTION_CONST_LIFECYCLE, const char *const, "ge.constLifecycle");
GERT_EXPECT_KEY(ge::configure_option::STREAM_NUM, const char *const, "ge.streamNum");
GERT_EXPECT_KEY(ge::configure_option::OUTPUT_NODE_NAME, const char *const, "ge.outputNodeName");
GERT_EXPECT_KEY(ge::configure_option::PRECISION_MODE, const char *const, "ge.exec.precision_mode");
GERT_EXPECT_KEY(ge::configure_option::PRECISION_MODE_V2, const char *const, "ge.exec.precision_mode_v2");
GERT_EXPECT_KEY(ge::configure_option::STREAM_MAX_PARALLEL_NUM, const char *const, "ge.streamMaxParallelNum");
GERT_EXPECT_KEY(ge::configure_option::OUTPUT_DATATYPE, const char *const, "ge.outputDatatype");
GERT_EXPECT_KEY(ge::configure_option::SOC_VERSION, const char *const, "ge.socVersion");
GERT_EXPECT_KEY(ge::configure_option::AICORE_NUM, const char *const, "ge.aicoreNum");
GERT_EXPECT_KEY(ge::configure_option::INPUT_FP16_NODES, const char *const, "ge.INPUT_NODES_SET_FP16");
GERT_EXPECT_KEY(ge::configure_option::STATIC_MEMORY_POLICY, const char *const, "ge.exec.staticMemoryPolicy");
GERT_EXPECT_KEY(ge::STREAM_NUM, const std::string, "ge.streamNum");
GERT_EXPECT_KEY(ge::OUTPUT_NODE_NAME, const std::string, "ge.outputNodeName");
GERT_EXPECT_KEY(ge::PRECISION_MODE, const std::string, "ge.exec.precision_mode");
GERT_EXPECT_KEY(ge::PRECISION_MODE_V2, const std::string, "ge.exec.precision_mode_v2");
GERT_EXPECT_KEY(ge::STREAM_MAX_PARALLEL_NUM, const std::string, "ge.streamMaxParallelNum");
GERT_EXPECT_KEY(ge::OUTPUT_DATATYPE, const std::string, "ge.outputDatatype");
GERT_EXPECT_KEY(ge::kDynamicBatchSize, const char *const, "ge.dynamicBatchSize");
GERT_EXPECT_KEY(ge::INPUT_SHAPE, const std::string, "ge.inputShape");
GERT_EXPECT_KEY(ge::DYNAMIC_NODE_TYPE, const std::string, "ge.dynamicNodeType");
GERT_EXPECT_KEY(ge::kDynamicImageSize, const char *const, "ge.dynamicImageSize");
GERT_EXPECT_KEY(ge::kDynamicDims, const char *const, "ge.dynamicDims");
GERT_EXPECT_KEY(ge::SOC_VERSION, const std::string, "ge.socVersion");
GERT_EXPECT_KEY(ge::AICORE_NUM, const std::string, "ge.aicoreNum");
GERT_EXPECT_KEY(ge::INPUT_FP16_NODES, const std::string, "ge.INPUT_NODES_SET_FP16");
GERT_EXPECT_KEY(ge::JIT_COMPILE, const std::string, "ge.jit_compile");
GERT_EXPECT_KEY(ge::OO_LEVEL, const char *const, "ge.oo.level");
/* parser_params keys: exactly these eight are accepted by aclgrphParseONNX* */
GERT_EXPECT_KEY(ge::ir_option::INPUT_SHAPE, const char *const, "input_shape");
GERT_EXPECT_KEY(ge::ir_option::IS_INPUT_ADJUST_HW_LAYOUT, const char *const, "is_input_adjust_hw_layout");
GERT_EXPECT_KEY(ge::ir_option::IS_OUTPUT_ADJUST_HW_LAYOUT, const char *const, "is_output_adjust_hw_layout");
GERT_EXPECT_KEY(ge::ir_option::ENABLE_SCOPE_FUSION_PASSES, const char *const, "enable_scope_fusion_passes");
GERT_EXPECT_KEY(ge::ir_option::OUTPUT, const char *const, "output");
GERT_EXPECT_KEY(ge::ir_option::OUT_NODES, const char *const, "ge.outputNodeName");
GERT_EXPECT_KEY(ge::ir_option::INPUT_FP16_NODES, const char *const, "ge.INPUT_NODES_SET_FP16");
GERT_EXPECT_KEY(ge::ir_option::INPUT_DATA_NAMES, const char *const, "input_data_names");
GERT_EXPECT_TYPE(decltype(ge::ir_option::ir_parser_suppported_options), const std::set<std::string>);
GERT_EXPECT_KEY(ge::public_attr::OP_AI_CORE_NUM, const char *const, "_op_aicore_num");
GERT_EXPECT_KEY(ge::public_attr::OP_VECTOR_CORE_NUM, const char *const, "_op_vectorcore_num");
GERT_EXPECT_KEY(ge::public_attr::GE_AI_CORE_NUM, const char *const, "ge.aicoreNum");
GERT_EXPECT_KEY(ge::public_attr::GE_VECTOR_CORE_NUM, const char *const, "ge.vectorcoreNum");

#if defined(GERT_PROBE_SELFTEST) && GERT_PROBE_SELFTEST == 1
GERT_EXPECT_ENUM(ge::DataType, ge::DT_BF16, 28);  /* wrong: DT_BF16 is 27 */
#endif
#if defined(GERT_PROBE_SELFTEST) && GERT_PROBE_SELFTEST == 2
GERT_EXPECT_METHOD(ge::Session, RunGraph, ge::Status,  /* wrong: RunGraph is not const */
                   (uint32_t, const std::vector<ge::Tensor> &, std::vector<ge::Tensor> &), const);
#endif
#if defined(GERT_PROBE_SELFTEST) && GERT_PROBE_SELFTEST == 5
GERT_EXPECT_KEY(ge::OPTION_EXEC_DEVICE_ID, const char *const, "ge.exec.deviceID");  /* wrong text: main() fails */
#endif

/* ================================================================================================
 * Section B: CANN 8.x only (not in the torch-npu wheel's headers).
 * ================================================================================================ */
#ifndef GERT_PROBE_REAL_SUBSET

/* ---- option keys (ge/ge_api_types.h): GE's compile cache ---- */
GERT_EXPECT_KEY(ge::OPTION_GRAPH_COMPILER_CACHE_DIR, const char *const, "ge.graph_compiler_cache_dir");
GERT_EXPECT_KEY(ge::OPTION_GRAPH_KEY, const char *const, "ge.graph_key");

/* ---- ge/ge_api.h ---- */
GERT_EXPECT_FN(ge::GEGetErrorMsgV2, ge::AscendString, ());
GERT_EXPECT_FN(ge::GEGetWarningMsgV2, ge::AscendString, ());
GERT_EXPECT_METHOD(ge::Session, LoadGraph, ge::Status, (const uint32_t, const AStrMap &, void *), const);
GERT_EXPECT_METHOD(ge::Session, ExecuteGraphWithStreamAsync, ge::Status,
                   (uint32_t, void *, const std::vector<gert::Tensor> &, std::vector<gert::Tensor> &), );
GERT_EXPECT_METHOD(ge::Session, CompileGraph, ge::Status, (uint32_t), );
GERT_EXPECT_METHOD(ge::Session, GetCompiledGraphSummary, ge::CompiledGraphSummaryPtr, (uint32_t), );
GERT_EXPECT_METHOD(ge::Session, GetSessionId, uint64_t, (), const);
GERT_EXPECT_FN(GeSessionLoadGraph, ge::Status, (ge::Session &, uint32_t, const AStrMap &, void *));
GERT_EXPECT_FN(GeSessionExecuteGraphWithStreamAsync, ge::Status,
               (ge::Session &, uint32_t, void *, const std::vector<gert::Tensor> &, std::vector<gert::Tensor> &));
GERT_EXPECT_TYPE(ge::RunAsyncCallbackV2, std::function<void(ge::Status, std::vector<gert::Tensor> &)>);
GERT_EXPECT_KEY(ge::INPUT_HINT_SHAPE, const char *const, "ge.inputHintShape");
GERT_EXPECT_TYPE(ge::ConstGraphPtr, std::shared_ptr<const ge::Graph>);

/* ---- graph/types.h values newer than the wheel ---- */
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_NZ_C0_2, 52);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_NZ_C0_4, 53);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_FRACTAL_NZ_C0_8, 54);
GERT_EXPECT_ENUM(ge::Format, ge::FORMAT_END, 55);
/* 8.5.0's bound; METADEF master appends types (cann-api.md: do not hard-code DT_MAX in gert itself). */
GERT_EXPECT_ENUM(ge::DataType, ge::DT_MAX, 42);

/* ---- ge/ge_graph_compile_summary.h ---- */
GERT_EXPECT_TYPE(ge::CompiledGraphSummaryPtr, std::shared_ptr<ge::CompiledGraphSummary>);
static_assert(!std::is_default_constructible<ge::CompiledGraphSummary>::value &&
                  !std::is_copy_constructible<ge::CompiledGraphSummary>::value &&
                  !std::is_copy_assignable<ge::CompiledGraphSummary &>::value,
              "gert probe: only GE creates a CompiledGraphSummary, and it cannot be copied");
GERT_EXPECT_METHOD(ge::CompiledGraphSummary, IsStatic, bool, (), const);
GERT_EXPECT_METHOD(ge::CompiledGraphSummary, GetConstMemorySize, ge::Status, (size_t &), const);
GERT_EXPECT_METHOD(ge::CompiledGraphSummary, GetFeatureMemorySize, ge::Status, (size_t &), const);
GERT_EXPECT_METHOD(ge::CompiledGraphSummary, GetOutputShapes, ge::Status, (std::vector<ge::Shape> &), const);
GERT_EXPECT_METHOD(ge::CompiledGraphSummary, GetOutputDtypes, ge::Status, (std::vector<ge::DataType> &), const);

/* ---- parser/onnx_parser.h ---- */
GERT_EXPECT_FN(ge::aclgrphParseONNX, ge::graphStatus, (const char *, const AStrMap &, ge::Graph &));
GERT_EXPECT_FN(ge::aclgrphParseONNXFromMem, ge::graphStatus, (const char *, size_t, const AStrMap &, ge::Graph &));

/* ---- gert::TensorData (exe_graph/runtime/tensor_data.h) ---- */
GERT_EXPECT_TYPE(gert::TensorAddress, void *);
GERT_EXPECT_TYPE(gert::ConstTensorAddress, void *const);
GERT_EXPECT_TYPE(gert::ConstTensorAddressPtr, const void *);
GERT_EXPECT_TYPE(std::underlying_type<gert::TensorPlacement>::type, int32_t);
GERT_EXPECT_ENUM(gert::TensorPlacement, gert::kOnDeviceHbm, 0);
GERT_EXPECT_ENUM(gert::TensorPlacement, gert::kOnHost, 1);
GERT_EXPECT_ENUM(gert::TensorPlacement, gert::kFollowing, 2);
GERT_EXPECT_ENUM(gert::TensorPlacement, gert::kOnDeviceP2p, 3);
GERT_EXPECT_ENUM(gert::TensorPlacement, gert::kTensorPlacementEnd, 4);
GERT_EXPECT_TYPE(std::underlying_type<gert::TensorOperateType>::type, int32_t);
GERT_EXPECT_ENUM(gert::TensorOperateType, gert::kGetTensorAddress, 0);
GERT_EXPECT_ENUM(gert::TensorOperateType, gert::kFreeTensor, 1);
GERT_EXPECT_ENUM(gert::TensorOperateType, gert::kPlusShareCount, 2);
GERT_EXPECT_ENUM(gert::TensorOperateType, gert::kTensorOperateType, 3);
GERT_EXPECT_TYPE(gert::TensorAddrManager, ge::graphStatus (*)(void *, gert::TensorOperateType, void **));
GERT_EXPECT_FN(gert::TensorPlacementUtils::IsOnDevice, bool, (gert::TensorPlacement));
GERT_EXPECT_FN(gert::TensorPlacementUtils::IsOnHost, bool, (gert::TensorPlacement));
GERT_EXPECT_FN(gert::TensorPlacementUtils::IsOnHostFollowing, bool, (gert::TensorPlacement));
GERT_EXPECT_FN(gert::TensorPlacementUtils::IsOnHostNotFollowing, bool, (gert::TensorPlacement));
GERT_EXPECT_FN(gert::TensorPlacementUtils::IsOnDeviceHbm, bool, (gert::TensorPlacement));
GERT_EXPECT_FN(gert::TensorPlacementUtils::IsOnDeviceP2p, bool, (gert::TensorPlacement));

static_assert(!std::is_copy_constructible<gert::TensorData>::value && !std::is_copy_assignable<gert::TensorData>::value,
              "gert probe: gert::TensorData is not copyable");
static_assert(std::is_nothrow_move_constructible<gert::TensorData>::value &&
                  std::is_nothrow_move_assignable<gert::TensorData>::value,
              "gert probe: gert::TensorData moves (noexcept)");
static_assert(std::is_default_constructible<gert::TensorData>::value, "gert probe: TensorData()");
GERT_EXPECT_CTOR1(gert::TensorData, true, void *);
GERT_EXPECT_CTOR(gert::TensorData, void *, gert::TensorAddrManager);
GERT_EXPECT_CTOR(gert::TensorData, void *, gert::TensorAddrManager, size_t, gert::TensorPlacement);
GERT_EXPECT_METHOD(gert::TensorData, GetAddr, void *, (), const);
GERT_EXPECT_METHOD(gert::TensorData, GetSize, size_t, (), const);
GERT_EXPECT_METHOD(gert::TensorData, SetSize, void, (const size_t), );
GERT_EXPECT_METHOD(gert::TensorData, GetPlacement, gert::TensorPlacement, (), const);
GERT_EXPECT_METHOD(gert::TensorData, SetPlacement, void, (const gert::TensorPlacement), );
GERT_EXPECT_METHOD(gert::TensorData, Free, ge::graphStatus, (), );
GERT_EXPECT_METHOD(gert::TensorData, SetAddr, ge::graphStatus, (const void *, gert::TensorAddrManager), );
GERT_EXPECT_METHOD(gert::TensorData, IsSharedWith, bool, (const gert::TensorData &), const);
GERT_EXPECT_METHOD(gert::TensorData, ShareFrom, ge::graphStatus, (const gert::TensorData &), );
GERT_EXPECT_METHOD(gert::TensorData, Release, void *, (gert::TensorAddrManager &), );

/* ---- gert::Shape / StorageShape / ExpandDimsType / StorageFormat ---- */
GERT_EXPECT_CONST(gert::Shape::kMaxDimNum, size_t, 25U);
GERT_EXPECT_CONST(gert::Shape::kInvalidDimValue, int64_t, INT64_MIN);
GERT_EXPECT_CTOR1(gert::Shape, false, const std::initializer_list<int64_t> &);
GERT_EXPECT_METHOD(gert::Shape, GetDimNum, size_t, (), const);
GERT_EXPECT_METHOD(gert::Shape, SetDimNum, void, (const size_t), );
GERT_EXPECT_METHOD(gert::Shape, GetDim, int64_t, (const size_t), const);
GERT_EXPECT_METHOD(gert::Shape, SetDim, void, (size_t, const int64_t), );
GERT_EXPECT_METHOD(gert::Shape, AppendDim, gert::Shape &, (const int64_t), );
GERT_EXPECT_METHOD(gert::Shape, GetShapeSize, int64_t, (), const);
GERT_EXPECT_METHOD(gert::Shape, IsScalar, bool, (), const);
GERT_EXPECT_METHOD(gert::Shape, SetScalar, void, (), );
GERT_EXPECT_METHOD_OVERLOAD(gert::Shape, operator[], const int64_t &, (const size_t), const);
GERT_EXPECT_METHOD_OVERLOAD(gert::Shape, operator[], int64_t &, (const size_t), );
GERT_EXPECT_METHOD(gert::Shape, operator==, bool, (const gert::Shape &), const);

GERT_EXPECT_CTOR(gert::StorageShape, const std::initializer_list<int64_t> &, const std::initializer_list<int64_t> &);
GERT_EXPECT_METHOD(gert::StorageShape, GetOriginShape, const gert::Shape &, (), const);
GERT_EXPECT_METHOD(gert::StorageShape, GetStorageShape, const gert::Shape &, (), const);
GERT_EXPECT_METHOD(gert::StorageShape, GetShape, const gert::Shape &, (), const);
GERT_EXPECT_METHOD(gert::StorageShape, MutableOriginShape, gert::Shape &, (), );
GERT_EXPECT_METHOD(gert::StorageShape, MutableStorageShape, gert::Shape &, (), );
GERT_EXPECT_METHOD(gert::StorageShape, MutableShape, gert::Shape &, (), );

GERT_EXPECT_TYPE(gert::ExpandDimsType::AxisIndex, uint64_t);
GERT_EXPECT_CONST(gert::ExpandDimsType::kMaxExpandSize, size_t, 56U);
GERT_EXPECT_CTOR1(gert::ExpandDimsType, true, const char *);
GERT_EXPECT_CTOR1(gert::ExpandDimsType, true, int64_t);
GERT_EXPECT_METHOD(gert::ExpandDimsType, GetFullSize, uint64_t, (), const);
GERT_EXPECT_METHOD(gert::ExpandDimsType, SetExpandIndex, void, (const uint64_t), );
GERT_EXPECT_METHOD(gert::ExpandDimsType, IsExpandIndex, bool, (const uint64_t), const);

GERT_EXPECT_CTOR(gert::StorageFormat, ge::Format, ge::Format, const gert::ExpandDimsType &);
GERT_EXPECT_METHOD(gert::StorageFormat, GetOriginFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(gert::StorageFormat, SetOriginFormat, void, (const ge::Format), );
GERT_EXPECT_METHOD(gert::StorageFormat, GetStorageFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(gert::StorageFormat, SetStorageFormat, void, (const ge::Format), );
GERT_EXPECT_METHOD(gert::StorageFormat, GetExpandDimsType, gert::ExpandDimsType, (), const);
GERT_EXPECT_METHOD(gert::StorageFormat, SetExpandDimsType, void, (const gert::ExpandDimsType &), );
GERT_EXPECT_METHOD(gert::StorageFormat, MutableExpandDimsType, gert::ExpandDimsType &, (), );

/* ---- gert::Tensor (exe_graph/runtime/tensor.h) ---- */
static_assert(!std::is_copy_constructible<gert::Tensor>::value && !std::is_copy_assignable<gert::Tensor>::value,
              "gert probe: gert::Tensor is not copyable");
static_assert(std::is_move_constructible<gert::Tensor>::value && std::is_move_assignable<gert::Tensor>::value,
              "gert probe: gert::Tensor moves");
static_assert(std::is_default_constructible<gert::Tensor>::value, "gert probe: gert::Tensor()");
static_assert(std::is_standard_layout<gert::Tensor>::value, "gert probe: gert::Tensor is standard-layout");
GERT_EXPECT_CTOR(gert::Tensor, const gert::StorageShape &, const gert::StorageFormat &, const gert::TensorPlacement,
                 const ge::DataType, gert::TensorAddress);
GERT_EXPECT_CTOR(gert::Tensor, const gert::StorageShape &, const gert::StorageFormat &, ge::DataType);
GERT_EXPECT_CTOR(gert::Tensor, const gert::StorageShape &, const gert::StorageFormat &, const gert::TensorPlacement,
                 const ge::DataType, gert::TensorAddress, gert::TensorAddrManager);
GERT_EXPECT_TYPE(std::underlying_type<gert::TensorVersion>::type, uint8_t);
GERT_EXPECT_ENUM(gert::TensorVersion, gert::kTensorV1, 0);
GERT_EXPECT_ENUM(gert::TensorVersion, gert::kTensorV2, 1);
GERT_EXPECT_METHOD(gert::Tensor, GetShapeSize, int64_t, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetData, void, (gert::TensorData &&), );
GERT_EXPECT_METHOD_OVERLOAD(gert::Tensor, GetAddr, const void *, (), const);
GERT_EXPECT_METHOD_OVERLOAD(gert::Tensor, GetAddr, void *, (), );
GERT_EXPECT_METHOD(gert::Tensor, GetSize, size_t, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetSize, void, (const size_t), );
GERT_EXPECT_METHOD(gert::Tensor, GetDataType, ge::DataType, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetDataType, void, (const ge::DataType), );
GERT_EXPECT_METHOD(gert::Tensor, GetStorageShape, const gert::Shape &, (), const);
GERT_EXPECT_METHOD(gert::Tensor, MutableStorageShape, gert::Shape &, (), );
GERT_EXPECT_METHOD(gert::Tensor, GetOriginShape, const gert::Shape &, (), const);
GERT_EXPECT_METHOD(gert::Tensor, MutableOriginShape, gert::Shape &, (), );
GERT_EXPECT_METHOD_OVERLOAD(gert::Tensor, GetShape, const gert::StorageShape &, (), const);
GERT_EXPECT_METHOD_OVERLOAD(gert::Tensor, GetShape, gert::StorageShape &, (), );
GERT_EXPECT_METHOD(gert::Tensor, GetStorageFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetStorageFormat, void, (const ge::Format), );
GERT_EXPECT_METHOD(gert::Tensor, GetOriginFormat, ge::Format, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetOriginFormat, void, (const ge::Format), );
GERT_EXPECT_METHOD(gert::Tensor, GetFormat, const gert::StorageFormat &, (), const);
GERT_EXPECT_METHOD(gert::Tensor, MutableFormat, gert::StorageFormat &, (), );
GERT_EXPECT_METHOD(gert::Tensor, GetExpandDimsType, gert::ExpandDimsType, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetExpandDimsType, void, (const gert::ExpandDimsType &), );
GERT_EXPECT_METHOD(gert::Tensor, GetPlacement, gert::TensorPlacement, (), const);
GERT_EXPECT_METHOD(gert::Tensor, SetPlacement, void, (const gert::TensorPlacement), );
GERT_EXPECT_METHOD(gert::Tensor, GetTensorData, const gert::TensorData &, (), const);
GERT_EXPECT_METHOD(gert::Tensor, MutableTensorData, gert::TensorData &, (), );
GERT_EXPECT_METHOD(gert::Tensor, GetVersion, gert::TensorVersion, (), const);

/* CANN's layout, from its member lists (gert::Tensor is passed to GE by reference and is header-only). */
static_assert(sizeof(gert::Shape) == 248, "gert probe: sizeof(gert::Shape)");
static_assert(sizeof(gert::StorageShape) == 536, "gert probe: sizeof(gert::StorageShape)");
static_assert(sizeof(gert::ExpandDimsType) == 48, "gert probe: sizeof(gert::ExpandDimsType)");
static_assert(sizeof(gert::StorageFormat) == 96, "gert probe: sizeof(gert::StorageFormat)");
static_assert(sizeof(gert::TensorData) == 72, "gert probe: sizeof(gert::TensorData)");
static_assert(sizeof(gert::Tensor) == 752, "gert probe: sizeof(gert::Tensor)");

/* The two ways CANN's users fill a std::vector<gert::Tensor> (TRITON-GE; GE's recommendation example).
 * Never called: compiled only, so no GE library is needed at link time. */
inline void gert_probe_usage(void *dev, size_t bytes, std::vector<gert::Tensor> &v) {
  gert::Tensor t = {gert::StorageShape({1, 3}, {1, 3}), gert::StorageFormat(ge::FORMAT_ND, ge::FORMAT_ND, {}),
                    gert::kOnDeviceHbm, ge::DT_FLOAT, dev};
  v.emplace_back(std::move(t));
  gert::Tensor u;
  u.SetData(gert::TensorData(dev, nullptr, bytes, gert::kOnDeviceHbm));
  v.push_back(std::move(u));
  v.resize(4);
}

#if defined(GERT_PROBE_SELFTEST) && GERT_PROBE_SELFTEST == 3
static_assert(std::is_copy_constructible<gert::TensorData>::value,  /* wrong: TensorData is move-only */
              "gert probe: selftest 3");
#endif
#if defined(GERT_PROBE_SELFTEST) && GERT_PROBE_SELFTEST == 4
GERT_EXPECT_METHOD(ge::Session, ExecuteGraphWithStreamAsync, ge::Status,  /* wrong: gert::Tensor, not ge::Tensor */
                   (uint32_t, void *, const std::vector<ge::Tensor> &, std::vector<ge::Tensor> &), );
#endif

#endif  /* !GERT_PROBE_REAL_SUBSET */

/* ================================================================================================
 * Runtime part: option key texts and data type sizes.
 * ================================================================================================ */
#ifdef GERT_PROBE_MAIN
int main() {
  int bad = 0;
  int keys = 0;
  for (const gert_probe::KeyCheck *k = gert_probe::g_keys; k != nullptr; k = k->next, ++keys) {
    if (std::strcmp(k->actual, k->expected) != 0) {
      std::printf("gert probe: %s is \"%s\", CANN has \"%s\"\n", k->name, k->actual, k->expected);
      ++bad;
    }
  }
  const std::set<std::string> parser_keys = {"input_shape", "is_input_adjust_hw_layout", "is_output_adjust_hw_layout",
                                             "enable_scope_fusion_passes", "output", "ge.outputNodeName",
                                             "ge.INPUT_NODES_SET_FP16", "input_data_names"};
  if (ge::ir_option::ir_parser_suppported_options != parser_keys) {
    std::printf("gert probe: ir_parser_suppported_options differs from CANN's eight keys\n");
    ++bad;
  }
  /* sizes per ge::DataType value 0..41: bytes, 1000 + bits for sub-byte types, -1 if none */
  static const int kSizes[42] = {4, 2, 1, 4, 1, -1, 2, 2, 4, 8, 8, 8, 1, -1, 1, 1, 8, 16, 1, 2, 4,
                                 1, 2, 8, -1, 5, 8, 2, -1, 1004, 1001, 1002, 1002, 4, 1, 1, 1, 1, 1006, 1006,
                                 1004, 1004};
  for (int dt = 0; dt < 42; ++dt) {
    const int got = ge::GetSizeByDataType(static_cast<ge::DataType>(dt));
    if (got != kSizes[dt]) {
      std::printf("gert probe: GetSizeByDataType(%d) = %d, CANN has %d\n", dt, got, kSizes[dt]);
      ++bad;
    }
  }
  if (ge::UNKNOWN_SHAPE != std::vector<int64_t>{-1} || ge::UNKNOWN_RANK != std::vector<int64_t>{-2}) {
    std::printf("gert probe: UNKNOWN_SHAPE / UNKNOWN_RANK differ from CANN's {-1} / {-2}\n");
    ++bad;
  }
  std::printf("gert probe: %d option keys checked, %d mismatches\n", keys, bad);
  return bad == 0 ? 0 : 1;
}
#endif
