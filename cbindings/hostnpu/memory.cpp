// Host NPU: device and pinned host memory, checked copies and memsets.
// Every allocation is registered, so a copy can prove that each pointer is what its kind says it is.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>

#include "runtime.h"

namespace hostnpu {

namespace {
constexpr size_t kAlign = 64;

// CANN 8.5 (GetAlignedAndPaddingSize): ALIGN_UP(size, 32) + 32; the HUGE1G_ONLY policies skip the +32.
size_t charge_for(size_t size, bool pad) { return (size + 31) / 32 * 32 + (pad ? 32 : 0); }

void *aligned_block(size_t size) {
  size_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  return std::aligned_alloc(kAlign, rounded);
}

const char *kind_name(aclrtMemcpyKind k) {
  switch (k) {
    case ACL_MEMCPY_HOST_TO_HOST: return "ACL_MEMCPY_HOST_TO_HOST";
    case ACL_MEMCPY_HOST_TO_DEVICE: return "ACL_MEMCPY_HOST_TO_DEVICE";
    case ACL_MEMCPY_DEVICE_TO_HOST: return "ACL_MEMCPY_DEVICE_TO_HOST";
    case ACL_MEMCPY_DEVICE_TO_DEVICE: return "ACL_MEMCPY_DEVICE_TO_DEVICE";
    case ACL_MEMCPY_DEFAULT: return "ACL_MEMCPY_DEFAULT";
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: return "ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE";
    case ACL_MEMCPY_INNER_DEVICE_TO_DEVICE: return "ACL_MEMCPY_INNER_DEVICE_TO_DEVICE";
    case ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: return "ACL_MEMCPY_INTER_DEVICE_TO_DEVICE";
  }
  return "unknown";
}

AllocationPtr lookup(std::map<uintptr_t, AllocationPtr> &m, uintptr_t p) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return nullptr;
  --it;
  const AllocationPtr &a = it->second;
  return p < a->base + (a->size ? a->size : 1) ? a : nullptr;
}

// Pinned host memory (aclrtMallocHost) is mapped for itself, so that a freed range stays known: aclrtFreeHost keeps
// the range reserved (its pages released) in a quarantine of the last kQuarantine frees, where a copy from or into it
// is refused instead of reading or writing memory someone else got since. Caller holds rt().mem_mu.
struct FreedHost {
  size_t size;
  std::weak_ptr<Allocation> alloc;  // a queued copy may still hold it: unmapped only after that
};
constexpr size_t kQuarantine = 1024;
std::map<uintptr_t, FreedHost> &freed_host() {
  static auto *m = new std::map<uintptr_t, FreedHost>;
  return *m;
}
std::deque<uintptr_t> &freed_order() {
  static auto *q = new std::deque<uintptr_t>;
  return *q;
}

size_t mapped_size(size_t size) {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (size + page - 1) / page * page;
}

// Caller holds rt().mem_mu: the freed allocation ``a`` joins the quarantine; the oldest entries beyond kQuarantine
// whose memory no queued copy holds any more are unmapped (their addresses may be reused from then on).
void quarantine(const AllocationPtr &a) {
  if (a.use_count() == 1) ::madvise(reinterpret_cast<void *>(a->base), mapped_size(a->size), MADV_DONTNEED);
  freed_host()[a->base] = FreedHost{a->size, a};
  freed_order().push_back(a->base);
  while (freed_order().size() > kQuarantine) {
    auto it = freed_host().find(freed_order().front());
    if (it != freed_host().end()) {
      if (!it->second.alloc.expired()) break;
      ::munmap(reinterpret_cast<void *>(it->first), mapped_size(it->second.size));
      freed_host().erase(it);
    }
    freed_order().pop_front();
  }
}

// The first registered range of ``m`` that starts in (v, end), else m.end().
template <class Map>
typename Map::const_iterator starts_within(const Map &m, uintptr_t v, uintptr_t end) {
  auto it = m.upper_bound(v);
  return it != m.end() && it->first < end ? it : m.end();
}

// Caller holds rt().mem_mu. The host side [p, p + n) of a copy, against the ranges the host NPU knows: inside an
// aclrtMallocHost allocation it must end within it; it may not lie in a freed one (the quarantine) nor run into an
// allocation (pinned, freed or device) from outside. Other host memory is pageable: the caller's to get right, as on
// CANN, which cannot check it either. ACL_ERROR_INVALID_PARAM (CANN's parameter error) when refused.
aclError check_host_range(const char *api, const char *what, const void *p, size_t n) {
  auto &r = rt();
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (AllocationPtr a = lookup(r.host_mem, v)) {
    size_t left = a->size - (v - a->base);
    if (n <= left) return ACL_SUCCESS;
    return fail(ACL_ERROR_INVALID_PARAM,
                "%s: %s %p + %zu bytes runs %zu bytes past the end of the %zu-byte aclrtMallocHost allocation at %p",
                api, what, p, n, n - left, a->size, reinterpret_cast<void *>(a->base));
  }
  auto &freed = freed_host();
  auto f = freed.upper_bound(v);
  if (f != freed.begin() && v < std::prev(f)->first + std::max<size_t>(std::prev(f)->second.size, 1)) {
    --f;
    return fail(ACL_ERROR_INVALID_PARAM, "%s: %s %p is in the %zu-byte aclrtMallocHost allocation at %p, which "
                "aclrtFreeHost freed", api, what, p, f->second.size, reinterpret_cast<void *>(f->first));
  }
  uintptr_t end = n > UINTPTR_MAX - v ? UINTPTR_MAX : v + n;
  const char *into = nullptr;
  uintptr_t base = 0;
  auto h = starts_within(r.host_mem, v, end);
  auto d = starts_within(r.device_mem, v, end);
  auto q = starts_within(freed, v, end);
  if (h != r.host_mem.end()) into = "the aclrtMallocHost allocation", base = h->first;
  else if (d != r.device_mem.end()) into = "the device allocation", base = d->first;
  else if (q != freed.end()) into = "the freed aclrtMallocHost allocation", base = q->first;
  if (!into) return ACL_SUCCESS;
  return fail(ACL_ERROR_INVALID_PARAM, "%s: host %s %p + %zu bytes runs into %s at %p (%zu bytes in): a host range "
              "must lie within one buffer", api, what, p, n, into, reinterpret_cast<void *>(base),
              static_cast<size_t>(base - v));
}

// A checked copy: the allocations it touches are held until it ran.
struct CopyPlan {
  AllocationPtr dst_alloc, src_alloc;
  // The aclrtMallocHost allocation of an H2D source or D2H destination. CANN frees pinned memory at once, even with
  // a copy queued (user error: cann-runtime-rules.md 1); the host NPU keeps it until the copy ran instead, so that
  // the copy never writes into (or reads from) memory a later allocation got.
  AllocationPtr host_alloc;
  int counter = 0;  // index into Counters::bytes
  bool noop = false;  // dst == src: CANN returns success and copies nothing
  bool pageable = false;  // H2D or D2H whose host side is not aclrtMallocHost memory
};

// Explains why [p, p+n) is not device memory; returns the error code.
aclError not_device(const char *api, const char *what, const void *p, size_t n) {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mem_mu);
  if (AllocationPtr a = lookup(r.device_mem, reinterpret_cast<uintptr_t>(p))) {
    size_t left = a->size - (reinterpret_cast<uintptr_t>(p) - a->base);  // lookup found p inside: no wrap
    return fail(ACL_ERROR_RT_PARAM_INVALID,
                "%s: %s %p + %zu bytes runs %zu bytes past the end of the %zu-byte device allocation at %p", api, what,
                p, n, n - left, a->size, reinterpret_cast<void *>(a->base));
  }
  return fail(ACL_ERROR_RT_PARAM_INVALID,
              "%s: %s %p is not device memory (freed, never allocated by aclrtMalloc, or a host pointer)", api, what,
              p);
}

