"""Loopback ports for the servers the tests start, one block per pytest-xdist worker.

Each worker (``PYTEST_XDIST_WORKER`` = gw0, gw1, ...; a run without xdist is worker 0) takes ports from its own
block below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), so two
workers never pick the same port and no client socket of this machine is handed one of them as its local port
between the pick and the server's bind. A port is only returned when it binds now; another test session on the
machine can still take it before the server binds, which is why the callers retry with new ports when a server
reports "already in use".
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

BASE = 20000
BLOCK = 500  # ports per worker: 20000-20499 for gw0, 20500-20999 for gw1, ...
WORKERS = 24  # blocks below 32768


def worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name[2:] if name.startswith("gw") else ""
    return int(digits) % WORKERS if digits.isdigit() else 0


_lock = threading.Lock()
# start at a place that depends on the process, so that two sessions of the same worker index (two checkouts tested
# at once on one machine) walk their blocks from different places
_next = itertools.count(os.getpid() % BLOCK)


def _binds(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port of this worker's block that is free now (the next one in turn: a port given out is not reused until
    the block wraps around)."""
    first = BASE + worker_index() * BLOCK
    with _lock:
        for _ in range(BLOCK):
            port = first + next(_next) % BLOCK
            if _binds(port):
                return port
    raise RuntimeError(f"no free port in {first}-{first + BLOCK - 1}")


def free_ports(n: int) -> list:
    return [free_port() for _ in range(n)]
