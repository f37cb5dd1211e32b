// Host NPU: internal model of the device runtime shared by the ACL entry points.
// A CPU implementation of the CANN ACL subset gert uses; see shared/docs/design.md.
#pragma once

#include <atomic>
#include <chrono>
#include <algorithm>
#include <condition_variable>
#include <cxxabi.h>
#include <cstdarg>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "acl/acl.h"
#include "host_cores.h"

namespace hostnpu {

// ---- errors -------------------------------------------------------------------------------
// Sets the calling thread's aclGetRecentErrMsg text and returns code.
aclError fail(aclError code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void set_recent_error(aclError code, const std::string &msg);

// ---- counters -----------------------------------------------------------------------------
struct Counters {
  std::atomic<uint64_t> bytes[4]{};  // indexed by aclrtMemcpyKind H2H, H2D, D2H, D2D
  std::atomic<uint64_t> tasks{0};
  std::atomic<uint64_t> mem_in_use{0};
  std::atomic<uint64_t> mem_peak{0};
  std::atomic<uint64_t> streams_alive{0};
  std::atomic<uint64_t> faults[5]{};  // injected faults fired, indexed by FaultKind
  std::atomic<uint64_t> stream_aborts{0};
  std::atomic<uint64_t> device_task_aborts{0};
  std::atomic<uint64_t> inline_tasks{0};  // tasks run on the thread that launched them
};
Counters &counters();
uint32_t spin_micros();
// Whether a graph run launched on an idle stream runs on the launching thread (gertHostSetInlineLaunch).
bool inline_launches();

// Spin (bounded) until pred() holds; returns whether it did. Between short bursts of polling the spinner
// yields its core, so a spinner that shares a core with the thread it waits for does not starve it.
template <class Pred>
bool spin_until(Pred pred, uint32_t micros) {
  if (pred()) return true;
  if (micros == 0) return false;
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int k = 0; k < 16; ++k) {
      if (pred()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::yield();
  }
}

// ---- device memory ------------------------------------------------------------------------
struct Device;

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;      // bytes the caller asked for
  size_t charged = 0;   // bytes charged against the device capacity
  int32_t device = -1;
  bool host = false;    // aclrtMallocHost memory
  ~Allocation();
};
using AllocationPtr = std::shared_ptr<Allocation>;

// Finds the live allocation containing [p, p + n); null if there is none.
AllocationPtr find_allocation(const void *p, size_t n, bool host);
// Finds the live allocation that starts exactly at p.
AllocationPtr find_exact(const void *p, bool host);
// Charges the device for aclrtMalloc(size): ALIGN_UP(size, 32), plus 32 bytes when pad (not the HUGE1G policies).
aclError device_alloc_charged(int32_t dev, size_t size, bool pad, void **out, const char *api);

// ---- events -------------------------------------------------------------------------------
struct Event {
  uint64_t id = 0;
  int32_t device = -1;
  uint32_t flags = 0;
  bool timing = true;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> recorded{0};  // records enqueued; record n is the n-th aclrtRecordEvent
  // Records may complete out of order (an event can be recorded on several streams): every record up to
  // done_upto ran, and so did those in done_above.
  std::atomic<uint64_t> done_upto{0};
  std::map<uint64_t, std::chrono::steady_clock::time_point> done_above;  // under mu
  std::map<uint64_t, std::chrono::steady_clock::time_point> stamps;      // recent completion times, under mu
  void complete(uint64_t seq);
  bool is_done(uint64_t seq);
  // Waits until record number `seq` ran; timeout_ms < 0 waits forever. Returns false on timeout.
  bool wait(uint64_t seq, int64_t timeout_ms);
  // Completion time of record `seq` (which must have run).
  std::chrono::steady_clock::time_point stamp_of(uint64_t seq);
};
using EventPtr = std::shared_ptr<Event>;

// ---- fault injection (faults.cpp) ----------------------------------------------------------
// Kinds as gert.inject_fault names them. Kernel launches can draw execute/sticky/hang, copies memcpy, allocations
// malloc. A fault is drawn when the work is launched, so a launch that draws a hang is never run inline.
enum class FaultKind { Execute = 0, Sticky = 1, Hang = 2, Malloc = 3, Memcpy = 4 };
enum class FaultSite { Kernel, Copy, Alloc };
struct Fault {
  aclError code = ACL_SUCCESS;  // the task fails at execution with this code (stored on its stream)
  bool device_wide = false;     // ... and the device's launches fail from then on (sticky)
  uint32_t hang_ms = 0;         // the task runs only after this long (aclrtStreamAbort ends it)
  std::string what;             // the message the failure carries
};
// Draws the next fault for one launch at `site` on `device` (none: a Fault with code 0 and hang_ms 0).
Fault draw_fault(FaultSite site, int32_t device);
// Parses GERT_HOST_FAULTS once (called by aclInit); returns 0 or fails with a message naming the bad entry.
aclError load_env_faults();

// ---- last error (aclrtGetLastError / aclrtPeekAtLastError) ----------------------------------
aclError last_error(bool clear);

// ---- streams ------------------------------------------------------------------------------
struct Task {
  // Runs on the stream's worker thread; returns ACL_SUCCESS or a code with msg filled.
  std::function<aclError(std::string &msg)> run;
  // Called instead of run when the task does not run (an injected fault, or an abort dropped it): releases what
  // run would have released. Optional.
  std::function<aclError(aclError code, const std::string &msg)> drop;  // returns the code the stream keeps (0: none)
  Fault fault;  // drawn at launch
};

class Stream {
 public:
  Stream(uint64_t id, int32_t device, uint32_t priority, uint32_t flags);
  ~Stream();  // drains and joins
  uint64_t id() const { return id_; }
  int32_t device() const { return device_; }
  // Queues the task (or runs it inline); false, leaving `task` untouched, once the stream was destroyed
  // (drain_and_stop): its worker may have exited, so the task would never run.
  bool enqueue(Task &task);
  // A launch: fails at the call while the device is aborting (107022), the stream is aborting (107023) or the
  // device holds a sticky error (its code), as CANN's submits do; on a destroyed stream with 107000 (the code of
  // every call on a stream handle that is not live); otherwise enqueues. api names the caller. A launch that fails
  // has neither run nor dropped the task: the caller releases what it holds.
  aclError launch(Task task, const char *api);
  // aclrtStreamAbort: drops the queued tasks, ends a hanging one or an event wait, waits for the running one,
  // clears the error. false: the running task outlived timeout_ms (< 0: forever).
  bool abort(int64_t timeout_ms);
  // abort() in two halves, so that aclrtDeviceTaskAbort ends the work of all its streams before it waits for any.
  void begin_abort();
  bool finish_abort(int64_t timeout_ms);
  // A task's wait for an event record (aclrtStreamWaitEvent): ends when the record ran, or when the stream is
  // aborted (false). Runs on the stream's worker.
  bool wait_event(const std::shared_ptr<Event> &ev, uint64_t seq);
  // STOP mode (aclrtSetStreamFailureMode): a task fault makes the device's later launches fail (sticky).
  std::atomic<bool> stop_on_failure{false};
  bool failure_mode_set = false;  // under rt().mu: CANN allows setting it once per stream
  // timeout_ms < 0: forever. Returns ACL_SUCCESS, the first error a task reported, or the timeout code.
  aclError synchronize(int64_t timeout_ms, std::string &msg);
  bool idle() const { return completed_.load(std::memory_order_acquire) >= enqueued_.load(std::memory_order_acquire); }
  void drain_and_stop();
  // Inline mode: once the stream is idle, tasks the claiming thread enqueues run right there, in order, instead of
  // being handed to the worker (which pauses); other threads' tasks queue up and run after end_inline(). For a
  // caller that would only wait for the work anyway (enqueue, then synchronize): no hand-offs at all.
  void begin_inline();
  // begin_inline waiting at most timeout_ms (< 0: forever) for the stream to go idle; false: it did not (not inline).
  bool begin_inline_for(int64_t timeout_ms);
  void end_inline();
  // Inline mode for the calling thread's next launches, only if the stream is idle now (nothing queued or running,
  // no thread inline, not aborting or destroyed): never waits. true: end it with end_inline().
  bool begin_inline_if_idle();
  // Whether the calling thread holds this stream in inline mode (its tasks run as it enqueues them).
  bool inline_here() {
    std::lock_guard<std::mutex> lk(mu_);
    return inline_owner_ == std::this_thread::get_id();
  }
  std::weak_ptr<Stream> self;  // set by its creator: lets a worker that destroys its own stream keep it alive

