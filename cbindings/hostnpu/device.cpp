// Host NPU: aclInit/aclFinalize, devices, contexts, device info and core (resource) limits.
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "runtime.h"

namespace hostnpu {

namespace {
thread_local uint64_t tls_ctx = 0;  // current context id of this thread

uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = std::getenv(name);
  if (!v || !*v) return dflt;
  char *end = nullptr;
  double x = std::strtod(v, &end);
  uint64_t mul = 1;
  if (end && *end) {
    switch (std::toupper(static_cast<unsigned char>(*end))) {
      case 'K': mul = 1ull << 10; break;
      case 'M': mul = 1ull << 20; break;
      case 'G': mul = 1ull << 30; break;
      case 'T': mul = 1ull << 40; break;
      default: return dflt;
    }
  }
  return x > 0 ? static_cast<uint64_t>(x * static_cast<double>(mul)) : dflt;
}
}  // namespace

thread_local uint64_t tls_res_stream = 0;

Runtime &rt() {
  static Runtime *r = new Runtime();
  return *r;
}

void *to_handle(uint64_t id) { return reinterpret_cast<void *>(static_cast<uintptr_t>(id << 4 | 0x7)); }
uint64_t from_handle(const void *h) {
  auto v = reinterpret_cast<uintptr_t>(h);
  return (v & 0xF) == 0x7 ? static_cast<uint64_t>(v >> 4) : 0;
}

Device *find_device(int32_t id) {
  auto &r = rt();
  if (id < 0 || static_cast<size_t>(id) >= r.devices.size()) return nullptr;
  return r.devices[id].get();
}

aclError check_init(const char *api) {
  if (!rt().initialized) return fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called (or aclFinalize was)", api);
  return ACL_SUCCESS;
}

aclError current_device(int32_t *device, const char *api) {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called (or aclFinalize was)", api);
  auto it = r.contexts.find(tls_ctx);
  if (tls_ctx == 0 || it == r.contexts.end())
    return fail(ACL_ERROR_RT_CONTEXT_NULL,
                "%s: the calling thread has no current context; call aclrtSetDevice or aclrtSetCurrentContext first", api);
  Device *d = find_device(it->second.device);
  if (!d || d->refs <= 0)
    return fail(ACL_ERROR_RT_CONTEXT_NULL, "%s: the current context's device %d was reset", api, it->second.device);
  *device = it->second.device;
  return ACL_SUCCESS;
}

StreamPtr find_stream(aclrtStream s) {
  auto &r = rt();
  const uint64_t id = from_handle(s);
  // A thread's launches, copies and synchronizes name the same stream call after call: each thread remembers the
  // stream it found last (weakly: a destroyed stream is not kept alive), valid while no stream left the table since
  // (handles are never reused). A lookup racing a destroy is ordered before it, as with the lock.
  thread_local uint64_t last_id = 0, last_gone = 0;
  thread_local std::weak_ptr<Stream> last;
  if (id == last_id && r.streams_gone.load(std::memory_order_acquire) == last_gone) {
    if (StreamPtr p = last.lock()) return p;
  }
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.streams.find(id);
  if (it == r.streams.end()) return nullptr;
  last_id = id;
  last_gone = r.streams_gone.load(std::memory_order_relaxed);
  last = it->second;
  return it->second;
}

EventPtr find_event(aclrtEvent e) {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.events.find(from_handle(e));
  return it == r.events.end() ? nullptr : it->second;
}

uint32_t effective_limit(const Device &d, const Stream *s, int type) {
  if (s) {
    uint32_t v = s->limit[type].load();
    if (v) return v;
  }
  uint32_t v = d.limit[type].load();
  if (v) return v;
  return type == ACL_RT_DEV_RES_CUBE_CORE ? d.cube_cores : d.vector_cores;
}

