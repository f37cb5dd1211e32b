// Host NPU: thread-local recent error message (aclGetRecentErrMsg), counters and tuning knobs.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "gert_host/host_npu.h"
#include "runtime.h"

namespace hostnpu {

namespace {
thread_local std::string tls_msg;
thread_local aclError tls_last = ACL_SUCCESS;  // aclrtGetLastError: set by every failing runtime call
std::atomic<uint32_t> g_spin_us{[] {
  const char *v = std::getenv("GERT_HOST_SPIN_US");
  return v ? static_cast<uint32_t>(std::strtoul(v, nullptr, 10)) : 50u;
}()};
std::atomic<bool> g_inline_launch{[] {
  const char *v = std::getenv("GERT_HOST_INLINE_LAUNCH");
  return !(v && std::strcmp(v, "0") == 0);
}()};
}  // namespace

void set_recent_error(aclError code, const std::string &msg) {
  tls_msg = "EE" + std::to_string(code) + ": " + msg;
}

aclError fail(aclError code, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_recent_error(code, buf);
  // As CANN: the ACL layer's parameter checks (100000) and feature-not-supported returns do not set it.
  if (code != ACL_ERROR_INVALID_PARAM && code != ACL_ERROR_RT_FEATURE_NOT_SUPPORT) tls_last = code;
  return code;
}

aclError internal_failure(aclError code, const char *api) {
  try {
    throw;  // the exception being handled
  } catch (const std::bad_alloc &) {
    return fail(code, "%s: the host ran out of memory (std::bad_alloc)", api);
  } catch (const std::exception &x) {
    return fail(code, "%s: internal error: %s", api, x.what());
  } HOSTNPU_PASS_UNWIND catch (...) {
    return fail(code, "%s: internal error (a C++ exception)", api);
  }
}

aclError last_error(bool clear) {
  aclError e = tls_last;
  if (clear) tls_last = ACL_SUCCESS;
  return e;
}

Counters &counters() {
  static Counters *c = new Counters();
  return *c;
}

uint32_t spin_micros() { return g_spin_us.load(std::memory_order_relaxed); }
bool inline_launches() { return g_inline_launch.load(std::memory_order_relaxed); }

// CANN 8.5 (acl.cpp, API reference 0133): aclGetRecentErrMsg returns the thread's message and clears it; nullptr
// when there is none; the pointer stays valid until the thread's next call.
const char *take_recent_error_message() {
  thread_local std::string returned;
  if (tls_msg.empty()) return nullptr;
  returned = std::move(tls_msg);
  tls_msg.clear();
  return returned.c_str();
}

}  // namespace hostnpu

using namespace hostnpu;

extern "C" {

const char *aclGetRecentErrMsg() { return take_recent_error_message(); }

void gertHostGetCounters(gertHostCounters *out) try {
  auto &c = counters();
  out->bytes_h2h = c.bytes[ACL_MEMCPY_HOST_TO_HOST].load();
  out->bytes_h2d = c.bytes[ACL_MEMCPY_HOST_TO_DEVICE].load();
  out->bytes_d2h = c.bytes[ACL_MEMCPY_DEVICE_TO_HOST].load();
  out->bytes_d2d = c.bytes[ACL_MEMCPY_DEVICE_TO_DEVICE].load();
  out->tasks = c.tasks.load();
  out->device_memory_in_use = c.mem_in_use.load();
  out->device_memory_peak = c.mem_peak.load();
  out->streams_alive = c.streams_alive.load();
  out->faults_execute = c.faults[0].load();
  out->faults_sticky = c.faults[1].load();
  out->faults_hang = c.faults[2].load();
  out->faults_malloc = c.faults[3].load();
  out->faults_memcpy = c.faults[4].load();
  out->stream_aborts = c.stream_aborts.load();
  out->device_task_aborts = c.device_task_aborts.load();
  out->inline_tasks = c.inline_tasks.load();
} HOSTNPU_PASS_UNWIND catch (...) {
}

void gertHostResetCounters(void) try {
  auto &c = counters();
  for (auto &b : c.bytes) b.store(0);
  c.tasks.store(0);
  for (auto &f : c.faults) f.store(0);
  c.stream_aborts.store(0);
  c.device_task_aborts.store(0);
  c.inline_tasks.store(0);
  c.mem_peak.store(c.mem_in_use.load());
} HOSTNPU_PASS_UNWIND catch (...) {
}

void gertHostSetSpinMicros(uint32_t us) { g_spin_us.store(us); }
uint32_t gertHostGetSpinMicros(void) { return g_spin_us.load(); }
void gertHostSetInlineLaunch(int on) { g_inline_launch.store(on != 0); }
int gertHostGetInlineLaunch(void) { return g_inline_launch.load() ? 1 : 0; }

}  // extern "C"
