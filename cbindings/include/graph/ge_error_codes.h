/* gert: CANN 8.5 graph/ge_error_codes.h (METADEF) -- ge::graphStatus and its codes, plus the
 * visibility / deprecation macros that the other GE headers use.  Written for gert; the numbers are
 * CANN's. */
#ifndef INC_EXTERNAL_GRAPH_GE_ERROR_CODES_H_
#define INC_EXTERNAL_GRAPH_GE_ERROR_CODES_H_

#include <cstdint>

#ifndef GE_FUNC_HOST_VISIBILITY
#if defined(HOST_VISIBILITY) && defined(__GNUC__)
#define GE_FUNC_HOST_VISIBILITY __attribute__((visibility("default")))
#else
#define GE_FUNC_HOST_VISIBILITY
#endif
#endif

#ifndef GE_FUNC_DEV_VISIBILITY
#if defined(DEV_VISIBILITY) && defined(__GNUC__)
#define GE_FUNC_DEV_VISIBILITY __attribute__((visibility("default")))
#else
#define GE_FUNC_DEV_VISIBILITY
#endif
#endif

/* CANN marks the std::string overloads deprecated in favour of the AscendString ones. */
#ifndef ATTRIBUTED_DEPRECATED
#if defined(NO_METADEF_ABI_COMPATIABLE)
#define ATTRIBUTED_DEPRECATED(replacement)
#elif defined(__GNUC__)
#define ATTRIBUTED_DEPRECATED(replacement) __attribute__((deprecated("Please use " #replacement " instead.")))
#else
#define ATTRIBUTED_DEPRECATED(replacement) __declspec(deprecated("Please use " #replacement " instead."))
#endif
#endif

namespace ge {
using graphStatus = uint32_t;

const graphStatus GRAPH_SUCCESS = 0;
const graphStatus GRAPH_FAILED = 0xFFFFFFFF;
const graphStatus GRAPH_NOT_CHANGED = 1343242304;
const graphStatus GRAPH_PARAM_INVALID = 50331649;
const graphStatus GRAPH_NODE_WITHOUT_CONST_INPUT = 50331648;
const graphStatus GRAPH_NODE_NEED_REPASS = 50331647;
const graphStatus GRAPH_INVALID_IR_DEF = 50331646;
const graphStatus GRAPH_PARAM_OUT_OF_RANGE = 50331644;
const graphStatus GRAPH_MEM_OPERATE_FAILED = 50331539;
const graphStatus GRAPH_NULL_PTR = 50331538;
const graphStatus GRAPH_MEMCPY_FAILED = 50331537;
const graphStatus GRAPH_MEMSET_FAILED = 50331536;
const graphStatus GRAPH_MATH_CAL_FAILED = 50331429;
const graphStatus GRAPH_ADD_OVERFLOW = 50331428;
const graphStatus GRAPH_MUL_OVERFLOW = 50331427;
}  // namespace ge

#endif  // INC_EXTERNAL_GRAPH_GE_ERROR_CODES_H_