bool is_device(const void *p) {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mem_mu);
  return lookup(r.device_mem, reinterpret_cast<uintptr_t>(p)) != nullptr;
}

// The kinds aclrtMemcpyAsync accepts (CANN 8.5 runtime, api_error.cc MemcpyAsync).
bool async_kind(aclrtMemcpyKind k) {
  return k == ACL_MEMCPY_HOST_TO_HOST || k == ACL_MEMCPY_HOST_TO_DEVICE || k == ACL_MEMCPY_DEVICE_TO_HOST ||
         k == ACL_MEMCPY_DEVICE_TO_DEVICE || k == ACL_MEMCPY_DEFAULT || k == ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE;
}

// Checks a copy in CANN 8.5's order (shared/docs/cann-runtime-rules.md section 1): null pointers and (async) the
// kind: 100000; count 0 or above destMax: 107000; async host-to-host: 207000 at the call; async dst == src: nothing
// to do (plan.noop). Then what the host NPU can prove beyond CANN: each pointer is what the kind says.
aclError plan_copy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind, const char *api,
                   bool async, CopyPlan &plan) {
  if (!dst || !src) return fail(ACL_ERROR_INVALID_PARAM, "%s: %s is null", api, dst ? "src" : "dst");
  if (async && !async_kind(kind))
    return fail(ACL_ERROR_INVALID_PARAM, "%s: %d is not an aclrtMemcpyKind it accepts", api, static_cast<int>(kind));
  if (count == 0) return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count must be greater than 0", api);
  if (count > destMax)
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count %zu is larger than destMax %zu", api, count, destMax);
  if (kind == ACL_MEMCPY_DEFAULT) {
    bool d = is_device(dst), s = is_device(src);
    kind = d ? (s ? ACL_MEMCPY_DEVICE_TO_DEVICE : ACL_MEMCPY_HOST_TO_DEVICE)
             : (s ? ACL_MEMCPY_DEVICE_TO_HOST : ACL_MEMCPY_HOST_TO_HOST);
  }
  if (async && kind == ACL_MEMCPY_HOST_TO_HOST)
    return fail(ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "%s: ACL_MEMCPY_HOST_TO_HOST is not supported asynchronously; "
                "use aclrtMemcpy (or memcpy) for host-to-host copies", api);
  if (async && dst == src) {
    plan.noop = true;
    return ACL_SUCCESS;
  }
  bool dst_dev, src_dev;
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST: dst_dev = false; src_dev = false; plan.counter = 0; break;
    case ACL_MEMCPY_HOST_TO_DEVICE:
    case ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE: dst_dev = true; src_dev = false; plan.counter = 1; break;
    case ACL_MEMCPY_DEVICE_TO_HOST: dst_dev = false; src_dev = true; plan.counter = 2; break;
    case ACL_MEMCPY_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INNER_DEVICE_TO_DEVICE:
    case ACL_MEMCPY_INTER_DEVICE_TO_DEVICE: dst_dev = true; src_dev = true; plan.counter = 3; break;
    default: return fail(ACL_ERROR_INVALID_PARAM, "%s: %d is not an aclrtMemcpyKind", api, static_cast<int>(kind));
  }
  auto &r = rt();
  std::unique_lock<std::mutex> lk(r.mem_mu);
  if (dst_dev) {
    plan.dst_alloc = find_allocation(dst, count, false);
  } else if (lookup(r.device_mem, reinterpret_cast<uintptr_t>(dst))) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: dst %p is device memory, but %s needs a host destination", api, dst,
                kind_name(kind));
  }
  if (src_dev) {
    plan.src_alloc = find_allocation(src, count, false);
  } else if (lookup(r.device_mem, reinterpret_cast<uintptr_t>(src))) {
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: src %p is device memory, but %s needs a host source", api, src,
                kind_name(kind));
  }
  // the device side first: a device range that is not one allocation is CANN's 107000, whatever the host side is
  if ((dst_dev && !plan.dst_alloc) || (src_dev && !plan.src_alloc)) {
    lk.unlock();
    return dst_dev && !plan.dst_alloc ? not_device(api, "dst", dst, count) : not_device(api, "src", src, count);
  }
  if (!dst_dev)
    if (aclError e = check_host_range(api, "dst", dst, count)) return e;
  if (!src_dev)
    if (aclError e = check_host_range(api, "src", src, count)) return e;
  // H2D / D2H from or to memory aclrtMallocHost did not give (HOST_TO_BUF_TO_DEVICE stages pageable memory itself)
  if (kind == ACL_MEMCPY_HOST_TO_DEVICE) plan.host_alloc = find_allocation(src, count, true);
  if (kind == ACL_MEMCPY_DEVICE_TO_HOST) plan.host_alloc = find_allocation(dst, count, true);
  plan.pageable = (kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_HOST) && !plan.host_alloc;
  lk.unlock();
  if (dst_dev && !plan.dst_alloc) return not_device(api, "dst", dst, count);
  if (src_dev && !plan.src_alloc) return not_device(api, "src", src, count);
  return ACL_SUCCESS;
}

