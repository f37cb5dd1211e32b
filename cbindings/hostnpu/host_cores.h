// Host NPU: a device's compute shared by every process that uses it, as a real device's AI cores are.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace hostnpu {

// The graph runs in progress on device `device` in the other processes of this user (each process the host NPU runs
// in is one client of the same host CPUs, as processes are clients of one NPU). Counted in a small shared table,
// /dev/shm/gert-hostnpu-<euid>-dev<device>: one slot per process (its pid, its runs in progress). A slot of a process
// that is gone does not count. A table that is not this user's own (owner, mode 0600, a regular file, the size) is not
// used: each process then counts only its own runs, as before. GERT_HOST_SHARED_CORES=0 turns the table off; set to
// an absolute directory, the table is made there instead of /dev/shm.
class SharedRuns {
 public:
  explicit SharedRuns(int32_t device);
  ~SharedRuns();
  SharedRuns(const SharedRuns &) = delete;
  SharedRuns &operator=(const SharedRuns &) = delete;

  // A run of this process starts / ends (counted in its slot).
  void enter();
  void leave();
  // Runs in progress in other live processes (0 without a table); ``now_ns``: steady clock, for the liveness cache.
  uint32_t others(int64_t now_ns);
  // Whether the table is in use, and its path (for gert.hostnpu and the tests).
  bool active() const { return slots_ != nullptr; }
  const std::string &path() const { return path_; }

 private:
  struct Slot;
  // This process's last look at a slot's process: its pid, whether it lived, when (steady clock ns).
  struct Seen {
    std::atomic<int32_t> pid{0};
    std::atomic<bool> alive{false};
    std::atomic<int64_t> checked_ns{0};
  };
  Seen seen_[128];
  std::atomic<int> scan_to_{128};           // slots read between full scans (others())
  std::atomic<int64_t> full_scan_ns_{0};    // when the last full scan was
  void claim();
  bool counted() const;
  std::string path_;
  Slot *slots_ = nullptr;
  Slot *own_ = nullptr;
  int32_t own_pid_ = 0;
};

// The table of device `device` (made on first use; process life).
SharedRuns &shared_runs(int32_t device);

}  // namespace hostnpu
