"""benchmarks/_proctree.py, which bench_memory.py's triton3 work sums a tritonserver's memory with: checked against
this test process and a child it starts (the benchmark itself starts two servers: minutes, not a test)."""

from __future__ import annotations

import os
import subprocess
import sys

from _helpers import REPO

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from _proctree import RssSampler, proc_memory, tree_memory, tree_pids

MB = 1 << 20
CHILD_BYTES = 64 * MB

# holds CHILD_BYTES written (resident) and starts a grandchild from a second thread that stays alive until the end:
# /proc/<pid>/task/<pid>/children (the main thread's children) would not list it
CHILD = f"""
import subprocess, sys, threading
held = b"x" * {CHILD_BYTES}
def spawn():
    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    print(p.pid, flush=True)
    sys.stdin.read()
    p.stdin.close(); p.wait(60)
t = threading.Thread(target=spawn)
t.start(); t.join()
"""


def test_tree_memory_sums_this_process_its_child_and_a_grandchild_started_by_a_thread():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip().isdigit(), f"the child printed {line!r} (exit code {child.poll()})"
        grandchild = int(line)
        pids = tree_pids(os.getpid())
        assert pids[0] == os.getpid() and child.pid in pids and grandchild in pids
        assert pids.index(grandchild) > pids.index(child.pid)  # breadth first: the root's children before theirs
        with RssSampler(os.getpid(), interval=0.05) as sampler:
            tree = tree_memory(os.getpid())
        by_pid = {p.pid: p for p in tree.procs}
        assert {os.getpid(), child.pid, grandchild} <= set(by_pid)
        assert tree.rss == sum(p.rss for p in tree.procs) and tree.hwm == sum(p.hwm for p in tree.procs)
        assert by_pid[child.pid].rss >= CHILD_BYTES and by_pid[child.pid].hwm >= by_pid[child.pid].rss
        assert tree.rss >= by_pid[os.getpid()].rss + CHILD_BYTES
        assert tree.cpu_s >= by_pid[os.getpid()].cpu_s > 0
        assert sampler.peak >= CHILD_BYTES
        assert "sys.stdin.read()" in by_pid[grandchild].cmdline
    finally:
        child.stdin.close()
        child.wait(60)
    assert proc_memory(child.pid) is None  # reaped: gone from /proc
    assert child.pid not in tree_pids(os.getpid())
