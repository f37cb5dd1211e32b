// Host NPU: fault injection (gert.inject_fault, GERT_HOST_FAULTS) and the runtime's fault reporting and recovery
// calls, as CANN 8.5 does them (shared/docs/cann-runtime-rules.md, part 2): aclrtStreamAbort, aclrtDeviceTaskAbort,
// aclrtSetStreamFailureMode, aclrtGetLastError / aclrtPeekAtLastError. A toolkit build has no fault injection.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "gert_host/host_npu.h"
#include "runtime.h"

namespace hostnpu {

namespace {

struct Armed {
  FaultKind kind;
  int32_t device;
  uint64_t after, count;
  uint32_t duration_ms;
  uint64_t every = 0;  // 0: the `count` launches right after `after`; N: every N-th launch from `after` on
  uint64_t seen = 0, fired = 0;
};

std::mutex g_mu;
std::vector<Armed> g_armed;   // under g_mu
std::atomic<int> g_n_armed{0};

const char *const kKindNames[] = {"execute", "sticky", "hang", "malloc", "memcpy"};

FaultSite site_of(FaultKind k) {
  switch (k) {
    case FaultKind::Malloc: return FaultSite::Alloc;
    case FaultKind::Memcpy: return FaultSite::Copy;
    default: return FaultSite::Kernel;
  }
}

bool kind_of(const std::string &name, FaultKind *out) {
  for (int i = 0; i < 5; ++i) {
    if (name == kKindNames[i]) {
      *out = static_cast<FaultKind>(i);
      return true;
    }
  }
  return false;
}

void arm(const Armed &a) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_armed.push_back(a);
  g_n_armed.store(static_cast<int>(g_armed.size()));
}

}  // namespace

Fault draw_fault(FaultSite site, int32_t device) {
  Fault f;
  if (g_n_armed.load(std::memory_order_relaxed) == 0) return f;  // the common case: nothing armed
  std::lock_guard<std::mutex> lk(g_mu);
  const Armed *hit = nullptr;
  for (auto &a : g_armed) {  // every armed fault of this site and device counts the launch
    if (a.device != device || site_of(a.kind) != site || a.fired >= a.count) continue;
    bool due = a.seen >= a.after && (a.every == 0 || (a.seen - a.after) % a.every == 0);
    a.seen++;
    if (due && !hit) {
      a.fired++;
      hit = &a;
    }
  }
  if (!hit) return f;
  FaultKind kind = hit->kind;
  uint32_t duration_ms = hit->duration_ms;
  uint64_t fired = hit->fired, count = hit->count;
  g_armed.erase(std::remove_if(g_armed.begin(), g_armed.end(), [](const Armed &a) { return a.fired >= a.count; }),
                g_armed.end());  // spent faults cost the next launches nothing
  g_n_armed.store(static_cast<int>(g_armed.size()));
  counters().faults[static_cast<int>(kind)].fetch_add(1);
  std::string tag = std::string("injected ") + kKindNames[static_cast<int>(kind)] + " fault " +
                    std::to_string(fired) + " of " + std::to_string(count) + " on device " + std::to_string(device);
  switch (kind) {
    case FaultKind::Execute:
      f.code = ACL_ERROR_RT_AICORE_EXCEPTION;
      f.what = "AI Core exception (" + tag + ")";
      break;
    case FaultKind::Sticky:
      f.code = ACL_ERROR_RT_AICORE_EXCEPTION;
      f.device_wide = true;
      f.what = "AI Core exception, device-wide (" + tag + ")";
      break;
    case FaultKind::Hang:
      f.hang_ms = duration_ms ? duration_ms : UINT32_MAX;
      f.what = "task hangs (" + tag + ")";
      break;
    case FaultKind::Malloc:
      f.code = ACL_ERROR_RT_MEMORY_ALLOCATION;
      f.what = "out of device memory (" + tag + ")";
      break;
    case FaultKind::Memcpy:
      f.code = ACL_ERROR_RT_SYS_DMA;
      f.what = "DMA copy failed (" + tag + ")";
      break;
  }
  return f;
}

aclError load_env_faults() {
  static bool loaded = false;  // under rt().mu (aclInit)
  if (loaded) return ACL_SUCCESS;
  loaded = true;
  const char *env = std::getenv("GERT_HOST_FAULTS");
  if (!env || !*env) return ACL_SUCCESS;
  std::string spec(env);
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    std::string entry = spec.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    std::vector<std::string> fields;
    for (size_t p = 0; p <= entry.size();) {
      size_t q = entry.find(':', p);
      if (q == std::string::npos) q = entry.size();
      fields.push_back(entry.substr(p, q - p));
      p = q + 1;
    }
    Armed a{FaultKind::Execute, 0, 0, 1, 0, 0};
    if (!kind_of(fields[0], &a.kind))
      return fail(ACL_ERROR_INVALID_PARAM, "aclInit: GERT_HOST_FAULTS entry '%s': unknown kind '%s' (kinds: execute, "
                  "sticky, hang, malloc, memcpy)", entry.c_str(), fields[0].c_str());
    for (size_t i = 1; i < fields.size(); ++i) {
      size_t eq = fields[i].find('=');
      std::string key = fields[i].substr(0, eq);
      const char *val = eq == std::string::npos ? "" : fields[i].c_str() + eq + 1;
      char *stop = nullptr;
      long long v = std::strtoll(val, &stop, 10);
      if (eq == std::string::npos || !*val || *stop || v < 0)
        return fail(ACL_ERROR_INVALID_PARAM, "aclInit: GERT_HOST_FAULTS entry '%s': '%s' is not key=<integer >= 0>",
                    entry.c_str(), fields[i].c_str());
      if (key == "after") a.after = static_cast<uint64_t>(v);
      else if (key == "count") a.count = static_cast<uint64_t>(v);
      else if (key == "duration_ms") a.duration_ms = static_cast<uint32_t>(v);
      else if (key == "device") a.device = static_cast<int32_t>(v);
      else if (key == "every") a.every = static_cast<uint64_t>(v);
      else
        return fail(ACL_ERROR_INVALID_PARAM, "aclInit: GERT_HOST_FAULTS entry '%s': unknown key '%s' (keys: after, "
                    "count, every, duration_ms, device)", entry.c_str(), key.c_str());
    }
    arm(a);
  }
  return ACL_SUCCESS;
}

