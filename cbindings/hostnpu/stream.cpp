// Host NPU: streams (in-order task queues, each run by its own worker thread), events and host functions.
// Hand-offs spin briefly before they block: a futex wake costs 20-40 us on these machines (design.md, "Hot path").
#include "gert_host/host_npu.h"
#include "runtime.h"

namespace hostnpu {

Stream::Stream(uint64_t id, int32_t device, uint32_t priority, uint32_t flags)
    : id_(id), device_(device), priority_(priority), flags_(flags) {
  counters().streams_alive.fetch_add(1);
  thread_ = std::thread([this] { worker(); });
}

Stream::~Stream() {
  drain_and_stop();
  counters().streams_alive.fetch_sub(1);
}

void Stream::drain_and_stop() {
  bool own_thread = thread_.joinable() && thread_.get_id() == std::this_thread::get_id();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    if (own_thread) keep_until_worker_exits_ = self.lock();  // destroyed from its own host function
    work_cv_.notify_all();
    abort_cv_.notify_all();  // a hanging task ends: destroying the stream does not wait for an injected hang
  }
  if (!thread_.joinable()) return;
  if (own_thread) {
    thread_.detach();  // the worker drains the queue, then drops the last reference itself
  } else {
    thread_.join();
  }
}

bool Stream::enqueue(Task &task) {
  bool wake;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stop_) return false;  // destroyed: the worker drains what it has and exits; nothing would run this task
    if (inline_owner_ == std::this_thread::get_id()) {
      if (task.fault.hang_ms == 0 && queue_.empty()) {  // inline mode: run it here, in order
        lk.unlock();
        enqueued_.fetch_add(1, std::memory_order_seq_cst);
        counters().inline_tasks.fetch_add(1, std::memory_order_relaxed);
        run_task(task);
        return true;
      }
      // A task that hangs runs on the worker, as on a device, so that the launching thread can time out: inline
      // mode ends here (later tasks queue behind it).
      inline_owner_ = std::thread::id();
      done_cv_.notify_all();
    }
    queue_.push_back(std::move(task));
    enqueued_.fetch_add(1, std::memory_order_seq_cst);
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return true;
}

aclError Stream::launch(Task task, const char *api) {
  std::string why;
  if (Device *d = find_device(device_)) {
    if (aclError e = d->launch_error(why)) return fail(e, "%s: %s", api, why.c_str());
  }
  if (aborting_.load())
    return fail(ACL_ERROR_RT_STREAM_ABORT, "%s: the stream is being aborted (aclrtStreamAbort)", api);
  if (!enqueue(task))
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: the stream was destroyed (aclrtDestroyStream) during this launch",
                api);
  return ACL_SUCCESS;
}

void Stream::record_error(aclError e, const std::string &msg) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (error_ == ACL_SUCCESS) {
      error_ = e;
      error_msg_ = msg;
    }
  }
  if (stop_on_failure.load()) {  // STOP mode: the context stops taking work (cann-runtime-rules.md, part 2)
    if (Device *d = find_device(device_)) d->set_sticky(e, msg);
  }
}

bool Stream::abort(int64_t timeout_ms) {
  begin_abort();
  return finish_abort(timeout_ms);
}

void Stream::begin_abort() {
  std::deque<Task> dropped;
  EventPtr waited;
  {
    std::lock_guard<std::mutex> lk(mu_);
    aborting_.store(true);
    abort_gen_.fetch_add(1);
    dropped.swap(queue_);
    waited = waiting_on_;
  }
  abort_cv_.notify_all();  // a hanging task ends
  if (waited) {  // a task waiting for an event ends (wait_event checks abort_gen_ under the event's mutex)
    std::lock_guard<std::mutex> lk(waited->mu);
    waited->cv.notify_all();
  }
  for (auto &t : dropped) {
    if (!t.drop) continue;
    try {
      t.drop(ACL_ERROR_RT_STREAM_ABORT, "dropped by aclrtStreamAbort");
    } HOSTNPU_PASS_UNWIND catch (...) {  // a drop only releases what the task held; nothing to report
    }
  }
  size_t n = dropped.size();
  dropped.clear();
  completed_.fetch_add(n, std::memory_order_seq_cst);
  notify_waiters();
}

