/* gert: CANN 8.5 ge/ge_api_error_codes.h (METADEF inc/external/ge_common/ge_api_error_codes.h), the
 * subset gert uses: the generic ge::Status values.  A GE status packs, from the top bit down,
 * runtime (2 bits), type (2), level (3), system id (8), module id (5) and value (12); FAILED has
 * every field at its maximum.  CANN's StatusFactory (status descriptions) is not declared here. */
#ifndef INC_EXTERNAL_GE_COMMON_GE_API_ERROR_CODES_H_
#define INC_EXTERNAL_GE_COMMON_GE_API_ERROR_CODES_H_

#include <cstdint>
#include <map>
#include <string>
#include "ge_error_codes.h"
#include "ge_api_types.h"
#include "graph/ascend_string.h"

namespace ge {
constexpr Status SUCCESS = 0U;
constexpr Status FAILED = (0x3U << 30U) | (0x3U << 28U) | (0x7U << 25U) | (0xFFU << 17U) | (0x1FU << 12U) | 0xFFFU;
static_assert(FAILED == 0xFFFFFFFFU, "ge::FAILED is all ones");
}  // namespace ge

#endif  // INC_EXTERNAL_GE_COMMON_GE_API_ERROR_CODES_H_