void Device::set_sticky(aclError e, const std::string &msg) {
  std::lock_guard<std::mutex> lk(sticky_mu);
  if (sticky.load() != ACL_SUCCESS) return;  // the first error sticks
  sticky_msg = msg;
  sticky.store(e);
}

void Device::clear_sticky() {
  std::lock_guard<std::mutex> lk(sticky_mu);
  sticky.store(ACL_SUCCESS);
  sticky_msg.clear();
}

aclError Device::launch_error(std::string &msg) {
  if (aborting.load()) {
    msg = "device " + std::to_string(id) + " is being aborted (aclrtDeviceTaskAbort)";
    return ACL_ERROR_RT_DEVICE_TASK_ABORT;
  }
  aclError e = sticky.load();
  if (e == ACL_SUCCESS) return e;
  std::lock_guard<std::mutex> lk(sticky_mu);
  msg = "device " + std::to_string(id) + " failed earlier and takes no work until aclrtDeviceTaskAbort or "
        "aclrtResetDeviceForce: " + sticky_msg;
  return e;
}

}  // namespace hostnpu

using namespace hostnpu;

extern "C" {

int gertHostInjectFault(const char *kind, int32_t device, uint64_t after, uint64_t count, uint64_t every,
                        uint32_t duration_ms) try {
  FaultKind k;
  if (!kind || !kind_of(kind, &k)) return -1;
  arm(Armed{k, device, after, count, duration_ms, every});
  return 0;
} HOSTNPU_PASS_UNWIND catch (...) {
  return -1;
}

void gertHostClearFaults(void) try {
  std::lock_guard<std::mutex> lk(g_mu);
  g_armed.clear();
  g_n_armed.store(0);
} HOSTNPU_PASS_UNWIND catch (...) {
}

aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode) try {
  if (!stream) return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetStreamFailureMode: not allowed on the default stream");
  if (mode != ACL_CONTINUE_ON_FAILURE && mode != ACL_STOP_ON_FAILURE)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtSetStreamFailureMode: mode %llu is neither ACL_CONTINUE_ON_FAILURE (0) "
                "nor ACL_STOP_ON_FAILURE (1)", static_cast<unsigned long long>(mode));
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetStreamFailureMode: %p is not a live stream", stream);
  {
    std::lock_guard<std::mutex> lk(rt().mu);
    if (s->failure_mode_set)
      return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetStreamFailureMode: the failure mode of stream %p is already set "
                  "(once per stream)", stream);
    s->failure_mode_set = true;
  }
  s->stop_on_failure.store(mode == ACL_STOP_ON_FAILURE);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtStreamAbort(aclrtStream stream) try {
  if (aclError e = check_init("aclrtStreamAbort")) return e;
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamAbort: %p is not a live stream", stream);
  s->abort(-1);
  counters().stream_aborts.fetch_add(1);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtDeviceTaskAbort(int32_t deviceId, uint32_t timeout) try {
  if (aclError e = check_init("aclrtDeviceTaskAbort")) return e;
  Device *d = find_device(deviceId);
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtDeviceTaskAbort: device id %d is out of range", deviceId);
  std::vector<StreamPtr> streams;
  {
    std::lock_guard<std::mutex> lk(rt().mu);
    for (auto &kv : rt().streams)
      if (kv.second->device() == deviceId) streams.push_back(kv.second);
  }
  d->aborting.store(true);  // other launches on the device fail with 107022 meanwhile
  // End the work of every stream first (queues dropped, hangs and event waits ended), then wait for their running
  // tasks against one deadline: a stream waiting on another stream's event is not left waiting for that one's abort.
  for (auto &s : streams) s->begin_abort();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
  bool in_time = true;
  for (auto &s : streams) {
    int64_t left = -1;  // timeout 0: wait forever
    if (timeout) {
      left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left < 1) left = 1;
    }
    in_time = s->finish_abort(left) && in_time;
  }
  d->clear_sticky();  // DeviceClean: the device and context errors are gone
  d->aborting.store(false);
  counters().device_task_aborts.fetch_add(1);
  if (!in_time)  // the code for an abort that outlives its timeout is not documented; the wait timeout is used
    return fail(ACL_ERROR_RT_WAIT_TIMEOUT, "aclrtDeviceTaskAbort: a task on device %d still ran after %u ms", deviceId,
                timeout);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetLastError(aclrtLastErrLevel level) try {
  if (level != ACL_RT_THREAD_LEVEL) return ACL_ERROR_INVALID_PARAM;
  return last_error(true);
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtPeekAtLastError(aclrtLastErrLevel level) try {
  if (level != ACL_RT_THREAD_LEVEL) return ACL_ERROR_INVALID_PARAM;
  return last_error(false);
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

}  // extern "C"