bool Stream::finish_abort(int64_t timeout_ms) {
  bool ok = true;
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.notify_all();
  uint64_t target = enqueued_.load(std::memory_order_seq_cst);
  auto idle_now = [&] { return done_for(std::max(target, enqueued_.load(std::memory_order_seq_cst))); };
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  if (timeout_ms < 0) {
    done_cv_.wait(lk, idle_now);
  } else {
    ok = done_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), idle_now);
  }
  waiters_.fetch_sub(1);
  error_ = ACL_SUCCESS;  // the stream is normal again and can be reused
  error_msg_.clear();
  aborting_.store(false);
  return ok;
}

bool Stream::wait_event(const EventPtr &ev, uint64_t seq) {
  auto done = [&] { return ev->done_upto.load(std::memory_order_acquire) >= seq || ev->done_above.count(seq) != 0; };
  uint64_t gen = abort_gen_.load(std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (abort_gen_.load() != gen) return false;
    waiting_on_ = ev;
  }
  bool completed;
  {
    std::unique_lock<std::mutex> lk(ev->mu);
    ev->cv.wait(lk, [&] { return done() || abort_gen_.load(std::memory_order_seq_cst) != gen; });
    completed = done();
  }
  std::lock_guard<std::mutex> lk(mu_);
  waiting_on_.reset();
  return completed;
}

void Stream::notify_waiters() {
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    done_cv_.notify_all();
  }
}

void Stream::worker() {
  for (;;) {
    Task task;
    spin_until([this] { return enqueued_.load(std::memory_order_acquire) > completed_.load(std::memory_order_relaxed); },
               spin_micros());
    {
      std::unique_lock<std::mutex> lk(mu_);
      while ((queue_.empty() || inline_owner_ != std::thread::id()) && !stop_) {
        worker_sleeping_ = true;
        work_cv_.wait(lk);
        worker_sleeping_ = false;
      }
      if (queue_.empty()) {  // stopped and drained
        std::shared_ptr<Stream> keep = std::move(keep_until_worker_exits_);
        lk.unlock();
        return;  // `keep` may destroy this stream now; nothing here touches it afterwards
      }
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run_task(task);  // never throws: run_task turns a task's exception into its error
  }
}

aclError Stream::run_task(Task &task) {
  std::string msg;
  aclError e = ACL_SUCCESS;
  bool dropped = aborting_.load();  // queued before an abort that is dropping them now
  const Fault &f = task.fault;
  if (!dropped && f.hang_ms) {  // an injected hang: the task runs late, unless an abort (or destroy) ends it
    uint64_t gen = abort_gen_.load();
    std::unique_lock<std::mutex> lk(mu_);
    auto ended = [&] { return abort_gen_.load() != gen || stop_; };
    if (f.hang_ms == UINT32_MAX) {
      abort_cv_.wait(lk, ended);
      dropped = true;
    } else {
      dropped = abort_cv_.wait_for(lk, std::chrono::milliseconds(f.hang_ms), ended);
    }
  }
  try {
    if (dropped) {
      if (task.drop) task.drop(ACL_ERROR_RT_STREAM_ABORT, "dropped by aclrtStreamAbort");
    } else if (f.code != ACL_SUCCESS) {  // an injected fault: the task does not run, and fails on the device
      msg = f.what;
      e = task.drop ? task.drop(f.code, msg) : f.code;
      if (f.device_wide) {
        if (Device *d = find_device(device_)) d->set_sticky(f.code, msg);
      }
    } else {
      e = task.run(msg);
    }
  } catch (const std::exception &x) {  // e.g. std::bad_alloc: the task fails, the worker lives on
    e = ACL_ERROR_RT_INTERNAL_ERROR;
    msg = std::string("the task failed with a C++ exception: ") + x.what();
  } HOSTNPU_PASS_UNWIND catch (...) {
    e = ACL_ERROR_RT_INTERNAL_ERROR;
    msg = "the task failed with a C++ exception";
  }
  task.run = nullptr;  // release what the task held before it counts as complete
  task.drop = nullptr;
  if (e != ACL_SUCCESS) record_error(e, msg);
  counters().tasks.fetch_add(1, std::memory_order_relaxed);
  completed_.fetch_add(1, std::memory_order_seq_cst);
  notify_waiters();
  return e;
}

void Stream::begin_inline() { begin_inline_for(-1); }

bool Stream::begin_inline_for(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  auto free_now = [&] {
    return inline_owner_ == std::thread::id() && queue_.empty() &&
           done_for(enqueued_.load(std::memory_order_seq_cst));
  };
  bool ok = true;
  if (timeout_ms < 0) {
    done_cv_.wait(lk, free_now);
  } else {
    ok = done_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), free_now);
  }
  waiters_.fetch_sub(1);
  if (ok) inline_owner_ = std::this_thread::get_id();
  return ok;
}