  // core limits; 0 = unset
  std::atomic<uint32_t> limit[2]{};

 private:
  void worker();
  uint64_t id_;
  int32_t device_;
  uint32_t priority_, flags_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_, abort_cv_;
  std::deque<Task> queue_;
  std::atomic<uint64_t> enqueued_{0}, completed_{0};
  std::atomic<int> waiters_{0};
  bool worker_sleeping_ = false;
  bool stop_ = false;
  std::thread::id inline_owner_{};
  aclError run_task(Task &task);
  bool done_for(uint64_t target) const {  // seq_cst: pairs with waiters_ in the waiter/worker handshake
    return completed_.load(std::memory_order_seq_cst) >= target;
  }
  void notify_waiters();
  std::shared_ptr<Event> waiting_on_;  // under mu_: the event the running task waits for (abort wakes it)
  void record_error(aclError e, const std::string &msg);
  std::atomic<bool> aborting_{false};
  std::atomic<uint64_t> abort_gen_{0};  // bumped by every abort: a hang waiting on it ends
  std::shared_ptr<Stream> keep_until_worker_exits_;
  aclError error_ = ACL_SUCCESS;
  std::string error_msg_;
  std::thread thread_;
};
using StreamPtr = std::shared_ptr<Stream>;

// ---- devices and contexts -----------------------------------------------------------------
struct Device {
  int32_t id = 0;
  uint32_t cube_cores = 1, vector_cores = 1;  // hardware
  uint64_t capacity = 0;
  std::atomic<uint64_t> in_use{0};
  std::atomic<uint32_t> limit[2]{};           // device resource limits, 0 = unset
  // Graph runs computing on the device now. Its cube cores are shared among them, as a device's AI cores are
  // shared by the kernels of its streams: a run gets its stream's limit, at most the device's cores divided by the
  // runs in progress (ComputeShare). Without that, two streams with all the cores each oversubscribe the host: two
  // ONNX Runtime pools of 2 threads on 2 CPUs, whose non-spinning workers wait at every parallel section.
  std::atomic<uint32_t> running_graphs{0};
  // The most runs seen at once lately, and until when (steady_clock ns) that counts: a run that starts alone while
  // other streams were busy a moment ago (they are between requests) takes their share too, not the whole device.
  std::atomic<uint32_t> recent_peak{1};
  std::atomic<int64_t> peak_until_ns{0};
  // The runs of other processes on this device (host_cores.h), looked up on the first run.
  std::atomic<SharedRuns *> shared_runs{nullptr};
  int refs = 0;                               // aclrtSetDevice count minus resets
  uint64_t default_ctx = 0;
  // Device-wide failure (a sticky fault, or a task fault on a STOP-mode stream): every launch fails with it
  // until aclrtDeviceTaskAbort or a reset. 0 = none.
  std::atomic<aclError> sticky{ACL_SUCCESS};
  std::mutex sticky_mu;
  std::string sticky_msg;                     // under sticky_mu
  std::atomic<bool> aborting{false};          // aclrtDeviceTaskAbort is running
  void set_sticky(aclError e, const std::string &msg);
  void clear_sticky();
  // Non-zero (with msg) when a launch on this device must fail at the call.
  aclError launch_error(std::string &msg);
};

struct Context {
  uint64_t id = 0;
  int32_t device = 0;
  bool is_default = false;
};

// Global state. Never destroyed: worker threads may outlive static destruction at exit.
struct Runtime {
  std::mutex mu;
  std::atomic<bool> initialized{false};  // written under mu; read unlocked by check_init
  std::vector<std::unique_ptr<Device>> devices;
  std::unordered_map<uint64_t, Context> contexts;
  std::unordered_map<uint64_t, StreamPtr> streams;
  // Bumped (under mu) whenever a stream leaves `streams`: find_stream's per-thread entry is valid while it holds.
  std::atomic<uint64_t> streams_gone{0};
  std::unordered_map<uint64_t, EventPtr> events;
  uint64_t next_handle = 1;

