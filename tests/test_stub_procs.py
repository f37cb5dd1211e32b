"""gert_triton/stubs.py: how gert serve finds the Python stubs of its tritonserver, with real processes.

children() must list every child process of a server whose threads fork them (Triton forks a stub from whichever
thread loads the model; that thread may exit before the stub does), whatever exits meanwhile: a running stub left
out is counted dead, and its serving model gets reloaded."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from gert_triton import stubs as stub_procs


def spawn_from_thread() -> subprocess.Popen:
    """A child forked by a thread that exits right after (as a loader thread of Triton's pool may)."""
    box = []
    t = threading.Thread(target=lambda: box.append(subprocess.Popen(["sleep", "60"])))
    t.start()
    t.join()
    return box[0]


def test_children_lists_children_of_every_thread_and_of_threads_that_exited():
    direct = subprocess.Popen(["sleep", "60"])
    orphaned = spawn_from_thread()
    try:
        got = stub_procs.children(os.getpid())
        assert direct.pid in got and orphaned.pid in got, (direct.pid, orphaned.pid, got)
        assert stub_procs.children(direct.pid) == []  # sleep has no children
    finally:
        for p in (direct, orphaned):
            p.kill()
            p.wait()
    assert direct.pid not in stub_procs.children(os.getpid())  # reaped: gone


def test_running_children_are_listed_while_others_exit_and_linger_as_zombies():
    """Children keep being killed (zombies until reaped, like a dead stub under Triton) while the list is read:
    the running ones are in every read."""
    keep = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            ps = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
            for p in ps:
                p.send_signal(signal.SIGKILL)
            time.sleep(0.005)  # zombies for a moment
            for p in ps:
                p.wait()

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(300):
            got = set(stub_procs.children(os.getpid()))
            missing = [p.pid for p in keep if p.pid not in got]
            assert not missing, f"running children {missing} not listed"
    finally:
        stop.set()
        t.join()
        for p in keep:
            p.kill()
            p.wait()


def test_a_zombie_child_is_not_alive():
    p = subprocess.Popen(["sleep", "60"])
    p.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while stub_procs.pid_alive(p.pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert p.pid in stub_procs.children(os.getpid())  # a zombie is still a child until reaped
    p.wait()
