"""Helpers shared by the runtime tests: error codes, a runtime health check, and a subprocess runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import gert
from gert import _cann

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Marks for every runtime test module: they run with the session's Device(0) open. They run on any build (the host
# NPU built in, or gert built against a toolkit); a test that needs the host NPU's own features (gert.hostnpu:
# counters, spin time, its compute provider) is marked ``hostnpu_only`` and skipped where those are absent
# (conftest.py).
RUNTIME = [pytest.mark.usefixtures("device")]


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def quiet_thread_count(window: float = 0.02) -> int:
    """The lowest thread count seen over ``window`` seconds (threads joined just before may still be listed)."""
    deadline = time.monotonic() + window
    n = thread_count()
    while time.monotonic() < deadline:
        time.sleep(0.001)
        n = min(n, thread_count())
    return n


def settled_thread_count(expected: int, timeout: float = 2.0) -> int:
    """The thread count, once it equals ``expected`` or ``timeout`` passed.

    A joined thread can stay listed in /proc/self/task for a moment after pthread_join returned (the kernel
    wakes the joiner before it has reaped the task), so an exact count needs a short grace period.
    """
    deadline = time.monotonic() + timeout
    while True:
        n = thread_count()
        if n == expected or time.monotonic() >= deadline:
            return n
        time.sleep(0.001)


def live_threads(name: str) -> set:
    """The live threads called ``name`` (compare with the set taken before a test's own work: other tests' models
    may still hold theirs)."""
    return {t for t in threading.enumerate() if t.name == name and t.is_alive()}


def still_alive(threads, timeout: float = 30.0) -> list:
    """Join ``threads`` until ``timeout`` seconds passed in all; the ones still alive then (a thread told to stop
    needs a moment to wake up and return: wait for that, don't sample it)."""
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def compiled_from(executable, data: bytes) -> bool:
    """Whether a host NPU executable (gert.hostnpu's OrtExecutable) was compiled from the model bytes ``data``. An
    executable released but not yet collected (gc.get_objects() and host_executables() still see it) has no bytes
    any more: its ``model`` raises, and it is not the one a test looks for."""
    try:
        return executable.model == data
    except ValueError:
        return False


def acl_code(name: str) -> int:
    """The code of an ACL error, by name, from the table gert._cann was built with."""
    for code, n in _cann.ACL_ERROR_NAMES.items():
        if n == name:
            return code
    raise KeyError(name)


def assert_runtime_works(device=None, nbytes: int = 4096) -> None:
    """A fresh stream and buffer still do a correct H2D -> D2D -> D2H round trip (sync and async)."""
    rng = np.random.default_rng(nbytes)
    src = rng.integers(0, 256, nbytes, dtype=np.uint8)
    a = gert.DeviceBuffer(nbytes, device)
    b = gert.DeviceBuffer(nbytes, device)
    with gert.Stream(device) as s:
        a.copy_from(src, stream=s)
        b.copy_from(a, stream=s)
        out = np.zeros(nbytes, np.uint8)
        b.copy_to(out, stream=s)
        s.synchronize()
    np.testing.assert_array_equal(out, src)
    out2 = np.zeros(nbytes, np.uint8)
    a.copy_to(out2)
    np.testing.assert_array_equal(out2, src)
    a.free()
    b.free()


def child_pytest_env(base: dict | None = None) -> dict:
    """The environment for a pytest run started by a test: without the variables pytest-xdist sets in its workers
    (PYTEST_XDIST_WORKER...: a child that sees them takes itself for a worker; pytest-benchmark then refuses to
    measure) and pytest's own PYTEST_CURRENT_TEST."""
    env = dict(os.environ if base is None else base)
    for k in [k for k in env if k.startswith("PYTEST_XDIST_") or k == "PYTEST_CURRENT_TEST"]:
        del env[k]
    return env


# ---- subprocess runner ------------------------------------------------------------------------------

_PRELUDE = '''
import gc, json, os, sys, threading, time
import numpy as np
import gert
from gert import _cann

def catch(fn, *args, **kw):
    """Run fn; return [code, name, message] of the AclError it raised (None if it did not raise)."""
    try:
        fn(*args, **kw)
    except gert.AclError as e:
        return [e.code, e.name, e.message]
    return None

def roundtrip(device=None, n=1000):
    src = np.arange(n, dtype=np.int64) * 7 - 3
    buf = gert.DeviceBuffer(src.nbytes, device)
    out = np.zeros_like(src)
    with gert.Stream(device) as s:
        buf.copy_from(src, stream=s)
        buf.copy_to(out, stream=s)
        s.synchronize()
    buf.free()
    return bool((out == src).all())

def emit(obj):
    print("RESULT " + json.dumps(obj), flush=True)
'''


def run_python(code: str, env: dict | None = None, timeout: float = 60) -> str:
    """Run a Python snippet (with the prelude above) in a fresh interpreter; return its stdout.

    GERT_* variables of this process are not inherited: the child sees exactly ``env`` on top of the rest.
    The child must exit 0 (a crash, a hang or an uncaught exception fails the calling test).
    """
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("GERT_")}
    child_env.update(env or {})
    child_env.setdefault("PYTHONPATH", REPO)
    # the children of concurrent tests are not one deployment: they do not share their device's cores (conftest)
    child_env.setdefault("GERT_HOST_SHARED_CORES", "0")
    src = _PRELUDE + "\n" + textwrap.dedent(code)
    p = subprocess.run(
        [sys.executable, "-c", src], env=child_env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert p.returncode == 0, (
        f"child exited with {p.returncode}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}"
    )
    return p.stdout


def run_python_result(code: str, env: dict | None = None, timeout: float = 60):
    """run_python, then the JSON the snippet passed to emit() (exactly one call)."""
    out = run_python(code, env, timeout)
    lines = [ln[len("RESULT ") :] for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, f"expected one RESULT line, got:\n{out}"
    return json.loads(lines[0])
