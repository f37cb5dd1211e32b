/* gert: CANN's acl/acl_base.h umbrella (base types and error codes). */
#ifndef INC_EXTERNAL_ACL_ACL_BASE_H_
#define INC_EXTERNAL_ACL_ACL_BASE_H_

#include "acl/acl_base_rt.h"
#include "error_codes/rt_error_codes.h"

#endif
