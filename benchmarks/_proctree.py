"""Memory and CPU of a process tree from /proc (bench_memory.py's triton3 work: tritonserver and its Python stubs).

A tree is a root pid and every live descendant, found from each process's parent pid in /proc/<pid>/stat (not
/proc/<pid>/task/<tid>/children, which lists only the children a given thread started). ``tree_memory`` sums the
processes' VmHWM (each one's own peak RSS) and VmRSS: the summed VmHWM over-states the tree's true simultaneous peak
(the processes need not peak at the same moment), which ``RssSampler`` bounds from below by sampling the summed
VmRSS. The summed RSS also counts twice the pages two processes share (Triton's Python backend passes tensors
through shared memory mapped by the server and a stub); the summed Pss (/proc/<pid>/smaps_rollup: each shared page
split among its processes) does not.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcMemory:
    """One process: its pid, command name, VmHWM, VmRSS and Pss (bytes), user + system CPU seconds, command line."""

    pid: int
    name: str
    hwm: int
    rss: int
    cpu_s: float
    cmdline: str = ""
    pss: int = 0


@dataclass
class TreeMemory:
    """The processes of a tree (the root first) and their sums."""

    procs: list = field(default_factory=list)

    @property
    def hwm(self) -> int:
        return sum(p.hwm for p in self.procs)

    @property
    def rss(self) -> int:
        return sum(p.rss for p in self.procs)

    @property
    def pss(self) -> int:
        return sum(p.pss for p in self.procs)

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.procs)


def parent_pids() -> dict:
    """{pid: parent pid} of every process now in /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        out[int(entry)] = int(fields[1])
    return out


def tree_pids(root: int) -> list:
    """``root`` and its live descendants, breadth first."""
    by_parent: dict = {}
    for pid, ppid in parent_pids().items():
        by_parent.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(by_parent.get(pid, [])))
    return out


def proc_memory(pid: int) -> ProcMemory | None:
    """A process's memory and CPU from /proc/<pid>/status and stat; None when it is gone or a zombie."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for ln in f:
                key, _, value = ln.partition(":")
                if key == "Name":
                    values[key] = value.strip()
                elif key in ("VmHWM", "VmRSS"):
                    values[key] = int(value.split()[0]) * 1024
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        pss = 0
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for ln in f:
                if ln.startswith("Pss:"):
                    pss = int(ln.split()[1]) * 1024
    except (OSError, IndexError):
        return None
    if "VmRSS" not in values:  # a zombie has no memory left
        return None
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14, 15 of stat)
    return ProcMemory(pid, values.get("Name", "?"), values.get("VmHWM", 0), values["VmRSS"], cpu, cmdline, pss)


def tree_memory(root: int) -> TreeMemory:
    """The live processes of ``root``'s tree with their memory (the root first)."""
    return TreeMemory([m for m in (proc_memory(p) for p in tree_pids(root)) if m is not None])


class RssSampler:
    """Samples the tree's summed VmRSS and Pss every ``interval`` seconds in a thread: ``peak`` is the highest summed
    RSS seen, a lower bound of the tree's simultaneous peak (the summed VmHWM is an upper bound); ``pss_peak`` the
    highest summed Pss."""

    def __init__(self, root: int, interval: float = 0.25):
        self.root, self.interval, self.peak, self.pss_peak = root, interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def _sample(self) -> None:
        tree = tree_memory(self.root)
        self.peak, self.pss_peak = max(self.peak, tree.rss), max(self.pss_peak, tree.pss)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
