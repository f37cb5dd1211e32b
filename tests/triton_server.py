"""The real tritonserver for the end-to-end tests: started on this xdist worker's free ports (tests/_ports.py), again
on new ports when one was taken between choosing it and the bind, watched for an abort, and stopped with its log
tail printed when it did not exit cleanly. Also `gert serve` in a subprocess, for the tests of the CLI."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Iterator, Optional, Sequence

import pytest

import gert
from gert_triton import stubs as stub_procs
from gert_triton.server import TritonServer
from _ports import free_ports

START_TIMEOUT = 90.0  # server start, models loaded
EXPLICIT = ("--model-control-mode=explicit", "--exit-timeout-secs=5")  # the tests load the models they use
ABORTED = re.compile(r"^Signal \((6|11)\) received", re.MULTILINE)


def log_tail(path: str, n: int = 40) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def watch_for_abort(srv: TritonServer, log: str) -> None:
    """tritonserver 2.51 (the nvidia-pytriton wheel's) has aborted on heap corruption ("malloc(): unaligned
    fastbin chunk detected", then "Signal (6) received.") and then hung in its handler, so every client call
    without a deadline hung the suite. A thread watches the log and kills such a server at once: the calls fail
    fast (connection refused), the test that ran fails naming the cause."""

    def watch() -> None:
        while srv.process is not None and srv.process.poll() is None:
            time.sleep(0.5)
            try:
                with open(log, errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if ABORTED.search(text):
                print(
                    f"tritonserver aborted (killed by the test's watchdog); log tail:\n{log_tail(log)}", file=sys.stderr
                )
                try:
                    os.killpg(srv.process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                return

    threading.Thread(target=watch, name="triton-abort-watchdog", daemon=True).start()


def start_server(repo: str, log: str, extra_args: Sequence[str] = EXPLICIT, attempts: int = 3) -> TritonServer:
    """A started, ready TritonServer on free ports; a port taken between free_ports() and the server's bind (other
    test sessions on this machine) gets new ports. Stopped again if it does not become ready. ``srv.log`` is
    ``log``."""
    for attempt in range(attempts):
        http_port, grpc_port, metrics_port = free_ports(3)  # this xdist worker's own block (tests/_ports.py)
        srv = TritonServer(repo, http_port, grpc_port, metrics_port, log_path=log, extra_args=list(extra_args))
        srv.start()
        try:
            srv.wait_ready(START_TIMEOUT)
            watch_for_abort(srv, log)
            srv.log = log
            return srv
        except gert.GertError as e:
            srv.stop(timeout=10)
            if "already in use" in log_tail(log, 200) and attempt + 1 < attempts:
                continue
            pytest.fail(f"{e}\n{log_tail(log)}", pytrace=False)
        except BaseException:
            srv.stop(timeout=10)
            raise
    raise AssertionError("unreachable")


def stop_server(srv: TritonServer) -> None:
    """Stop it; a server that did not exit cleanly gets its log tail printed (the test output shows why)."""
    code = srv.stop(timeout=20)
    if code not in (0, None):
        print(f"tritonserver exited with {code}; log tail:\n{log_tail(srv.log)}", file=sys.stderr)


@contextlib.contextmanager
def running_server(repo: str, log: str, extra_args: Sequence[str] = EXPLICIT) -> Iterator[TritonServer]:
    """start_server ... stop_server, for a fixture: ``with running_server(repo, log) as srv: yield srv``."""
    srv = start_server(repo, log, extra_args)
    try:
        yield srv
    finally:
        stop_server(srv)


# ---- gert serve ---------------------------------------------------------------------------------------------------


def children(pid: int) -> list:
    """Child pids of ``pid`` (by parent pid: what gert serve's supervisor uses, not the unreliable children file)."""
    return stub_procs.children(pid)


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].startswith("Z")  # a zombie has exited
    except OSError:
        return True


def run_serve(
    repo: str, log_path: str, *extra: str, gert_cmd=(sys.executable, "-m", "gert"), options=(), env=None, cwd=None
) -> tuple:
    ports = free_ports(3)
    cmd = [
        *gert_cmd,
        "serve",
        repo,
        "--http-port",
        str(ports[0]),
        "--grpc-port",
        str(ports[1]),
        "--metrics-port",
        str(ports[2]),
        *options,
        "--",
        "--exit-timeout-secs=5",
        *extra,
    ]
    log = open(log_path, "wb")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=cwd)
    log.close()
    return p, ports


def kill_tree(p: subprocess.Popen, extra_pids=()) -> None:
    for pid in list(extra_pids):
        if not gone(pid):
            try:
                os.killpg(pid, signal.SIGKILL)  # tritonserver runs in its own session (group id = its pid)
            except (ProcessLookupError, PermissionError):
                pass
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)


def wait_http_ready(p: subprocess.Popen, port: int, timeout: float, host: str = "127.0.0.1") -> bool:
    """True once the server answers ready; False if gert serve exited first; fails the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"gert serve was not ready within {timeout} s")


def start_serve(
    repo: str, log: str, attempts: int = 3, *extra: str, host: str = "127.0.0.1", timeout: Optional[float] = None, **run
) -> tuple:
    """`gert serve` running and ready (new ports if one was taken meanwhile); killed if it does not get ready."""
    for attempt in range(attempts):
        p, ports = run_serve(repo, log, *extra, **run)
        try:
            ready = wait_http_ready(p, ports[0], timeout or START_TIMEOUT, host)
        except BaseException:
            kill_tree(p, children(p.pid))
            raise
        if ready:
            return p, ports
        kill_tree(p, children(p.pid))
        if "already in use" in log_tail(log, 200) and attempt + 1 < attempts:
            continue
        pytest.fail(f"gert serve exited with {p.returncode} before it was ready:\n{log_tail(log)}")
    raise AssertionError("unreachable")
