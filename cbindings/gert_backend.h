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
/* Built against a real CANN toolkit: the host NPU introspection API does not exist there. */
#define GERT_BACKEND_NAME "cann"
#define GERT_HAS_HOST_NPU 0
typedef struct gertHostCounters {
  uint64_t bytes_h2d, bytes_d2h, bytes_d2d, bytes_h2h, tasks, device_memory_in_use, device_memory_peak, streams_alive;
} gertHostCounters;
static inline void gertHostGetCounters(gertHostCounters *out) { (void)out; }
static inline void gertHostResetCounters(void) {}
static inline void gertHostSetSpinMicros(uint32_t us) { (void)us; }
static inline uint32_t gertHostGetSpinMicros(void) { return 0; }
#define GERT_HOST_MAX_DIMS 25
typedef struct gertHostTensorRef {
  void *data;
  uint64_t nbytes;
  int32_t dtype;
  int32_t ndim;
  int64_t dims[GERT_HOST_MAX_DIMS];
} gertHostTensorRef;
typedef void *(*gertHostOutputAlloc)(void *alloc_ctx, uint64_t nbytes);
typedef struct gertHostGraphProvider {
  void *ctx;
  int (*compile)(void *, const void *, size_t, int32_t, const char *const *, const gertHostTensorRef *, int32_t,
                 const char *const *, gertHostTensorRef *, void **, char *, size_t);
  int (*prepare)(void *, int32_t, char *, size_t);
  int (*run)(void *, int32_t, int32_t, const gertHostTensorRef *, int32_t, gertHostTensorRef *, gertHostOutputAlloc,
             void *, char *, size_t);
  void (*release)(void *);
} gertHostGraphProvider;
static inline void gertHostSetGraphProvider(const gertHostGraphProvider *p) { (void)p; }
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