  std::mutex mem_mu;
  std::map<uintptr_t, AllocationPtr> device_mem;  // by base address
  // Bumped (under mem_mu) whenever an allocation leaves `device_mem` (aclrtFree, a device reset): a check that found
  // device memory live holds while it has not moved (ge_session.cpp CheckedLaunch).
  std::atomic<uint64_t> device_frees{0};
  std::map<uintptr_t, AllocationPtr> host_mem;
};
Runtime &rt();

// Handle <-> id. Handles are never reused, so a stale handle is always detected.
void *to_handle(uint64_t id);
uint64_t from_handle(const void *h);

// Checks ACL is initialized and returns the thread's current context device, or fails.
aclError current_device(int32_t *device, const char *api);
aclError check_init(const char *api);
StreamPtr find_stream(aclrtStream s);
EventPtr find_event(aclrtEvent e);
Device *find_device(int32_t id);  // under rt().mu or with devices fixed after init

// Thread-local resource-limit binding (aclrtUseStreamResInCurrentThread).
extern thread_local uint64_t tls_res_stream;

// What a device owned when its last reference went: taken out of the runtime's tables under rt().mu, in the same
// critical section that dropped the reference, so that a concurrent aclrtSetDevice's new context, streams and
// memory are never mistaken for the old ones. release() then drains the streams and frees the memory without locks.
struct DeviceResources {
  std::vector<StreamPtr> streams;
  std::vector<AllocationPtr> memory;
  void release();
};
// Caller holds rt().mu.
DeviceResources take_device_resources_locked(int32_t device);

// The error an entry point returns for a C++ exception it caught (the exception being handled: call it from a catch
// block): `code`, with the exception's text as the thread's error message. Entry points called from C or Cython
// never let an exception escape (it would std::terminate the process); see HOSTNPU_GUARD.
aclError internal_failure(aclError code, const char *api);
// A thread's forced unwind (pthread_exit, e.g. by Python taking the GIL while it finalizes) passes through every
// catch (...): swallowing it would std::terminate the process. Put it before each catch (...).
#define HOSTNPU_PASS_UNWIND \
  catch (abi::__forced_unwind &) { throw; }
// Ends an entry point's function-try-block: `T f(args) try { ... } HOSTNPU_GUARD(code)`.
#define HOSTNPU_GUARD(code) \
  HOSTNPU_PASS_UNWIND catch (...) { return ::hostnpu::internal_failure(code, __func__); }

uint32_t effective_limit(const Device &d, const Stream *s, int type);

// One graph run's share of its device's cube cores, for as long as it lives: its stream's limit, at most the device's
// cube cores divided by the runs in progress (this one included, and other processes' on the same device: a device
// serves every process that uses it, host_cores.h) or by the most runs seen at once within the last kShareHoldNs,
// at least 1 (Device::running_graphs, Device::shared_runs, Device::recent_peak). alone() tells a run that has the device to
// itself and had it for that long: the host NPU lets its compute threads spin (gert._ort_provider).
class ComputeShare {
 public:
  static constexpr int64_t kShareHoldNs = 50'000'000;  // 50 ms: a few requests' worth of PP-OCR det on 2 cores