bool Stream::begin_inline_if_idle() {
  std::lock_guard<std::mutex> lk(mu_);
  if (stop_ || aborting_.load() || inline_owner_ != std::thread::id() || !queue_.empty() ||
      !done_for(enqueued_.load(std::memory_order_seq_cst)))
    return false;
  inline_owner_ = std::this_thread::get_id();
  return true;
}

void Stream::end_inline() {
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inline_owner_ = std::thread::id();
    wake = !queue_.empty();
    done_cv_.notify_all();  // another thread may wait to go inline
  }
  if (wake) work_cv_.notify_all();
}

aclError Stream::synchronize(int64_t timeout_ms, std::string &msg) {
  uint64_t gen = abort_gen_.load();
  uint64_t target = enqueued_.load(std::memory_order_seq_cst);
  // seq_cst on both sides: this thread publishes waiters_ then reads completed_; the worker publishes completed_
  // then reads waiters_. With weaker orders both could read the old value (a lost wakeup on ARM hosts).
  auto done = [&] { return done_for(target); };
  if (!spin_until(done, spin_micros())) {
    std::unique_lock<std::mutex> lk(mu_);
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    bool ok = true;
    if (timeout_ms < 0) {
      done_cv_.wait(lk, done);
    } else {
      ok = done_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), done);
    }
    waiters_.fetch_sub(1);
    if (!ok) {
      msg = "synchronize timed out after " + std::to_string(timeout_ms) + " ms with " +
            std::to_string(target - completed_.load()) + " task(s) still pending";
      return ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (aborting_.load() || abort_gen_.load() != gen) {  // a sync made during an abort
    msg = "the stream was aborted (aclrtStreamAbort) while this synchronize waited";
    return ACL_ERROR_RT_STREAM_ABORT;
  }
  aclError e = error_;
  if (e != ACL_SUCCESS) {
    msg = error_msg_;
    error_ = ACL_SUCCESS;
    error_msg_.clear();
  }
  return e;
}

void Event::complete(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lk(mu);
    auto now = std::chrono::steady_clock::now();
    stamps[seq] = now;
    while (stamps.size() > 64) stamps.erase(stamps.begin());
    uint64_t upto = done_upto.load();
    if (seq == upto + 1) {
      ++upto;
      for (auto it = done_above.begin(); it != done_above.end() && it->first == upto + 1; it = done_above.erase(it)) {
        ++upto;
      }
      done_upto.store(upto, std::memory_order_release);
    } else if (seq > upto) {
      done_above[seq] = now;
    }
  }
  cv.notify_all();
}

bool Event::is_done(uint64_t seq) {
  if (done_upto.load(std::memory_order_acquire) >= seq) return true;
  std::lock_guard<std::mutex> lk(mu);
  return done_above.count(seq) != 0;
}

