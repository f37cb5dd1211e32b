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
} gertHostCounters;

void gertHostGetCounters(gertHostCounters *out);
/* Zero the byte and task counters; the peak restarts from the memory in use now. */
void gertHostResetCounters(void);
/* How long a stream worker and a synchronizing thread spin before they block, in microseconds. */
void gertHostSetSpinMicros(uint32_t us);
uint32_t gertHostGetSpinMicros(void);
/* Inline mode for a caller that enqueues work and then waits for it anyway: once the stream is idle, the work this
 * thread enqueues runs on this thread, in order, until End (no hand-off to the stream's worker thread). The stream
 * argument is an aclrtStream. Begin returns 0, or -1 for an unknown stream. */
int gertHostStreamBeginInline(void *stream);
void gertHostStreamEndInline(void *stream);

#ifdef __cplusplus
}
#endif

#endif
