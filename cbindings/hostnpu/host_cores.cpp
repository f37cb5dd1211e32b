// Host NPU: the graph runs in progress on a device across processes (host_cores.h).
#include "host_cores.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hostnpu {

namespace {
constexpr int kSlots = 128;
constexpr int64_t kAliveCheckNs = 100'000'000;  // 100 ms
}

struct SharedRuns::Slot {
  std::atomic<int32_t> pid;        // 0: free
  std::atomic<uint32_t> running;  // this process's runs in progress
};
static_assert(std::atomic<int32_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the table's atomics must be lock-free to be shared between processes");

namespace {
constexpr size_t kBytes = sizeof(int64_t) * 2 * kSlots;

// This process's pid, read once and again in a forked child (getpid() is a system call: three per run cost the
// compiled hot path ~0.8 us per call on a VM).
std::atomic<int32_t> g_pid{0};
void refresh_pid() { g_pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed); }
int32_t this_pid() {
  static const bool once = [] {
    refresh_pid();
    ::pthread_atfork(nullptr, nullptr, refresh_pid);
    return true;
  }();
  (void)once;
  return g_pid.load(std::memory_order_relaxed);
}

bool alive(int32_t pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

// GERT_HOST_SHARED_CORES: "0" no table; an absolute directory: the table there (the tests' own); else /dev/shm.
const char *table_dir() {
  const char *v = std::getenv("GERT_HOST_SHARED_CORES");
  if (v && std::strcmp(v, "0") == 0) return nullptr;
  return v && v[0] == '/' ? v : "/dev/shm";
}
}  // namespace

SharedRuns::SharedRuns(int32_t device) {
  const char *dir = table_dir();
  if (!dir) return;
  path_ = std::string(dir) + "/gert-hostnpu-" + std::to_string(::geteuid()) + "-dev" + std::to_string(device);
  // Created 0600 by its user, or an existing one checked to be that: a file another user planted (or a link to one)
  // is never written through. (O_NOFOLLOW: a symlink fails to open.)
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  struct stat st {};
  // (one link: a hard link planted at the path to some file of this user's is not written through either)
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 0077) == 0 &&
            st.st_nlink == 1 && (st.st_size == 0 || st.st_size == static_cast<off_t>(kBytes));
  if (ok && st.st_size == 0) ok = ::ftruncate(fd, static_cast<off_t>(kBytes)) == 0;  // (zeros: every slot free)
  if (ok) {
    void *p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) slots_ = static_cast<Slot *>(p);
  }
  ::close(fd);
  if (slots_) claim();
}

SharedRuns::~SharedRuns() {
  if (own_ && own_pid_ == this_pid()) own_->pid.store(0);
  if (slots_) ::munmap(slots_, kBytes);
}

void SharedRuns::claim() {
  int32_t pid = this_pid();
  for (int i = 0; i < kSlots && !own_; ++i) {
    Slot &s = slots_[i];
    int32_t seen = s.pid.load();
    if (seen != 0 && alive(seen)) continue;  // (a slot of a process that is gone is taken over)
    if (s.pid.compare_exchange_strong(seen, pid)) {
      s.running.store(0);
      own_ = &s;
    }
  }
  own_pid_ = pid;
}

// (A child forked from a process that ran graphs is not counted: its pid is not the slot's.)
bool SharedRuns::counted() const { return own_ && own_pid_ == this_pid(); }

void SharedRuns::enter() {
  if (counted()) own_->running.fetch_add(1);
}

void SharedRuns::leave() {
  if (counted()) own_->running.fetch_sub(1);
}

uint32_t SharedRuns::others(int64_t now_ns) {
  if (!slots_) return 0;
  uint32_t n = 0;
  int32_t pid = this_pid();
  // Slots are claimed lowest first: between full scans (every kAliveCheckNs) only those up to the last claimed one
  // the previous full scan saw are read (a process that claimed a later slot since is counted from the next one).
  const bool full = now_ns - full_scan_ns_.load(std::memory_order_relaxed) > kAliveCheckNs;
  const int end = full ? kSlots : scan_to_.load(std::memory_order_relaxed);
  int last = -1;
  for (int i = 0; i < end; ++i) {
    Slot &s = slots_[i];
    int32_t p = s.pid.load(std::memory_order_relaxed);
    if (p != 0) last = i;
    uint32_t r = s.running.load(std::memory_order_relaxed);
    if (r == 0 || r > 1024) continue;  // (a count no process could have: not trusted)
    if (p == 0 || p == pid) continue;
    // Whether p lives, asked of the kernel at most every kAliveCheckNs per slot (a syscall per slot per run cost a
    // compiled hot-path call ~0.8 us); a process found gone frees its slot, so nobody asks again.
    Seen &seen = seen_[i];
    if (seen.pid.load(std::memory_order_relaxed) != p || now_ns - seen.checked_ns.load(std::memory_order_relaxed) > kAliveCheckNs) {
      bool live = alive(p);
      seen.alive.store(live, std::memory_order_relaxed);
      seen.checked_ns.store(now_ns, std::memory_order_relaxed);
      seen.pid.store(p, std::memory_order_relaxed);
      if (!live) {
        s.pid.compare_exchange_strong(p, 0);
        continue;
      }
    }
    if (seen.alive.load(std::memory_order_relaxed)) n += r;
  }
  if (full) {
    scan_to_.store(last + 1, std::memory_order_relaxed);
    full_scan_ns_.store(now_ns, std::memory_order_relaxed);
  }
  return n;
}

SharedRuns &shared_runs(int32_t device) {
  static std::mutex mu;
  static auto *tables = new std::map<int32_t, std::unique_ptr<SharedRuns>>();  // (never destroyed: runs at exit)
  std::lock_guard<std::mutex> lk(mu);
  auto &t = (*tables)[device];
  if (!t) t = std::make_unique<SharedRuns>(device);
  return *t;
}

}  // namespace hostnpu