bool Event::wait(uint64_t seq, int64_t timeout_ms) {
  if (seq == 0) return true;
  auto fast = [&] { return done_upto.load(std::memory_order_acquire) >= seq; };
  if (spin_until(fast, spin_micros())) return true;
  std::unique_lock<std::mutex> lk(mu);
  auto done = [&] { return done_upto.load(std::memory_order_acquire) >= seq || done_above.count(seq) != 0; };
  if (timeout_ms < 0) {
    cv.wait(lk, done);
    return true;
  }
  return cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), done);
}

std::chrono::steady_clock::time_point Event::stamp_of(uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu);
  auto it = stamps.find(seq);
  return it == stamps.end() ? std::chrono::steady_clock::time_point{} : it->second;
}

}  // namespace hostnpu

using namespace hostnpu;

namespace {

// CANN 8.5: -1 waits forever, > 0 is milliseconds; 0 or < -1 gives 107000.
aclError timeout_arg(int32_t timeout, const char *api, int64_t *ms) {
  if (timeout == 0 || timeout < -1)
    return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: timeout %d must be -1 (forever) or > 0 ms", api, timeout);
  *ms = timeout;
  return ACL_SUCCESS;
}

aclError sync_stream(aclrtStream stream, int64_t ms, const char *api) {
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a live stream (destroyed or never created)", api, stream);
  std::string msg;
  aclError e = s->synchronize(ms, msg);
  if (e != ACL_SUCCESS) return fail(e, "%s: %s", api, msg.c_str());
  if (Device *d = find_device(s->device())) {  // STOP mode / device-wide: syncs of non-default streams fail too
    if (aclError sticky = d->launch_error(msg)) return fail(sticky, "%s: %s", api, msg.c_str());
  }
  return ACL_SUCCESS;
}

aclError create_stream(aclrtStream *stream, uint32_t priority, uint32_t flag, const char *api) {
  if (!stream) return fail(ACL_ERROR_INVALID_PARAM, "%s: stream is null", api);
  if (priority > 7) return fail(ACL_ERROR_INVALID_PARAM, "%s: priority %u is out of range [0, 7]", api, priority);
  int32_t dev;
  if (aclError e = current_device(&dev, api)) return e;
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  uint64_t id = r.next_handle++;
  StreamPtr s;
  try {  // its worker thread: std::thread throws std::system_error when the host has no thread (or memory) left
    s = std::make_shared<Stream>(id, dev, priority, flag);
  } catch (const std::exception &x) {
    return fail(ACL_ERROR_RT_NO_STREAM_RESOURCE, "%s: cannot create the stream's worker thread: %s", api, x.what());
  }
  s->self = s;
  r.streams[id] = s;
  *stream = to_handle(id);
  return ACL_SUCCESS;
}

aclError destroy_stream(aclrtStream stream, const char *api) {
  StreamPtr s;
  {
    auto &r = rt();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.streams.find(from_handle(stream));
    if (it == r.streams.end())
      return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a live stream (already destroyed?)", api, stream);
    s = std::move(it->second);
    r.streams.erase(it);
    r.streams_gone.fetch_add(1, std::memory_order_release);
  }
  if (tls_res_stream == s->id()) tls_res_stream = 0;
  s->drain_and_stop();  // pending work runs first, as in CANN
  return ACL_SUCCESS;
}

aclError create_event(aclrtEvent *event, uint32_t flag, bool timing, const char *api) {
  if (!event) return fail(ACL_ERROR_INVALID_PARAM, "%s: event is null", api);
  int32_t dev;
  if (aclError e = current_device(&dev, api)) return e;
  auto ev = std::make_shared<Event>();
  ev->device = dev;
  ev->flags = flag;
  ev->timing = timing;
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  ev->id = r.next_handle++;
  r.events[ev->id] = ev;
  *event = to_handle(ev->id);
  return ACL_SUCCESS;
}

}  // namespace

