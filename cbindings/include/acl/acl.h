/* gert: the subset of CANN's acl/acl.h that gert uses (CANN 8.5 layout: acl.h includes acl_rt.h).
 * Declarations are signature-identical to CANN's; tests/test_api_fidelity.py proves it against the
 * real headers. */
#ifndef INC_EXTERNAL_ACL_ACL_H_
#define INC_EXTERNAL_ACL_ACL_H_

#include "acl_rt.h"

#endif
