"""`gert serve` supervises the tritonserver it starts.

Why: in Triton 2.51 one hostile request can abort the server (a huge JSON shape) or kill a model's Python stub (a
wrapping gRPC shape), nothing brings either back, and a dead stub leaves ``/v2/health/ready`` at 200. So:

- a server that exits abnormally (a code other than 0, or a signal) is started again, after a backoff (0 s, then 1,
  2, 4 ... 30 s), at most ``max_restarts`` times in ``window_s``; each exit is logged with its status and the last
  lines of the server's output. A server that printed a fatal signal and hangs in its handler, or whose API stays
  silent ``hung_s``, is killed first. Its leftover stubs and shared-memory regions are removed.
- a Python stub that died (its pid gone or a zombie, or stopped) is found within a poll (``poll_s``; a stub's exit
  wakes the loop at once) and its model is unloaded (Triton then reports it not ready) and loaded again through
  Triton's model-control API, at most ``max_reloads`` times per model in ``window_s``. Where the user's model-control
  mode allows no reload, the server is restarted instead.
- SIGTERM / SIGINT drain: readiness turns 503 at once, after ``drain_delay_s`` the server gets the signal (Triton
  2.51 then refuses new requests and finishes those in flight, up to ``--exit-timeout-secs``), and after that
  timeout (plus 10 s) it is killed.

What gert cannot change (Triton's code answers): requests in flight on a stub that died get ``INTERNAL ... not
healthy``, and requests while the model reloads get ``NOT_FOUND ... has no available versions`` (HTTP 404); while the
server restarts a client gets connection refused (gRPC ``UNAVAILABLE``).
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections import deque
from typing import Dict, Optional, Sequence, Tuple

from gert.errors import GertError
from gert_triton import shm_claim, stubs as stub_procs
from gert_triton.health import Health, HealthServer
from gert_triton.model_watch import ModelWatch
from gert_triton.serve_policy import Attempts, Policy, exit_status
from gert_triton.shm_claim import SHM_DIR
from gert_triton.server import TritonServer
from gert_triton.triton_args import Plan, plan as plan_args
from gert_triton.triton_http import TritonHTTP, model_states

FATAL = re.compile(rb"^Signal \((\d+)\) received")
DEFAULT_PORTS = (8000, 8001, 8002)
REPLICA_STRIDE = 10  # --replica N shifts every default port by 10 * N
PROBE_TIMEOUT_S = 2.0  # a readiness probe's own question to Triton (loopback); no answer in time: not ready


class Supervisor:
    """Runs and watches one tritonserver after another (a generation each); ``run()`` returns the exit code."""

    def __init__(
        self,
        repo: str,
        ports: Tuple[int, int, int],
        tritonserver: Optional[str],
        plan: Plan,
        address: str,
        policy: Policy,
        health: Health,
        out=None,
        err=None,
    ):
        self.repo, self.ports, self.binary, self.plan = repo, ports, tritonserver, plan
        self.address, self.policy, self.health = address, policy, health
        self.out = out or sys.stdout.buffer
        self.err = err or sys.stderr
        self.server: Optional[TritonServer] = None
        self.client: Optional[TritonHTTP] = None
        self.generation = 0
        self.tail: deque = deque(maxlen=30)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.stop_signal: Optional[int] = None
        self.fatal_at: Optional[float] = None
        self.restarts = Attempts(policy, policy.max_restarts)
        self.models = ModelWatch(plan, policy, health, self.log, self.wake, self.kill_server)
        self.exited: set = set()
        health.check = self.serving

    # ---- plumbing ----------------------------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        print(f"gert serve: {msg}", file=self.err, flush=True)

    def wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def on_line(self, line: bytes) -> None:
        """Each line of the server's output: passed on, kept for the exit log, a fatal signal noted."""
        self.out.write(line)
        self.out.flush()
        self.tail.append(line.decode(errors="replace").rstrip())
        m = FATAL.match(line)
        if m and int(m.group(1)) not in (signal.SIGTERM, signal.SIGINT) and self.stop_signal is None:
            self.fatal_at = time.monotonic()
            self.wake()

    def on_signal(self, signum, _frame) -> None:
        if self.stop_signal is not None and self.server and self.server.process.poll() is None:
            try:  # a second signal: no more delay
                os.killpg(self.server.process.pid, signum)
            except ProcessLookupError:
                pass
        self.stop_signal = signum
        self.wake()

    def serving(self, model: Optional[str] = None) -> bool:
        """Asked by the health endpoint on every probe, so readiness follows a change at once, not a poll later:
        the server runs, so does every stub (of ``model``) the last look found, and Triton itself says the model
        (``None``: every model readiness waits for) is ready now. Triton's word alone is not enough (it says 200 with
        a dead stub), nor is the last look's (a model can go down between two looks)."""
        srv, client = self.server, self.client
        if srv is None or not stub_procs.pid_alive(srv.process.pid):
            return False
        if not all(stub_procs.alive(s) for s in list(self.models.stubs) if model is None or s.model == model):
            return False
        if not self.plan.http or client is None:
            return True  # no HTTP API to ask (--allow-http=false): the processes are all gert serve knows
        if model is not None:
            return client.model_ready(model, timeout=PROBE_TIMEOUT_S)
        try:
            states = model_states(client.index(timeout=PROBE_TIMEOUT_S))
        except (OSError, GertError, ValueError):
            return False
        return all(states.get(name, ("",))[0] == "READY" for name in self.health.model_names())

    def wait(self, timeout: float) -> None:
        """Sleep until ``timeout``, a signal, a line worth acting on, a finished reload or a stub's exit."""
        self.health.update()
        pidfds: Dict[int, Optional[stub_procs.Stub]] = {}
        if self.server is not None and self.server.process.poll() is None:
            try:  # the server's exit wakes the loop at once: readiness must not say 200 a poll longer
                pidfds[os.pidfd_open(self.server.process.pid)] = None
            except OSError:
                pass
        for s in self.models.stubs:
            if s in self.exited:
                continue
            try:
                pidfds[os.pidfd_open(s.pid)] = s
            except OSError:
                pass
        try:
            readable, _, _ = select.select([self.wake_r, *pidfds], [], [], max(timeout, 0))
        finally:
            for fd in pidfds:
                os.close(fd)
        # a zombie's pidfd stays readable: not waited on again until the next look at the models
        self.exited.update(pidfds[fd] for fd in readable if pidfds.get(fd) is not None)
        try:
            while os.read(self.wake_r, 64):
                pass
        except (BlockingIOError, OSError):
            pass

    # ---- one server ----------------------------------------------------------------------------------------------

    def start(self) -> TritonServer:
        self.generation += 1
        self.fatal_at = None
        self.health.update(phase="starting" if self.generation == 1 else "restarting")
        http, grpc, metrics = self.ports
        srv = TritonServer(
            self.repo,
            http,
            grpc,
            metrics,
            self.binary,
            self.plan.with_generation(self.generation),
            address=self.address,
            on_line=self.on_line,
        )
        self.server = srv.start()
        self.client = TritonHTTP(srv.url("http"), self.plan.repo_header)
        self.models.reset(self.client, self.generation)
        return srv

    def wait_started(self) -> Optional[int]:
        """None once the server's endpoints answer (Triton starts them after its start-up loads); its exit code if
        it exits first."""
        while True:
            code = self.server.process.poll()
            if code is not None:
                return code
            if self.stop_signal is not None:
                return None
            if not self.plan.http or self.client.live(timeout=1.0):
                return None
            self.wait(0.25)

    def cleanup(self) -> None:
        """After the server exited: its stubs, its backends copy, gert's shared-memory regions of that start."""
        stub_procs.kill(self.models.stubs + (stub_procs.stubs_of(self.server.process.pid) if self.server else []))
        if self.server is not None:
            self.server.stop(timeout=5)
        if self.plan.shm_prefix:
            stub_procs.remove_shm_regions(f"{self.plan.shm_prefix}{self.generation}_")
        self.models.stubs = []

    def kill_server(self, why: str) -> None:
        self.log(f"killing tritonserver (pid {self.server.process.pid}): {why}")
        try:
            os.killpg(self.server.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.server.process.wait(30)

    def hung(self) -> Optional[str]:
        if self.fatal_at is not None and time.monotonic() - self.fatal_at > self.policy.fatal_grace_s:
            return f"it printed a fatal signal {self.policy.fatal_grace_s:.0f} s ago and still runs"
        if self.plan.http and time.monotonic() - self.models.index_ok > self.policy.hung_s:
            return f"its HTTP API did not answer for {self.policy.hung_s:.0f} s"
        return None

    # ---- the loop ------------------------------------------------------------------------------------------------

    def run(self) -> int:
        for n in self.plan.notes:
            self.log(n)
        self.start()
        code = self.wait_started()
        if code is not None:  # the first start failed: tritonserver's own exit, as without a supervisor
            self.log(f"tritonserver {exit_status(code)} before it was ready")
            self.cleanup()
            self.health.update(phase="failed")
            return code
        while True:
            if self.stop_signal is not None:
                return self.drain()
            code = self.server.process.poll()
            if code is not None:
                self.health.update(phase="restarting", last_exit=exit_status(code))
            why = self.hung() if code is None else None
            if why:
                self.kill_server(why)
                code = self.server.process.returncode
            if code is not None:
                result = self.after_exit(code)
                if result is not None:
                    return result
                continue
            self.models.collect()
            if self.plan.http:
                self.models.tick(self.server.process.pid)
                self.exited.clear()
            elif self.health.phase != "serving":
                self.health.update(phase="serving")
            self.health.update()
            self.wait(self.policy.poll_s)

    def after_exit(self, code: int) -> Optional[int]:
        """The server exited unasked: start it again (None once it answers) or give up (its exit code)."""
        while True:
            tail = "\n".join(f"    {line}" for line in list(self.tail)[-20:])
            self.health.update(phase="restarting", last_exit=exit_status(code))
            self.cleanup()
            if code == 0:
                self.log("tritonserver exited with code 0 unasked; gert serve ends too")
                self.health.update(phase="stopped")
                return 0
            delay = self.restarts.next_delay()
            if delay is None:
                self.log(
                    f"tritonserver {exit_status(code)}; {self.policy.max_restarts} restarts within "
                    f"{self.policy.window_s:.0f} s already: giving up. Its last lines:\n{tail}"
                )
                self.health.update(phase="failed")
                return code
            self.log(
                f"tritonserver (pid {self.server.process.pid}) {exit_status(code)}; restarting it in {delay:.0f} s "
                f"(restart {len(self.restarts.times)} of at most {self.policy.max_restarts} in "
                f"{self.policy.window_s:.0f} s). Its last lines:\n{tail}"
            )
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline and self.stop_signal is None:
                self.wait(deadline - time.monotonic())
            if self.stop_signal is not None:
                self.health.update(phase="stopped")
                return code
            self.tail.clear()
            self.start()
            code = self.wait_started()
            if code is None:
                self.health.update(restarts=self.health.restarts + 1)
                self.log(f"tritonserver restarted (pid {self.server.process.pid})")
                return None

    def drain(self) -> int:
        sig = self.stop_signal
        self.health.update(phase="draining")
        timeout = self.plan.exit_timeout + 10
        self.log(
            f"{signal.Signals(sig).name}: draining (readiness 503 now; tritonserver gets the signal in "
            f"{self.policy.drain_delay_s:g} s, finishes the requests in flight within "
            f"{self.plan.exit_timeout} s, and is killed after {timeout} s)"
        )
        p = self.server.process
        deadline = time.monotonic() + self.policy.drain_delay_s
        while time.monotonic() < deadline and p.poll() is None and self.stop_signal == sig:
            self.wait(deadline - time.monotonic())
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_server(f"still running {timeout} s after {signal.Signals(sig).name}")
        self.cleanup()
        self.health.update(phase="stopped")
        return p.returncode


def replica_ports(ports: Sequence[Optional[int]], replica: int) -> Tuple[int, int, int]:
    """Ports not given explicitly: the defaults (8000-8002) shifted by 10 per replica."""
    return tuple(p if p is not None else d + REPLICA_STRIDE * replica for p, d in zip(ports, DEFAULT_PORTS))  # type: ignore[return-value]


def run_supervised(
    repo: str,
    ports: Sequence[Optional[int]],
    tritonserver: Optional[str],
    extra_args: Sequence[str],
    address: str = "127.0.0.1",
    health_port: Optional[int] = None,
    replica: int = 0,
    policy: Optional[Policy] = None,
) -> int:
    """gert serve in the foreground: the health endpoint (``health_port``, default the metrics port + 1; 0: none),
    the supervised server, SIGINT/SIGTERM handled as a drain. Returns the server's exit code."""
    policy = policy or Policy()
    ports = replica_ports(ports, replica)
    plan = plan_args(extra_args, policy.drain_timeout_s, replica)
    health = Health()
    endpoint = None
    if health_port != 0:
        port = health_port if health_port is not None else ports[2] + 1
        try:
            endpoint = HealthServer(health, address, port)
        except OSError as e:
            if health_port is not None:  # asked for: its port must be had
                raise GertError(f"gert serve: cannot listen on {address}:{port} for --health-port: {e}") from None
            print(
                f"gert serve: the health endpoint's default port {address}:{port} (the metrics port + 1) is taken "
                f"({e}); serving without /healthz and /readyz: give --health-port PORT to have them",
                file=sys.stderr,
                flush=True,
            )
    claim = None
    if plan.shm_prefix:  # regions of gert serves that were killed outright go; this one's are claimed
        for prefix, n in shm_claim.remove_orphans():
            print(
                f"gert serve: removed {n} shared-memory file(s) of a gert serve that is gone ({SHM_DIR}/{prefix}*)",
                file=sys.stderr,
                flush=True,
            )
        try:
            claim = shm_claim.PrefixClaim(plan.shm_prefix)
        except OSError as e:  # no /dev/shm to write (not Linux, a read-only one): serving goes on without the claim
            print(
                f"gert serve: cannot hold {SHM_DIR}/{plan.shm_prefix}{shm_claim.LOCK} ({e}); if this gert serve is "
                "killed outright, its shared-memory regions stay until removed by hand",
                file=sys.stderr,
                flush=True,
            )
    sup = Supervisor(repo, ports, tritonserver, plan, address, policy, health)
    old = {s: signal.signal(s, sup.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return sup.run()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if sup.server is not None and sup.server.process.poll() is None:
            sup.kill_server("gert serve is ending")
            sup.cleanup()
        if endpoint is not None:
            endpoint.close()
        if claim is not None:
            claim.release()
