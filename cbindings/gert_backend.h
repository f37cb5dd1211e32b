/* gert: build-time backend selection and small per-thread helpers for the Cython layer. */
#ifndef GERT_BACKEND_H_
#define GERT_BACKEND_H_

#include <Python.h>
#include <stdint.h>

#ifdef GERT_HOSTNPU
#include "gert_host/host_npu.h"
#include "gert_host/graph_provider.h"
#define GERT_BACKEND_NAME "hostnpu"
#define GERT_HAS_HOST_NPU 1
#else
/* Built against a real CANN toolkit: the host NPU's introspection and provider APIs do not exist there. Their
 * types come from the same headers; the calls become no-ops. */
#include "include/gert_host/host_npu.h"
#include "include/gert_host/graph_provider.h"
#define GERT_BACKEND_NAME "cann"
#define GERT_HAS_HOST_NPU 0
#define gertHostGetCounters(out) ((void)(out))
#define gertHostResetCounters() ((void)0)
#define gertHostSetSpinMicros(us) ((void)(us))
#define gertHostGetSpinMicros() ((uint32_t)0)
#define gertHostSetGraphProvider(p) ((void)(p))
#define gertHostStreamBeginInline(s) ((void)(s), -1)
#define gertHostStreamEndInline(s) ((void)(s))
#define gertHostInjectFault(k, d, a, c, e, ms) ((void)(k), (void)(d), (void)(a), (void)(c), (void)(e), (void)(ms), -1)
#define gertHostClearFaults() ((void)0)
#define gertHostLastCompileCache() 0
#endif

static thread_local void *gert_tls_ctx_ = nullptr;
static inline void *gert_tls_context(void) { return gert_tls_ctx_; }
static inline void gert_tls_set_context(void *ctx) { gert_tls_ctx_ = ctx; }

/* A thread Python did not create builds and destroys a PyThreadState on every `with gil` (~25 us here).
 * gert_pin_thread_state() takes one extra PyGILState reference the first time a runtime worker thread runs
 * Python, so every later `with gil` only takes the GIL; the reference is dropped when the thread exits.
 * Call it without the GIL held. */
struct GertPinnedThreadState {
  PyThreadState *tstate = nullptr;
  ~GertPinnedThreadState() {
    if (!tstate) return;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return;
#else
    if (_Py_IsFinalizing()) return;
#endif
    PyEval_RestoreThread(tstate);
    PyGILState_Release(PyGILState_UNLOCKED);
  }
};
static thread_local GertPinnedThreadState gert_pinned_;

static inline void gert_pin_thread_state(void) {
  if (gert_pinned_.tstate) return;
  if (PyGILState_GetThisThreadState() != NULL) return; /* a thread that already has a Python state */
  PyGILState_Ensure();
  gert_pinned_.tstate = PyEval_SaveThread();
}

#endif