void do_copy(void *dst, const void *src, size_t count, int counter) {
  if (count) std::memmove(dst, src, count);
  counters().bytes[counter].fetch_add(count, std::memory_order_relaxed);
}

// CANN 8.5: a null devPtr gives 100000; count 0, or count above maxCount, gives 107000.
aclError check_memset(void *devPtr, size_t maxCount, size_t count, const char *api, AllocationPtr &alloc) {
  if (!devPtr) return fail(ACL_ERROR_INVALID_PARAM, "%s: devPtr is null", api);
  if (count == 0) return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count must be greater than 0", api);
  if (count > maxCount)
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: count %zu is larger than maxCount %zu", api, count, maxCount);
  {
    std::lock_guard<std::mutex> lk(rt().mem_mu);
    alloc = find_allocation(devPtr, count, false);
  }
  if (!alloc) return not_device(api, "devPtr", devPtr, count);
  return ACL_SUCCESS;
}

}  // namespace

Allocation::~Allocation() {
  if (host) return;  // its own mapping: unmapped by the quarantine of aclrtFreeHost (quarantine)
  std::free(reinterpret_cast<void *>(base));
  {
    if (Device *d = find_device(device)) d->in_use.fetch_sub(charged);
    counters().mem_in_use.fetch_sub(charged);
  }
}