DeviceResources take_device_resources_locked(int32_t device) {
  auto &r = rt();
  DeviceResources out;
  for (auto it = r.streams.begin(); it != r.streams.end();) {
    if (it->second->device() == device) {
      out.streams.push_back(it->second);
      it = r.streams.erase(it);
      r.streams_gone.fetch_add(1, std::memory_order_release);
    } else {
      ++it;
    }
  }
  for (auto it = r.events.begin(); it != r.events.end();) {
    it = it->second->device == device ? r.events.erase(it) : std::next(it);
  }
  for (auto it = r.contexts.begin(); it != r.contexts.end();) {
    it = it->second.device == device ? r.contexts.erase(it) : std::next(it);
  }
  if (Device *d = find_device(device)) {
    d->clear_sticky();  // a reset device starts clean
    d->default_ctx = 0;
    d->limit[0] = 0;
    d->limit[1] = 0;
  }
  std::lock_guard<std::mutex> lk(r.mem_mu);  // lock order: rt().mu, then rt().mem_mu
  for (auto it = r.device_mem.begin(); it != r.device_mem.end();) {
    if (it->second->device == device) {
      out.memory.push_back(std::move(it->second));
      it = r.device_mem.erase(it);
      r.device_frees.fetch_add(1, std::memory_order_release);
    } else {
      ++it;
    }
  }
  return out;
}

void DeviceResources::release() {
  for (auto &s : streams) s->drain_and_stop();  // pending work runs first (it may still use the memory)
  streams.clear();
  memory.clear();  // freed now, or by the last queued task that holds it
}

}  // namespace hostnpu

using namespace hostnpu;