extern "C" {

int gertHostStreamBeginInline(aclrtStream stream) { return gertHostStreamBeginInlineFor(stream, -1); }

int gertHostStreamBeginInlineFor(aclrtStream stream, int32_t timeout_ms) try {
  StreamPtr s = find_stream(stream);
  if (!s) return -1;
  return s->begin_inline_for(timeout_ms) ? 0 : 1;
} HOSTNPU_PASS_UNWIND catch (...) {
  return -1;
}

int gertHostLaunchHostFuncEx(aclrtStream stream, aclrtHostFunc fn, void (*drop)(void *args), void *args) try {
  if (!fn) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: fn is null");
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtLaunchHostFunc: %p is not a live stream", stream);
  Task t{[fn, args](std::string &) {
    fn(args);
    return ACL_SUCCESS;
  }};
  if (drop) {
    t.drop = [drop, args](aclError, const std::string &) {  // dropped by an abort: fn never runs, args is released
      drop(args);
      return ACL_SUCCESS;
    };
  }
  return s->launch(std::move(t), "aclrtLaunchHostFunc");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

void gertHostStreamEndInline(aclrtStream stream) try {
  if (StreamPtr s = find_stream(stream)) s->end_inline();
} HOSTNPU_PASS_UNWIND catch (...) {
}

aclError aclrtCreateStream(aclrtStream *stream) { return create_stream(stream, 0, 0, "aclrtCreateStream"); }

aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag) try {
  return create_stream(stream, priority, flag, "aclrtCreateStreamWithConfig");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtDestroyStream(aclrtStream stream) { return destroy_stream(stream, "aclrtDestroyStream"); }
aclError aclrtDestroyStreamForce(aclrtStream stream) { return destroy_stream(stream, "aclrtDestroyStreamForce"); }

aclError aclrtSynchronizeStream(aclrtStream stream) { return sync_stream(stream, -1, "aclrtSynchronizeStream"); }

aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout) try {
  int64_t ms = -1;
  if (aclError e = timeout_arg(timeout, "aclrtSynchronizeStreamWithTimeout", &ms)) return e;
  return sync_stream(stream, ms, "aclrtSynchronizeStreamWithTimeout");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status) try {
  if (!status) return fail(ACL_ERROR_INVALID_PARAM, "aclrtStreamQuery: status is null");
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamQuery: %p is not a live stream", stream);
  *status = s->idle() ? ACL_STREAM_STATUS_COMPLETE : ACL_STREAM_STATUS_NOT_READY;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtLaunchHostFunc(aclrtStream stream, aclrtHostFunc fn, void *args) try {
  return gertHostLaunchHostFuncEx(stream, fn, nullptr, args);
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtCreateEvent(aclrtEvent *event) { return create_event(event, ACL_EVENT_TIME_LINE, true, "aclrtCreateEvent"); }

aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag) try {
  const uint32_t known = ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | ACL_EVENT_TIME_LINE |
                         ACL_EVENT_DEVICE_USE_ONLY | ACL_EVENT_EXTERNAL | ACL_EVENT_IPC;
  if (flag & ~known) return fail(ACL_ERROR_INVALID_PARAM, "aclrtCreateEventWithFlag: unknown flag bits 0x%x", flag & ~known);
  return create_event(event, flag, (flag & ACL_EVENT_TIME_LINE) != 0, "aclrtCreateEventWithFlag");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtDestroyEvent(aclrtEvent event) try {
  auto &r = rt();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.events.find(from_handle(event));
  if (it == r.events.end())
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtDestroyEvent: %p is not a live event (already destroyed?)", event);
  r.events.erase(it);  // queued records and waits keep the event alive until they ran
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) try {
  EventPtr ev = find_event(event);
  if (!ev) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtRecordEvent: %p is not a live event", event);
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtRecordEvent: %p is not a live stream", stream);
  uint64_t seq = ev->recorded.fetch_add(1) + 1;
  Task t{[ev, seq](std::string &) {
    ev->complete(seq);
    return ACL_SUCCESS;
  }};
  t.drop = [ev, seq](aclError, const std::string &) {  // dropped by an abort: nobody waits for it forever
    ev->complete(seq);
    return ACL_SUCCESS;
  };
  aclError e = s->launch(std::move(t), "aclrtRecordEvent");
  if (e != ACL_SUCCESS) ev->complete(seq);
  return e;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream) try {
  EventPtr ev = find_event(event);
  if (!ev) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtResetEvent: %p is not a live event", event);
  if (!find_stream(stream)) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtResetEvent: %p is not a live stream", stream);
  // The host NPU's waits capture the record they wait for, so a reset has nothing to undo.
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) try {
  EventPtr ev = find_event(event);
  if (!ev) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamWaitEvent: %p is not a live event", event);
  StreamPtr s = find_stream(stream);
  if (!s) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtStreamWaitEvent: %p is not a live stream", stream);
  uint64_t seq = ev->recorded.load();  // the most recent record at the time of the call
  if (seq == 0) return ACL_SUCCESS;    // never recorded: nothing to wait for
  Stream *raw = s.get();  // the task runs on this stream's worker: the stream outlives it
  return s->launch(Task{[raw, ev, seq](std::string &) {
    raw->wait_event(ev, seq);  // false: aborted (aclrtStreamAbort / aclrtDeviceTaskAbort) before the record ran
    return ACL_SUCCESS;
  }}, "aclrtStreamWaitEvent");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

static aclError sync_event(aclrtEvent event, int64_t ms, const char *api) {
  EventPtr ev = find_event(event);
  if (!ev) return fail(ACL_ERROR_RT_PARAM_INVALID, "%s: %p is not a live event", api, event);
  uint64_t seq = ev->recorded.load();
  if (!ev->wait(seq, ms))
    return fail(ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "%s: the event's last record did not complete within %lld ms", api,
                static_cast<long long>(ms));
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeEvent(aclrtEvent event) { return sync_event(event, -1, "aclrtSynchronizeEvent"); }

aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout) try {
  int64_t ms = -1;
  if (aclError e = timeout_arg(timeout, "aclrtSynchronizeEventWithTimeout", &ms)) return e;
  return sync_event(event, ms, "aclrtSynchronizeEventWithTimeout");
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status) try {
  if (!status) return fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEvent: status is null");
  EventPtr ev = find_event(event);
  if (!ev) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtQueryEvent: %p is not a live event", event);
  *status = ev->is_done(ev->recorded.load()) ? ACL_EVENT_STATUS_COMPLETE : ACL_EVENT_STATUS_NOT_READY;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status) try {
  if (!status) return fail(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: status is null");
  EventPtr ev = find_event(event);
  if (!ev) return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtQueryEventStatus: %p is not a live event", event);
  *status = ev->is_done(ev->recorded.load()) ? ACL_EVENT_RECORDED_STATUS_COMPLETE
                                              : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent) try {
  if (!ms) return fail(ACL_ERROR_INVALID_PARAM, "aclrtEventElapsedTime: ms is null");
  EventPtr a = find_event(startEvent), b = find_event(endEvent);
  if (!a || !b)
    return fail(ACL_ERROR_RT_PARAM_INVALID, "aclrtEventElapsedTime: %s event %p is not a live event",
                a ? "end" : "start", a ? endEvent : startEvent);
  if (!a->timing || !b->timing)
    return fail(ACL_ERROR_RT_PARAM_INVALID,
                "aclrtEventElapsedTime: the %s event was created without ACL_EVENT_TIME_LINE", a->timing ? "end" : "start");
  uint64_t sa = a->recorded.load(), sb = b->recorded.load();
  for (Event *e : {a.get(), b.get()}) {
    uint64_t seq = e == a.get() ? sa : sb;
    if (seq == 0 || !e->is_done(seq))
      return fail(ACL_ERROR_RT_EVENT_NOT_COMPLETE, "aclrtEventElapsedTime: the %s event has %s",
                  e == a.get() ? "start" : "end", seq ? "not completed yet" : "never been recorded");
  }
  std::chrono::steady_clock::time_point ta = a->stamp_of(sa), tb = b->stamp_of(sb);
  *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return ACL_SUCCESS;
} HOSTNPU_GUARD(ACL_ERROR_RT_INTERNAL_ERROR)

}  // extern "C"
