"""The Python backend's stub processes of one tritonserver, read from /proc.

Why: Triton 2.51 neither restarts a stub that died nor says so in its readiness (a dead stub is a zombie child of the
server, not reaped; the model answers ``INTERNAL: Stub process ... is not healthy``). gert serve finds each stub as a
child of the server whose program is ``triton_python_backend_stub``; its arguments name the model file
(``REPO/MODEL/VERSION/model.py``) and the instance (``MODEL_0_0``).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Dict, List, Optional

STUB_PROGRAM = "triton_python_backend_stub"
INSTANCE_ARG = 8  # argv of a 2.51 stub: program, model file, shm region, sizes (2), parent pid, lib dir, ipc, instance


@dataclass(frozen=True)
class Stub:
    """One stub process: its pid and start time (a pid the kernel reuses is another process)."""

    pid: int
    started: int
    model: str
    instance: str


def _stat(pid: int) -> Optional[List[str]]:
    """/proc/PID/stat's fields after the command name (state first), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    return data.rpartition(")")[2].split()


def children(pid: int) -> List[int]:
    """The pids of ``pid``'s child processes (forked by any of its threads), found by their parent pid in
    /proc/*/stat.

    Why not /proc/PID/task/TID/children: proc_tid_children(5) says it lists children reliably only while they are
    frozen, and "exiting children may cause non-exiting children to be omitted from the list". A stub that dies is
    such an exiting child: a read then could miss another model's running stub (or the stub a reload just started),
    and the supervisor would count it dead and reload a model that serves."""
    out: List[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        stat = _stat(int(name))
        if stat is not None and len(stat) > 1 and stat[1] == str(pid):
            out.append(int(name))
    return out


def _cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def stubs_of(server_pid: int) -> List[Stub]:
    """The server's running stubs (an exited stub, a zombie until the server reaps it, is not one)."""
    found = []
    for pid in children(server_pid):
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        argv = _cmdline(pid)
        if len(argv) < 2 or os.path.basename(argv[0]) != STUB_PROGRAM:
            continue
        parts = os.path.normpath(argv[1]).split(os.sep)
        model = parts[-3] if len(parts) >= 3 else argv[1]
        instance = argv[INSTANCE_ARG] if len(argv) > INSTANCE_ARG else model
        found.append(Stub(pid, int(stat[19]), model, instance))
    return found


def pid_alive(pid: int) -> bool:
    """The process runs (exists and is no zombie)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def alive(stub: Stub) -> bool:
    """The stub still runs (not exited, not a zombie, its pid not reused)."""
    stat = _stat(stub.pid)
    return stat is not None and stat[0] not in ("Z", "X") and int(stat[19]) == stub.started


def stopped(stub: Stub) -> bool:
    """Stopped by a signal (SIGSTOP) or a tracer: alive, but Triton finds it 'not healthy' within a second."""
    stat = _stat(stub.pid)
    return stat is not None and stat[0] in ("T", "t") and int(stat[19]) == stub.started


def kill(stubs: List[Stub]) -> None:
    """SIGKILL those still alive (a server that died leaves its stubs behind; a stopped one is not coming back)."""
    for s in stubs:
        if alive(s) or stopped(s):
            try:
                os.kill(s.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def by_model(stubs: List[Stub]) -> Dict[str, Dict[str, List[Stub]]]:
    """model -> instance -> its stubs (two while a reload runs: the new one starts before the old one ends)."""
    out: Dict[str, Dict[str, List[Stub]]] = {}
    for s in stubs:
        out.setdefault(s.model, {}).setdefault(s.instance, []).append(s)
    return out


def remove_shm_regions(prefix: str, shm_dir: str = "/dev/shm") -> int:
    """Remove the shared-memory regions named ``prefix*`` (a crashed server's stubs leave theirs behind); returns
    how many. Only for a prefix gert serve made unique to one server start."""
    if not prefix:
        return 0
    n = 0
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return 0
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(shm_dir, name))
                n += 1
            except OSError:
                pass
    return n