extern "C" {

aclError aclInit(const char *configPath) try {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.initialized) return fail(ACL_ERROR_REPEAT_INITIALIZE, "aclInit: ACL is already initialized");
  if (configPath && *configPath) {
    FILE *f = std::fopen(configPath, "r");
    if (!f) return fail(ACL_ERROR_INVALID_PARAM, "aclInit: cannot open config file '%s'", configPath);
    std::fclose(f);
  }
  if (r.devices.empty()) {
    uint64_t n = env_u64("GERT_HOST_DEVICES", 1);
    unsigned hw = std::thread::hardware_concurrency();
    if (hw == 0) hw = 1;
    uint64_t cube = env_u64("GERT_HOST_CUBE_CORES", hw);
    uint64_t vec = env_u64("GERT_HOST_VECTOR_CORES", hw);
    uint64_t cap = env_u64("GERT_HOST_DEVICE_MEMORY", 8ull << 30);
    for (uint64_t i = 0; i < n && i < 64; ++i) {
      auto d = std::make_unique<Device>();
      d->id = static_cast<int32_t>(i);
      d->cube_cores = static_cast<uint32_t>(cube);
      d->vector_cores = static_cast<uint32_t>(vec);
      d->capacity = cap;
      r.devices.push_back(std::move(d));
    }
  }
  if (aclError e = load_env_faults()) return e;
  r.initialized = true;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclFinalize() try {
  auto &r = rt();
  std::vector<DeviceResources> owned;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    if (!r.initialized) return fail(ACL_ERROR_REPEAT_FINALIZE, "aclFinalize: ACL is not initialized");
    r.initialized = false;
    for (auto &d : r.devices) {
      d->refs = 0;
      owned.push_back(take_device_resources_locked(d->id));
    }
  }
  for (auto &o : owned) o.release();
  tls_ctx = 0;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetDeviceCount(uint32_t *count) try {
  if (!count) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceCount: count is null");
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtGetDeviceCount: aclInit has not been called");
  *count = static_cast<uint32_t>(r.devices.size());
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtSetDevice(int32_t deviceId) try {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtSetDevice: aclInit has not been called");
  Device *d = find_device(deviceId);
  if (!d)
    return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtSetDevice: device id %d is out of range [0, %zu)", deviceId,
                r.devices.size());
  if (d->refs == 0 || d->default_ctx == 0) {
    uint64_t id = r.next_handle++;
    r.contexts[id] = Context{id, deviceId, true};
    d->default_ctx = id;
  }
  d->refs++;
  tls_ctx = d->default_ctx;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

static aclError reset_device(int32_t deviceId, bool force, const char *api) {
  auto &r = rt();
  DeviceResources owned;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    Device *d = find_device(deviceId);
    if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: device id %d is out of range", api, deviceId);
    if (d->refs <= 0) return fail(ACL_ERROR_RT_CONTEXT_NULL, "%s: device %d is not set", api, deviceId);
    d->refs = force ? 0 : d->refs - 1;
    // The last reference: what the device owns leaves the tables now, under the lock that dropped the reference.
    // Taking it after unlocking would also take the context, streams and memory of an aclrtSetDevice that ran
    // in between (another thread's, holding its own reference).
    if (d->refs == 0) owned = take_device_resources_locked(deviceId);
  }
  owned.release();
  return ACL_SUCCESS;
}

aclError aclrtResetDevice(int32_t deviceId) { return reset_device(deviceId, false, "aclrtResetDevice"); }
aclError aclrtResetDeviceForce(int32_t deviceId) { return reset_device(deviceId, true, "aclrtResetDeviceForce"); }

aclError aclrtGetDevice(int32_t *deviceId) try {
  if (!deviceId) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDevice: deviceId is null");
  return current_device(deviceId, "aclrtGetDevice");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetDeviceInfo(uint32_t deviceId, aclrtDevAttr attr, int64_t *value) try {
  if (!value) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceInfo: value is null");
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtGetDeviceInfo: aclInit has not been called");
  Device *d = find_device(static_cast<int32_t>(deviceId));
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtGetDeviceInfo: device id %u is out of range", deviceId);
  switch (attr) {
    case ACL_DEV_ATTR_AICPU_CORE_NUM: *value = std::thread::hardware_concurrency(); break;
    case ACL_DEV_ATTR_AICORE_CORE_NUM:
    case ACL_DEV_ATTR_CUBE_CORE_NUM: *value = d->cube_cores; break;
    case ACL_DEV_ATTR_VECTOR_CORE_NUM: *value = d->vector_cores; break;
    case ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE: *value = static_cast<int64_t>(d->capacity); break;
    case ACL_DEV_ATTR_L2_CACHE_SIZE: *value = 32ll << 20; break;
    default:
      return fail(ACL_ERROR_FEATURE_UNSUPPORTED, "aclrtGetDeviceInfo: attribute %d is not supported by the host NPU",
                  static_cast<int>(attr));
  }
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId) try {
  if (!context) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateContext: context is null");
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtCreateContext: aclInit has not been called");
  Device *d = find_device(deviceId);
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtCreateContext: device id %d is out of range", deviceId);
  uint64_t id = r.next_handle++;
  r.contexts[id] = Context{id, deviceId, false};
  d->refs++;  // an explicit context keeps its device open, as aclrtSetDevice does
  tls_ctx = id;
  *context = to_handle(id);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtDestroyContext(aclrtContext context) try {
  auto &r = rt();
  int32_t dev = -1;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.contexts.find(from_handle(context));
    if (it == r.contexts.end() || it->second.is_default)
      return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyContext: %p is not a context created by aclrtCreateContext",
                  context);
    dev = it->second.device;
    r.contexts.erase(it);
    if (tls_ctx == from_handle(context)) tls_ctx = 0;
  }
  return reset_device(dev, false, "aclrtDestroyContext");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtSetCurrentContext(aclrtContext context) try {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtSetCurrentContext: aclInit has not been called");
  uint64_t id = from_handle(context);
  if (!r.contexts.count(id))
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetCurrentContext: %p is not a live context", context);
  tls_ctx = id;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetCurrentContext(aclrtContext *context) try {
  if (!context) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetCurrentContext: context is null");
  int32_t dev;
  aclError e = current_device(&dev, "aclrtGetCurrentContext");
  if (e) return e;
  *context = to_handle(tls_ctx);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

// ---- resource limits ----------------------------------------------------------------------

static aclError check_type(aclrtDevResLimitType type, const char *api) {
  if (type != ACL_RT_DEV_RES_CUBE_CORE && type != ACL_RT_DEV_RES_VECTOR_CORE)
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: type %d is not an aclrtDevResLimitType", api, static_cast<int>(type));
  return ACL_SUCCESS;
}

static uint32_t hw_cores(const Device &d, int type) {
  return type == ACL_RT_DEV_RES_CUBE_CORE ? d.cube_cores : d.vector_cores;
}

static const char *type_name(int type) { return type == ACL_RT_DEV_RES_CUBE_CORE ? "cube" : "vector"; }

aclError aclrtSetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t value) try {
  if (aclError e = check_type(type, "aclrtSetDeviceResLimit")) return e;
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtSetDeviceResLimit: aclInit has not been called");
  Device *d = find_device(deviceId);
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtSetDeviceResLimit: device id %d is out of range", deviceId);
  if (value == 0 || value > hw_cores(*d, type))
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetDeviceResLimit: %s core limit %u is out of range [1, %u] for device %d",
                type_name(type), value, hw_cores(*d, type), deviceId);
  d->limit[type] = value;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetDeviceResLimit(int32_t deviceId, aclrtDevResLimitType type, uint32_t *value) try {
  if (aclError e = check_type(type, "aclrtGetDeviceResLimit")) return e;
  if (!value) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetDeviceResLimit: value is null");
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtGetDeviceResLimit: aclInit has not been called");
  Device *d = find_device(deviceId);
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtGetDeviceResLimit: device id %d is out of range", deviceId);
  *value = effective_limit(*d, nullptr, type);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtResetDeviceResLimit(int32_t deviceId) try {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  if (!r.initialized) return fail(ACL_ERROR_UNINITIALIZE, "aclrtResetDeviceResLimit: aclInit has not been called");
  Device *d = find_device(deviceId);
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtResetDeviceResLimit: device id %d is out of range", deviceId);
  d->limit[0] = 0;
  d->limit[1] = 0;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtSetStreamResLimit(aclrtStream stream, aclrtDevResLimitType type, uint32_t value) try {
  if (aclError e = check_type(type, "aclrtSetStreamResLimit")) return e;
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetStreamResLimit: %p is not a live stream", stream);
  Device *d = find_device(s->device());
  if (value == 0 || value > hw_cores(*d, type))
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtSetStreamResLimit: %s core limit %u is out of range [1, %u] for device %d",
                type_name(type), value, hw_cores(*d, type), s->device());
  s->limit[type] = value;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetStreamResLimit(aclrtStream stream, aclrtDevResLimitType type, uint32_t *value) try {
  if (aclError e = check_type(type, "aclrtGetStreamResLimit")) return e;
  if (!value) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetStreamResLimit: value is null");
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtGetStreamResLimit: %p is not a live stream", stream);
  *value = effective_limit(*find_device(s->device()), s.get(), type);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtResetStreamResLimit(aclrtStream stream) try {
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtResetStreamResLimit: %p is not a live stream", stream);
  s->limit[0] = 0;
  s->limit[1] = 0;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtUseStreamResInCurrentThread(aclrtStream stream) try {
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtUseStreamResInCurrentThread: %p is not a live stream", stream);
  tls_res_stream = s->id();
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtUnuseStreamResInCurrentThread(aclrtStream stream) try {
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtUnuseStreamResInCurrentThread: %p is not a live stream", stream);
  if (tls_res_stream != s->id())
    return fail(ACL_ERROR_RT_PARAM_INVALID,
                "aclrtUnuseStreamResInCurrentThread: the calling thread does not use the resources of stream %p", stream);
  tls_res_stream = 0;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetResInCurrentThread(aclrtDevResLimitType type, uint32_t *value) try {
  if (aclError e = check_type(type, "aclrtGetResInCurrentThread")) return e;
  if (!value) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetResInCurrentThread: value is null");
  if (tls_res_stream) {
    StreamPtr s = find_stream(to_handle(tls_res_stream));
    if (s) {
      *value = effective_limit(*find_device(s->device()), s.get(), type);
      return ACL_SUCCESS;
    }
    tls_res_stream = 0;  // the stream was destroyed
  }
  int32_t dev;
  if (aclError e = current_device(&dev, "aclrtGetResInCurrentThread")) return e;
  *value = effective_limit(*find_device(dev), nullptr, type);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

}  // extern "C"
