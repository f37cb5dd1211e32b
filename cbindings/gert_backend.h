/* gert: build-time backend selection and small per-thread helpers for the Cython layer. */
#ifndef GERT_BACKEND_H_
#define GERT_BACKEND_H_

#include <Python.h>
#include <stdint.h>

/* GERT_HOSTNPU: the host NPU is compiled into gert._cann (setup.py's default build).
 * GERT_HOSTNPU_MODULE: gert._hostnpu, built against the host NPU packaged as a toolkit.
 * Neither: gert._cann built against a CANN toolkit, which knows nothing of the host NPU's own API (gert_host/). */
#if defined(GERT_HOSTNPU) || defined(GERT_HOSTNPU_MODULE)
#include "gert_host/host_npu.h"
#include "gert_host/graph_provider.h"
#endif

#ifdef GERT_HOSTNPU
#define GERT_BACKEND_NAME "hostnpu"
#else
#define GERT_BACKEND_NAME "cann"
#endif

/* The toolkit's root at build time (setup.py defines it in toolkit mode). */
#ifndef GERT_TOOLKIT_ROOT
#define GERT_TOOLKIT_ROOT ""
#endif

/* aclrtLaunchHostFunc whose args the runtime releases through drop(args) when the function never runs (an abort
 * dropped it): the host NPU's gertHostLaunchHostFuncEx. A CANN toolkit has no such hook: there drop is never
 * called (a host function dropped by aclrtStreamAbort keeps what its args hold). Returns an aclError. */
#ifdef GERT_HOSTNPU
static inline int gert_launch_host_func(void *stream, void (*fn)(void *), void (*drop)(void *), void *args) {
  return gertHostLaunchHostFuncEx(stream, fn, drop, args);
}
#else
#include "acl/acl.h"
static inline int gert_launch_host_func(void *stream, void (*fn)(void *), void (*drop)(void *), void *args) {
  (void)drop;
  return aclrtLaunchHostFunc(stream, fn, args);
}
#endif

static thread_local void *gert_tls_ctx_ = nullptr;
static inline void *gert_tls_context(void) { return gert_tls_ctx_; }
static inline void gert_tls_set_context(void *ctx) { gert_tls_ctx_ = ctx; }

/* A thread Python did not create builds and destroys a PyThreadState on every `with gil` (~25 us here).
 * gert_pin_thread_state() takes one extra PyGILState reference the first time a runtime worker thread runs
 * Python, so every later `with gil` only takes the GIL; the reference is dropped when the thread exits.
 * Call it without the GIL held.
 * The pinned state is a trivially destructible thread_local; the object whose destructor drops the reference is
 * constructed only in a thread that pins. A thread Python created (which trampolines also run on: the host NPU
 * runs a stream's work inline on its caller's thread) thus registers no TLS destructor: such a detached thread's
 * exit-time read of its own TLS raced, for ThreadSanitizer, with glibc freeing that TLS block when another thread
 * reused the exited thread's stack. */
static thread_local PyThreadState *gert_pinned_tstate_ = nullptr;
struct GertPinnedThreadState {
  ~GertPinnedThreadState() {
    PyThreadState *tstate = gert_pinned_tstate_;
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

/* Whether the interpreter is shutting down: a runtime worker that takes the GIL then is ended by pthread_exit, whose
 * unwinding through the runtime's noexcept code aborts the process. Trampolines check it first and skip Python
 * (what they would release is released with the process). */
static inline int gert_python_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

static inline void gert_pin_thread_state(void) {
  if (gert_pinned_tstate_) return;
  if (PyGILState_GetThisThreadState() != NULL) return; /* a thread that already has a Python state */
  PyGILState_Ensure();
  gert_pinned_tstate_ = PyEval_SaveThread();
  static thread_local GertPinnedThreadState release_at_exit; /* constructed here: only pinning threads have it */
  (void)release_at_exit;
}

#endif
