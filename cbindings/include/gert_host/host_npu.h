/* gert host NPU: introspection API kept apart from the CANN names.
 * Only the host NPU implements it; with a real toolkit gert does not call it. */
#ifndef GERT_HOST_NPU_H_
#define GERT_HOST_NPU_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gertHostCounters {
  uint64_t bytes_h2d;
  uint64_t bytes_d2h;
  uint64_t bytes_d2d;
  uint64_t bytes_h2h;
  uint64_t tasks;              /* stream tasks run to completion */
  uint64_t device_memory_in_use; /* bytes, all devices */
  uint64_t device_memory_peak;   /* bytes, all devices, since the last reset */
  uint64_t streams_alive;
  uint64_t faults_execute;     /* injected faults fired, per kind (gertHostInjectFault, GERT_HOST_FAULTS) */
  uint64_t faults_sticky;
  uint64_t faults_hang;
  uint64_t faults_malloc;
  uint64_t faults_memcpy;
  uint64_t stream_aborts;      /* aclrtStreamAbort calls */
  uint64_t device_task_aborts; /* aclrtDeviceTaskAbort calls */
  uint64_t inline_tasks;       /* stream tasks run on the thread that launched them (inline mode, inline launches) */
} gertHostCounters;

void gertHostGetCounters(gertHostCounters *out);
/* Fault injection. kind: "execute" (a kernel task fails with ACL_ERROR_RT_AICORE_EXCEPTION, reported once by the
 * next synchronize), "sticky" (the same, and every later launch on the device fails at the call until
 * aclrtDeviceTaskAbort or aclrtResetDeviceForce), "hang" (a kernel task runs only after duration_ms, 0 = until
 * aclrtStreamAbort), "malloc" (a device allocation fails with ACL_ERROR_RT_MEMORY_ALLOCATION), "memcpy" (a copy fails
 * with ACL_ERROR_RT_SYS_DMA). The fault hits the `count` launches (allocations, copies) on `device` that follow the
 * next `after` ones, or with every > 0 every `every`-th launch from there on, `count` times. Returns 0, or -1 for an
 * unknown kind. GERT_HOST_FAULTS arms the same at aclInit. */
int gertHostInjectFault(const char *kind, int32_t device, uint64_t after, uint64_t count, uint64_t every,
                        uint32_t duration_ms);
void gertHostClearFaults(void);
/* Zero the byte, task, fault and abort counters; the peak restarts from the memory in use now. */
void gertHostResetCounters(void);
/* How long a stream worker and a synchronizing thread spin before they block, in microseconds. */
void gertHostSetSpinMicros(uint32_t us);
uint32_t gertHostGetSpinMicros(void);
/* Inline launches (on by default; GERT_HOST_INLINE_LAUNCH=0 turns them off at start): a graph run launched
 * (ExecuteGraphWithStreamAsync) on an idle stream runs on the launching thread before the launch returns, in the
 * stream's order, instead of being handed to the stream's worker thread. 0 off, 1 on. */
void gertHostSetInlineLaunch(int on);
int gertHostGetInlineLaunch(void);
/* Inline mode for a caller that enqueues work and then waits for it anyway: once the stream is idle, the work this
 * thread enqueues runs on this thread, in order, until End (no hand-off to the stream's worker thread). The stream
 * argument is an aclrtStream. Begin returns 0, or -1 for an unknown stream. */
int gertHostStreamBeginInline(void *stream);
/* Begin, waiting at most timeout_ms (< 0: forever) for the stream to go idle: 0 inline, 1 timed out (not inline),
 * -1 an unknown stream. */
int gertHostStreamBeginInlineFor(void *stream, int32_t timeout_ms);
void gertHostStreamEndInline(void *stream);
/* aclrtLaunchHostFunc, plus `drop`: called with args instead of fn when the host function never runs (an abort
 * dropped it), so that whatever args holds is released. drop may be NULL. Returns an aclError. */
int gertHostLaunchHostFuncEx(void *stream, void (*fn)(void *args), void (*drop)(void *args), void *args);
/* The calling thread's last CompileGraph (or RunGraph compile) with GE's compile cache: 0 the cache was not used
 * (ge.graph_compiler_cache_dir or ge.graph_key unset, or the compile failed), 1 a hit (loaded from the cache),
 * 2 a miss (compiled and saved). Real GE only logs this; gert counts it per stream. */
int gertHostLastCompileCache(void);
/* Inside a graph provider's compile call: the GE option `key` as that compile sees it (the graph's, else the
 * session's, else GEInitialize's; "" when unset), e.g. ge.exec.precision_mode. NULL outside a compile. The string
 * stays valid until the thread's next call. */
const char *gertHostCompileOption(const char *key);
/* Bytes of serialized ONNX models the host NPU holds now: a graph parsed from memory holds its model's; one parsed
 * from a file holds none, only while a compile reads them again (issue 41). */
uint64_t gertHostModelBytesHeld(void);

#ifdef __cplusplus
}
#endif

#endif