  ComputeShare(Device &d, uint32_t limit) : d_(d), shared_(d.shared_runs.load(std::memory_order_acquire)) {
    if (!shared_) {
      shared_ = &::hostnpu::shared_runs(d.id);
      d.shared_runs.store(shared_, std::memory_order_release);
    }
    shared_->enter();
    int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count();
    // This process's runs and the other processes' on the same device: their streams share its cores too.
    uint32_t running = d.running_graphs.fetch_add(1) + 1 + shared_->others(now);
    uint32_t peak = running;
    if (running > 1) {
      uint32_t seen = d.recent_peak.load();
      while (seen < running && !d.recent_peak.compare_exchange_weak(seen, running)) {
      }
      d.peak_until_ns.store(now + kShareHoldNs);
      peak = std::max(running, d.recent_peak.load());
    } else if (now < d.peak_until_ns.load()) {
      peak = d.recent_peak.load();
    } else {
      d.recent_peak.store(1);  // quiet for kShareHoldNs: the device is this run's
    }
    alone_ = peak == 1;
    threads_ = std::max<uint32_t>(1, std::min(limit, d.cube_cores / peak));
    start_ns_ = now;
  }
  ~ComputeShare() {
    d_.running_graphs.fetch_sub(1);
    shared_->leave();
  }
  ComputeShare(const ComputeShare &) = delete;
  ComputeShare &operator=(const ComputeShare &) = delete;
  uint32_t threads() const { return threads_; }
  bool alone() const { return alone_; }
  // When the share was taken (steady clock, ns since its epoch): the start of the run it is for.
  int64_t start_ns() const { return start_ns_; }

 private:
  Device &d_;
  SharedRuns *shared_;
  int64_t start_ns_ = 0;
  uint32_t threads_ = 1;
  bool alone_ = false;
};

}  // namespace hostnpu