// Caller holds rt().mem_mu.
AllocationPtr find_allocation(const void *p, size_t n, bool host) {
  auto &m = host ? rt().host_mem : rt().device_mem;
  uintptr_t v = reinterpret_cast<uintptr_t>(p);
  AllocationPtr a = lookup(m, v);
  if (!a) return nullptr;
  // [v, v + n) within [base, base + size), without computing v + n (a count near 2^64 wraps it past the check)
  if (n > a->size || v - a->base > a->size - n) return nullptr;
  return a;
}

AllocationPtr find_exact(const void *p, bool host) {
  auto &m = host ? rt().host_mem : rt().device_mem;
  auto it = m.find(reinterpret_cast<uintptr_t>(p));
  return it == m.end() ? nullptr : it->second;
}

aclError device_alloc(int32_t dev, size_t size, void **out, const char *api) {
  return device_alloc_charged(dev, size, true, out, api);
}

aclError device_alloc_charged(int32_t dev, size_t size, bool pad, void **out, const char *api) {
  Device *d = find_device(dev);
  if (!d) return fail(ACL_ERROR_RT_INVALID_DEVICEID, "%s: device %d does not exist", api, dev);
  Fault f = draw_fault(FaultSite::Alloc, dev);
  if (f.code) return fail(f.code, "%s: device %d: %s", api, dev, f.what.c_str());
  size_t charged = charge_for(size, pad);
  uint64_t used = d->in_use.load();
  do {
    if (used + charged > d->capacity || charged < size)
      return fail(ACL_ERROR_RT_MEMORY_ALLOCATION,
                  "%s: device %d is out of memory: %zu bytes requested, %llu of %llu bytes in use", api, dev, size,
                  static_cast<unsigned long long>(used), static_cast<unsigned long long>(d->capacity));
  } while (!d->in_use.compare_exchange_weak(used, used + charged));
  void *p = aligned_block(size);
  if (!p) {
    d->in_use.fetch_sub(charged);
    return fail(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: the host could not back %zu bytes of device %d", api, size, dev);
  }
  auto a = std::make_shared<Allocation>();
  a->base = reinterpret_cast<uintptr_t>(p);
  a->size = size;
  a->charged = charged;
  a->device = dev;
  auto &c = counters();
  uint64_t now = c.mem_in_use.fetch_add(charged) + charged;
  uint64_t peak = c.mem_peak.load();
  while (now > peak && !c.mem_peak.compare_exchange_weak(peak, now)) {
  }
  {
    std::lock_guard<std::mutex> lk(rt().mem_mu);
    rt().device_mem[a->base] = a;
  }
  *out = p;
  return ACL_SUCCESS;
}

}  // namespace hostnpu

