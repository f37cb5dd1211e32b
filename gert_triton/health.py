"""`gert serve`'s own health endpoint (``--health-port``): liveness, readiness that tells the truth, and the
supervisor's counts.

Why: Triton 2.51 keeps ``/v2/health/ready`` and ``/v2/models/M/ready`` at 200 while a model's stub is dead, and
nothing answers while the server restarts. Routes:

- ``GET /healthz``: 200 while gert serve's supervisor runs (it heals the server itself; 503 once it gave up or its
  loop stalled), for a liveness probe.
- ``GET /readyz``: 200 only when the server runs, every model it should serve is loaded with every stub alive (as the
  supervisor's last look found, and Triton says so at the probe), no reload is under way and gert serve is not
  draining; 503 otherwise. The body is the state as JSON.
- ``GET /readyz/MODEL``: the same for one model (404: no such model).
- ``GET /metrics``: the counts as Prometheus text (restarts, reloads, stub deaths, readiness).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Optional, Tuple

STALL_S = 30.0  # the supervisor's loop ticks twice a second; silent this long, it is not alive


@dataclass
class ModelHealth:
    """One model as the supervisor sees it."""

    state: str = "loading"  # "ready", "loading", "reloading", "stub dead", "unavailable"
    stubs: int = 0
    reloads: int = 0
    stub_deaths: int = 0
    reason: str = ""


@dataclass
class Health:
    """What gert serve knows, shared by the supervisor (writer) and the endpoint's threads (readers)."""

    phase: str = "starting"  # "starting", "serving", "restarting", "draining", "stopped", "failed"
    restarts: int = 0
    last_exit: str = ""
    models: Dict[str, ModelHealth] = field(default_factory=dict)
    tick: float = field(default_factory=time.monotonic)
    # asked at each probe: do the server and the stubs (of a model) still run (the supervisor's answer)
    check: Callable[[Optional[str]], bool] = field(default=lambda model=None: True, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def update(self, **kw) -> None:
        with self._lock:
            for k, v in kw.items():
                setattr(self, k, v)
            self.tick = time.monotonic()

    def set_model(self, name: str, **kw) -> ModelHealth:
        with self._lock:
            m = self.models.setdefault(name, ModelHealth())
            for k, v in kw.items():
                setattr(m, k, v)
            return m

    def count(self, name: str, what: str) -> None:
        """Add one to a model's ``reloads`` or ``stub_deaths``."""
        with self._lock:
            m = self.models.setdefault(name, ModelHealth())
            setattr(m, what, getattr(m, what) + 1)

    def forget_models(self, keep=()) -> None:
        with self._lock:
            for name in [n for n in self.models if n not in keep]:
                del self.models[name]

    def model_names(self) -> list:
        with self._lock:
            return list(self.models)

    def live(self) -> bool:
        return self.phase not in ("failed", "stopped") and time.monotonic() - self.tick < STALL_S

    def ready(self) -> bool:
        return self.snapshot()["ready"]

    def model_ready(self, name: str) -> Optional[bool]:
        """None: no such model."""
        report = self.model_report(name)
        return None if report is None else report["ready"]

    def model_report(self, name: str) -> Optional[dict]:
        """``{"ready": ..., "model": name, **the model's record}`` (None: no such model). Ready only when the record
        said so both before and after the supervisor's check (which asks Triton: milliseconds, while the supervisor
        may find the model down), so the body is the record the verdict was given on, never a newer one."""
        with self._lock:
            m = self.models.get(name)
            if m is None:
                return None
            before = (self.phase, asdict(m))
        ok = before[0] == "serving" and before[1]["state"] == "ready" and self.check(name)
        with self._lock:
            m = self.models.get(name)
            after = (self.phase, asdict(m)) if m is not None else None
        return {"ready": bool(ok and after == before), "model": name, **before[1]}

    def snapshot(self) -> dict:
        with self._lock:
            ready = self.phase == "serving" and all(m.state == "ready" for m in self.models.values())
        ready = ready and self.check(None)
        with self._lock:
            return {
                "ready": ready,
                "phase": self.phase,
                "restarts": self.restarts,
                "last_exit": self.last_exit,
                "models": {n: asdict(m) for n, m in sorted(self.models.items())},
            }

    def prometheus(self) -> str:
        s = self.snapshot()
        lines = [
            "# HELP gert_serve_ready 1 when every model is loaded, its stubs alive, and the server serving",
            "# TYPE gert_serve_ready gauge",
            f"gert_serve_ready {int(s['ready'])}",
            "# HELP gert_serve_server_restarts_total tritonserver restarts after an abnormal exit",
            "# TYPE gert_serve_server_restarts_total counter",
            f"gert_serve_server_restarts_total {s['restarts']}",
        ]
        for metric, key, kind, help_ in (
            ("gert_serve_model_ready", None, "gauge", "1 when the model is loaded and its stubs alive"),
            ("gert_serve_model_reloads_total", "reloads", "counter", "reloads of the model by gert serve"),
            ("gert_serve_stub_deaths_total", "stub_deaths", "counter", "Python stubs of the model found dead"),
        ):
            lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} {kind}"]
            for name, m in s["models"].items():
                value = int(bool(self.model_ready(name))) if key is None else m[key]
                lines.append(f'{metric}{{model="{_label(name)}"}} {value}')
        return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _handler(health: Health):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path == "/healthz":
                ok = health.live()
                self._send(200 if ok else 503, {"live": ok, "phase": health.phase})
            elif path == "/readyz":
                snap = health.snapshot()
                self._send(200 if snap["ready"] else 503, snap)
            elif path.startswith("/readyz/"):
                name = path[len("/readyz/") :]
                report = health.model_report(name)
                if report is None:
                    self._send(404, {"error": f"no model {name!r}"})
                else:
                    self._send(200 if report["ready"] else 503, report)
            elif path == "/metrics":
                self._send(200, health.prometheus(), "text/plain; version=0.0.4")
            else:
                self._send(404, {"error": "routes: /healthz, /readyz, /readyz/MODEL, /metrics"})

        def _send(self, code: int, body, ctype: str = "application/json") -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:  # probes every few seconds: not worth a line each
            pass

    return Handler


class _HTTPServer6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class HealthServer:
    """The endpoint on ``(address, port)`` in a daemon thread; close() stops it."""

    def __init__(self, health: Health, address: str, port: int):
        host = address.strip("[]")
        server_class = _HTTPServer6 if ":" in host else ThreadingHTTPServer
        self.httpd = server_class((host, port), _handler(health))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="gert-serve-health", daemon=True)
        self.thread.start()

    @property
    def address(self) -> Tuple[str, int]:
        return self.httpd.server_address[:2]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