using namespace hostnpu;

extern "C" {

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) try {
  if (!devPtr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: devPtr is null");
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: size must be greater than 0");
  unsigned base_policy = static_cast<unsigned>(policy) & 0xFF;
  unsigned extra = static_cast<unsigned>(policy) & ~0xFFu;
  if (base_policy > ACL_MEM_MALLOC_HUGE1G_ONLY_P2P ||
      (extra & ~(unsigned)(ACL_MEM_TYPE_LOW_BAND_WIDTH | ACL_MEM_TYPE_HIGH_BAND_WIDTH |
                           ACL_MEM_ACCESS_USER_SPACE_READONLY)))
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: policy 0x%x is not an aclrtMemMallocPolicy",
                static_cast<unsigned>(policy));
  int32_t dev;
  if (aclError e = current_device(&dev, "aclrtMalloc")) return e;
  bool huge1g = base_policy == ACL_MEM_MALLOC_HUGE1G_ONLY || base_policy == ACL_MEM_MALLOC_HUGE1G_ONLY_P2P;
  return device_alloc_charged(dev, size, !huge1g, devPtr, "aclrtMalloc");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtFree(void *devPtr) try {
  if (!devPtr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtFree: devPtr is null");
  if (aclError e = check_init("aclrtFree")) return e;
  AllocationPtr a;
  {
    std::lock_guard<std::mutex> lk(rt().mem_mu);
    auto it = rt().device_mem.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it != rt().device_mem.end()) {
      a = std::move(it->second);
      rt().device_mem.erase(it);
      rt().device_frees.fetch_add(1, std::memory_order_release);
    }
  }
  if (!a)
    return fail(ACL_ERROR_RT_MEMORY_FREE,
                "aclrtFree: %p is not the start of a live device allocation (double free, or not from aclrtMalloc)",
                devPtr);
  // Queued tasks that use the allocation keep it alive until they ran; it is released after that.
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtMallocHost(void **hostPtr, size_t size) try {
  if (!hostPtr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: hostPtr is null");
  if (size == 0) return fail(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost: size must be greater than 0");
  if (aclError e = check_init("aclrtMallocHost")) return e;
  void *p = size > SIZE_MAX / 2 ? MAP_FAILED
                                 : ::mmap(nullptr, mapped_size(size), PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return fail(ACL_ERROR_BAD_ALLOC, "aclrtMallocHost: cannot allocate %zu bytes of host memory", size);
  auto a = std::make_shared<Allocation>();
  a->base = reinterpret_cast<uintptr_t>(p);
  a->size = size;
  a->host = true;
  {
    std::lock_guard<std::mutex> lk(rt().mem_mu);
    rt().host_mem[a->base] = a;
  }
  *hostPtr = p;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtFreeHost(void *hostPtr) try {
  if (!hostPtr) return fail(ACL_ERROR_INVALID_PARAM, "aclrtFreeHost: hostPtr is null");
  AllocationPtr a;
  {
    std::lock_guard<std::mutex> lk(rt().mem_mu);
    auto it = rt().host_mem.find(reinterpret_cast<uintptr_t>(hostPtr));
    if (it != rt().host_mem.end()) {
      a = std::move(it->second);
      rt().host_mem.erase(it);
      quarantine(a);
    }
  }
  if (!a)
    return fail(ACL_ERROR_RT_MEMORY_FREE,
                "aclrtFreeHost: %p is not the start of a live aclrtMallocHost allocation (double free?)", hostPtr);
  // A queued copy into or out of it holds it (CopyPlan::host_alloc): the memory is released after that copy ran.
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) try {
  int32_t dev;
  if (aclError e = current_device(&dev, "aclrtMemcpy")) return e;
  CopyPlan plan;
  if (aclError e = plan_copy(dst, destMax, src, count, kind, "aclrtMemcpy", false, plan)) return e;
  std::string why;
  if (aclError e = find_device(dev)->launch_error(why)) return fail(e, "aclrtMemcpy: %s", why.c_str());
  Fault f = draw_fault(FaultSite::Copy, dev);
  if (f.code) return fail(f.code, "aclrtMemcpy: %s", f.what.c_str());
  do_copy(dst, src, count, plan.counter);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream) try {
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemcpyAsync: stream %p is not a live stream", stream);
  CopyPlan plan;
  if (aclError e = plan_copy(dst, destMax, src, count, kind, "aclrtMemcpyAsync", true, plan)) return e;
  if (plan.noop) return ACL_SUCCESS;
  Task t{[dst, src, count, plan](std::string &) {
    do_copy(dst, src, count, plan.counter);
    return ACL_SUCCESS;
  }};
  t.fault = draw_fault(FaultSite::Copy, s->device());
  if (!plan.pageable) return s->launch(std::move(t), "aclrtMemcpyAsync");
  // CANN 8.5 (MemcpyAsyncCheckLocation): with pageable host memory the runtime synchronizes the stream, returning an
  // earlier task's error, then copies synchronously: the copy is done (or has failed) when the call returns. Only
  // aclrtMallocHost memory is really enqueued. A thread running the stream inline has run its earlier tasks already
  // (and other threads' tasks wait for it), so it copies at once.
  bool inline_mode = s->inline_here();
  std::string msg;
  if (!inline_mode) {
    if (aclError e = s->synchronize(-1, msg)) return fail(e, "aclrtMemcpyAsync: %s", msg.c_str());
  }
  if (aclError e = s->launch(std::move(t), "aclrtMemcpyAsync")) return e;
  if (!inline_mode) {
    if (aclError e = s->synchronize(-1, msg)) return fail(e, "aclrtMemcpyAsync: %s", msg.c_str());
  }
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) try {
  int32_t dev;
  if (aclError e = current_device(&dev, "aclrtMemset")) return e;
  AllocationPtr a;
  if (aclError e = check_memset(devPtr, maxCount, count, "aclrtMemset", a)) return e;
  std::memset(devPtr, value, count);
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) try {
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtMemsetAsync: stream %p is not a live stream", stream);
  AllocationPtr a;
  if (aclError e = check_memset(devPtr, maxCount, count, "aclrtMemsetAsync", a)) return e;
  return s->launch(Task{[devPtr, value, count, a](std::string &) {
    std::memset(devPtr, value, count);
    return ACL_SUCCESS;
  }}, "aclrtMemsetAsync");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total) try {
  if (!free || !total) return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: free and total must not be null");
  if (static_cast<int>(attr) < 0 || attr > ACL_MEM_P2P_HUGE1G)
    return fail(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: %d is not an aclrtMemAttr", static_cast<int>(attr));
  int32_t dev;
  if (aclError e = current_device(&dev, "aclrtGetMemInfo")) return e;
  Device *d = find_device(dev);
  uint64_t used = d->in_use.load();
  *total = d->capacity;
  *free = used >= d->capacity ? 0 : d->capacity - used;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

}  // extern "C"
