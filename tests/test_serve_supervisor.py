"""`gert serve`'s supervisor (issue 41) against the real tritonserver: a server killed with SIGKILL is back and
serving within 30 s and gert's /readyz is never 200 while it is down; a model whose Python stub is killed is
reloaded while the other models and another replica on the same host keep serving, /readyz/MODEL 503 meanwhile;
SIGTERM drains; the user's own --model-control-mode=none restarts the server instead; the two serve_* scripts of
../shared/repros/security exit 0. Every wait is bounded; requests are few."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from onnx import helper, numpy_helper

from _ports import free_port
from gert_triton.repo import init_repo
from gert_triton.serve_policy import Attempts, Policy
from gert_triton.server import pytriton_root
from gert_triton.supervisor import replica_ports
from gert_triton.triton_args import SUPERVISOR_HEADER, plan, restricted_header
from models import make_model, vi
from triton_models import SEQ_OUTPUTS, seq_expected, seq_inputs, seq_model
from triton_server import START_TIMEOUT, children, gone, kill_tree, log_tail, run_serve, start_serve

grpcclient = pytest.importorskip("tritonclient.grpc")
e2e = pytest.mark.skipif(pytriton_root() is None, reason="needs the nvidia-pytriton wheel's tritonserver")

BACK_WITHIN = 30.0  # the bound: server or model back and serving
CALL_TIMEOUT = 20.0
REPROS = os.environ.get(
    "GERT_SECURITY_REPROS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "repros", "security")
)


# ---- helpers ------------------------------------------------------------------------------------------------------


def get(port: int, path: str, timeout: float = 3.0) -> int | None:
    """HTTP status of GET path on loopback, None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def get_json(port: int, path: str) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def metric(port: int, line_start: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(line_start + " "):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line_start} on gert serve's /metrics")


def infer_ok(grpc_port: int, model: str = "seq", uid: int = 3) -> str | None:
    """None when the model answers right; else the error."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    try:
        r = seq_inputs(2, 5, uid)
        ins = []
        for name, arr in r.items():
            i = grpcclient.InferInput(name, list(arr.shape), "FP32" if arr.dtype == np.float32 else "INT64")
            i.set_data_from_numpy(arr)
            ins.append(i)
        res = client.infer(model, ins, client_timeout=CALL_TIMEOUT)
        exp = seq_expected(r)
        for k in SEQ_OUTPUTS:
            np.testing.assert_array_equal(res.as_numpy(k), exp[k])
        return None
    except Exception as e:  # noqa: BLE001 (any failure is the answer)
        return f"{type(e).__name__}: {e}"
    finally:
        client.close()


def stub_pids(server_pid: int, model: str) -> list[int]:
    """The server's triton_python_backend_stub children serving ``model`` (found by the model file in cmdline)."""
    out = []
    for pid in children(server_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"triton_python_backend_stub") and f"/{model}/".encode() in argv[1] and not gone(pid):
            out.append(pid)
    return out


def kill_and_wait(pid: int) -> None:
    """SIGKILL, then wait until the kernel finished it (a zombie or gone): until then the process still runs, and a
    probe may truthfully say so (under load the teardown of a many-threaded process takes a while)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs 10 s after SIGKILL"
        time.sleep(0.001)


def serve(repo: str, log: str, *extra: str, health: int | None = None, options=()) -> tuple:
    """gert serve running and ready: (process, ports, health port)."""
    health = health or free_port()
    p, ports = start_serve(repo, log, 3, *extra, options=("--health-port", str(health), *options))
    deadline = time.monotonic() + START_TIMEOUT
    while get(health, "/readyz") != 200:
        assert time.monotonic() < deadline, f"/readyz never 200:\n{log_tail(log)}"
        time.sleep(0.1)
    return p, ports, health


def seq_repo(tmp_path, names=("seq",)) -> str:
    path = tmp_path / "seq.onnx"
    path.write_bytes(seq_model())
    repo = str(tmp_path / "repo")
    for name in names:
        init_repo(str(path), repo, name=name)
    return repo


def stop(p: subprocess.Popen, log: str) -> None:
    pids = children(p.pid)
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(40)
        except subprocess.TimeoutExpired:
            pass
    kill_tree(p, pids)


# ---- without a server -----------------------------------------------------------------------------------------------


def test_plan_runs_explicit_mode_restricted_to_gert_unless_the_user_chose():
    pl = plan([])
    assert pl.control == "gert" and pl.can_reload
    assert "--model-control-mode=explicit" in pl.args and "--load-model=*" in pl.args
    assert pl.repo_header[0] == SUPERVISOR_HEADER and len(pl.repo_header[1]) == 32
    assert (
        restricted_header([a.split("=", 1)[1] for a in pl.args if a.startswith("--http-restricted-api=")])
        == pl.repo_header
    )
    assert "--exit-timeout-secs=30" in pl.args  # tritonserver's default: a stub takes ~1.5 s to unload
    a, b = pl.with_generation(1), pl.with_generation(2)
    prefix = [x for x in a if "shm-region-prefix-name" in x][0]
    assert prefix.startswith("--backend-config=python,shm-region-prefix-name=gert_") and prefix not in b
    assert plan([]).shm_prefix != pl.shm_prefix, "two servers on one host share a shm prefix"

    none = plan(
        ["--model-control-mode=none", "--exit-timeout-secs=3", "--backend-config=python,shm-region-prefix-name=mine_"]
    )
    assert none.control == "none" and not none.can_reload and none.exit_timeout == 3
    assert any("restarts the whole server" in n for n in none.notes)
    assert none.shm_prefix is None and none.with_generation(1) == none.args  # the user's prefix is kept
    assert "--model-control-mode=explicit" not in none.args and "--exit-timeout-secs=30" not in none.args

    mine = plan(["--model-control-mode", "explicit", "--http-restricted-api=model-repository:k=v"])
    assert mine.control == "explicit" and mine.can_reload and mine.repo_header == ("k", "v")
    assert "--load-model=*" not in mine.args

    loads = plan(["--load-model=a"])  # ignored by tritonserver in its default mode: gert loads everything too
    assert "--load-model=a" not in loads.args and loads.notes


def test_replica_ports_and_restart_backoff():
    assert replica_ports((None, None, None), 0) == (8000, 8001, 8002)
    assert replica_ports((None, 9001, None), 2) == (8020, 9001, 8022)
    a = Attempts(Policy(backoff_s=1.0, backoff_max_s=3.0), limit=4)
    assert [a.next_delay() for _ in range(5)] == [0.0, 1.0, 2.0, 3.0, None]


# ---- against tritonserver -------------------------------------------------------------------------------------------


@e2e
def test_killed_tritonserver_is_back_within_30s_and_readyz_not_200_meanwhile(tmp_path):
    repo = seq_repo(tmp_path)
    log = str(tmp_path / "serve.log")
    p, (hp, gp, mp), health = serve(repo, log)
    try:
        (old,) = children(p.pid)
        old_stubs = stub_pids(old, "seq")
        assert infer_ok(gp) is None
        kill_and_wait(old)
        t0 = time.monotonic()
        samples, violations, back = [], [], None
        while time.monotonic() - t0 < BACK_WITHIN:
            code = get(health, "/readyz", timeout=2)
            samples.append(code)
            if code == 200:
                if get(hp, "/v2/health/live", timeout=2) != 200:
                    violations.append(round(time.monotonic() - t0, 2))  # ready while the server is down
                elif infer_ok(gp) is None:
                    back = time.monotonic() - t0
                    break
            time.sleep(0.1)
        assert not violations, f"/readyz said 200 while tritonserver was down at {violations} s"
        assert back is not None, f"not back within {BACK_WITHIN} s; /readyz: {samples[-5:]}\n{log_tail(log)}"
        assert any(c != 200 for c in samples), "/readyz never said the server was down"
        (new,) = children(p.pid)
        assert new != old and all(gone(pid) for pid in old_stubs), "the old server's stubs outlived it"
        assert metric(health, "gert_serve_server_restarts_total") == 1
        text = log_tail(log, 400)
        assert "killed by signal 9 (SIGKILL); restarting it" in text and "Its last lines:" in text
        print(f"tritonserver back and serving {back:.1f} s after SIGKILL")
    finally:
        stop(p, log)


@e2e
def test_killed_stub_is_reloaded_alone_other_models_and_replicas_keep_serving(tmp_path):
    """Two replicas on one host over one repository (own ports, own shared-memory names); the stub of `seq` in
    replica A is killed: A reloads seq (/readyz/seq 503 from the supervisor's first look after the kill until
    then: a probe answered before that look reports the last tick), A's `other` and replica B serve throughout."""
    repo = seq_repo(tmp_path, ("seq", "other"))
    log_a, log_b = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    a, (_, gp_a, _), health_a = serve(repo, log_a)
    b = None
    try:
        b, (_, gp_b, _), health_b = serve(repo, log_b)
        (srv_a,), (srv_b,) = children(a.pid), children(b.pid)
        regions = set()
        for srv in (srv_a, srv_b):
            for pid in stub_pids(srv, "seq"):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    regions.add(f.read().split(b"\0")[2].decode().rsplit("_", 1)[0])
        assert len(regions) == 2 and all(r.startswith("gert_") for r in regions), regions
        (stub,) = stub_pids(srv_a, "seq")
        kill_and_wait(stub)
        t0 = time.monotonic()
        seen_down, back, wrong = False, None, []
        while time.monotonic() - t0 < BACK_WITHIN:
            state = get_json(health_a, "/readyz/seq")
            seen_down |= not state["ready"]
            if state["ready"]:
                err = infer_ok(gp_a)
                if err is None:
                    back = time.monotonic() - t0
                    break
                # ready while the model fails: readiness lied, unless the answer predates the supervisor's first
                # look after the kill (its loop ticks twice a second: until then it still reports the last tick)
                if state.get("stub_deaths", 0) >= 1:
                    wrong.append(err)
            for port in (health_a, health_b):
                assert get(port, "/readyz/other", timeout=2) == 200
            time.sleep(0.2)
        assert not wrong, f"/readyz/seq said 200 while seq failed: {wrong[:2]}\n{log_tail(log_a, 80)}"
        assert back is not None, f"seq not back within {BACK_WITHIN} s:\n{log_tail(log_a)}"
        assert seen_down, "/readyz/seq never said the model was down"
        assert infer_ok(gp_a, "other") is None and infer_ok(gp_b) is None
        assert metric(health_a, 'gert_serve_model_reloads_total{model="seq"}') == 1
        assert metric(health_a, 'gert_serve_stub_deaths_total{model="seq"}') == 1
        assert metric(health_a, 'gert_serve_model_reloads_total{model="other"}') == 0
        assert metric(health_b, 'gert_serve_model_reloads_total{model="seq"}') == 0
        assert metric(health_a, "gert_serve_server_restarts_total") == 0
        assert "stub of instance seq_0_0 died; reloading it" in log_tail(log_a, 400)
        print(f"seq reloaded and serving {back:.1f} s after its stub's SIGKILL")
    finally:
        for p, log in ((a, log_a), (b, log_b)):
            if p is not None:
                stop(p, log)


@e2e
def test_readyz_asks_triton_at_each_probe_not_only_at_the_last_look(tmp_path):
    """A model that goes down between two of the supervisor's looks (here: unloaded through Triton's own API with
    the header gert serve was given) reads 503 on the very next probe, then comes back (gert serve loads it again)."""
    repo = seq_repo(tmp_path, ("seq", "other"))
    log = str(tmp_path / "serve.log")
    key, secret = "X-Test-Repo", "s3cret"
    p, (hp, gp, _), health = serve(repo, log, f"--http-restricted-api=model-repository:{key}={secret}")
    try:
        for _ in range(3):  # three tries: each unload must be seen before the supervisor's next look could see it
            assert get(health, "/readyz/seq") == 200
            req = urllib.request.Request(
                f"http://127.0.0.1:{hp}/v2/repository/models/seq/unload",
                data=b"{}",
                method="POST",
                headers={key: secret},
            )
            with urllib.request.urlopen(req, timeout=CALL_TIMEOUT) as r:
                assert r.status == 200
            assert get(health, "/readyz/seq") == 503, log_tail(log)
            assert get(health, "/readyz") == 503
            assert get(health, "/readyz/other") == 200
            t0 = time.monotonic()
            while not (get(health, "/readyz/seq") == 200 and infer_ok(gp) is None):
                assert time.monotonic() - t0 < BACK_WITHIN, f"seq not back:\n{log_tail(log)}"
                time.sleep(0.1)
    finally:
        stop(p, log)


@e2e
def test_stub_dead_before_the_supervisors_first_look_is_found(tmp_path):
    """gert serve is stopped (SIGSTOP) as soon as it started tritonserver; the stub is killed once the server
    answers, then gert serve continues: the model's config names an instance without a running stub, so it is
    reloaded (a stub never seen alive counts too: the overflow repro kills it within a second of the start)."""
    repo = seq_repo(tmp_path)
    log = str(tmp_path / "serve.log")
    health = free_port()
    p, (hp, gp, _) = run_serve(repo, log, options=("--health-port", str(health)))
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not children(p.pid):
            assert p.poll() is None and time.monotonic() < deadline, log_tail(log)
            time.sleep(0.002)
        os.kill(p.pid, signal.SIGSTOP)
        (srv,) = children(p.pid)
        while get(hp, "/v2/health/live", timeout=1) != 200:
            assert not gone(srv) and time.monotonic() < deadline, log_tail(log)
            time.sleep(0.05)
        (stub,) = stub_pids(srv, "seq")
        os.kill(stub, signal.SIGKILL)
        os.kill(p.pid, signal.SIGCONT)
        t0 = time.monotonic()
        while not (get(health, "/readyz/seq", timeout=2) == 200 and infer_ok(gp) is None):
            assert time.monotonic() - t0 < BACK_WITHIN, f"seq not back:\n{log_tail(log)}"
            time.sleep(0.2)
        assert metric(health, 'gert_serve_model_reloads_total{model="seq"}') == 1
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
        stop(p, log)


@e2e
def test_users_none_mode_is_respected_and_a_dead_stub_restarts_the_server(tmp_path):
    repo = seq_repo(tmp_path)
    log = str(tmp_path / "serve.log")
    p, (hp, gp, _), health = serve(repo, log, "--model-control-mode=none")
    try:
        (srv,) = children(p.pid)
        assert "cannot be reloaded alone" in log_tail(log, 400) or "restarts the whole server" in log_tail(log, 400)
        (stub,) = stub_pids(srv, "seq")
        os.kill(stub, signal.SIGKILL)
        t0 = time.monotonic()
        while time.monotonic() - t0 < BACK_WITHIN:
            if get(health, "/readyz", timeout=2) == 200 and children(p.pid) != [srv] and infer_ok(gp) is None:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"not back within {BACK_WITHIN} s:\n{log_tail(log)}")
        assert metric(health, "gert_serve_server_restarts_total") == 1
        assert "cannot reload it" in log_tail(log, 400)
    finally:
        stop(p, log)


def slow_model(layers: int = 120, width: int = 512) -> bytes:
    """x f32[n, 512] -> y: ``layers`` MatMul + Tanh (identity weights): a request of 4096 rows takes seconds."""
    nodes, prev = [], "x"
    for i in range(layers):
        nodes += [helper.make_node("MatMul", [prev, "w"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    w = numpy_helper.from_array(np.eye(width, dtype=np.float32), "w")
    return make_model(nodes, [vi("x", np.float32, ["n", width])], [vi("y", np.float32, ["n", width])], [w], name="slow")


@e2e
def test_sigterm_drains_readyz_503_at_once_in_flight_request_finishes(tmp_path):
    path = tmp_path / "slow.onnx"
    path.write_bytes(slow_model())
    repo = str(tmp_path / "repo")
    init_repo(str(path), repo, name="slow", max_batch_size=4096)
    log = str(tmp_path / "serve.log")
    p, (hp, gp, _), health = serve(repo, log, "--exit-timeout-secs=30", options=("--drain-delay", "1"))
    pids = children(p.pid)
    result: dict = {}

    def slow_request() -> None:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{gp}")
        x = np.full((4096, 512), 0.001, np.float32)
        i = grpcclient.InferInput("x", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        t = time.monotonic()
        try:
            r = client.infer("slow", [i], client_timeout=60)
            result["y"], result["s"] = r.as_numpy("y"), time.monotonic() - t
        except Exception as e:  # noqa: BLE001
            result["error"] = repr(e)
        finally:
            client.close()

    try:
        th = threading.Thread(target=slow_request)
        th.start()
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert get(health, "/readyz") == 503, "readiness must turn 503 as soon as gert serve drains"
        assert get_json(health, "/readyz")["phase"] == "draining"
        assert get(health, "/healthz") == 200
        th.join(70)
        assert "error" not in result, f"the request in flight failed: {result.get('error')}\n{log_tail(log)}"
        np.testing.assert_allclose(result["y"], np.tanh(np.full((4096, 512), 0.001, np.float32)), rtol=1e-3)
        code = p.wait(40)
        assert code == 0, f"gert serve exited with {code}:\n{log_tail(log)}"
        assert all(gone(pid) for pid in pids)
        assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"gert_{p.pid}_")], "shm regions left"
        print(f"in-flight request finished after {result['s']:.1f} s, SIGTERM at 0.3 s")
    finally:
        kill_tree(p, pids)


@e2e
@pytest.mark.parametrize("script", ["serve_json_shape_bad_alloc.py", "serve_shape_overflow_kills_stub.py"])
def test_security_repro_exits_0(script, tmp_path):
    path = os.path.join(REPROS, script)
    if not os.path.isfile(path):
        pytest.skip(f"{path} not here (set GERT_SECURITY_REPROS)")
    r = subprocess.run(
        [sys.executable, path],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
    )
    assert r.returncode == 0, f"{script} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-2000:]}"


def test_a_taken_default_health_port_is_said_and_serving_goes_on_an_asked_one_is_refused(tmp_path):
    """The health endpoint defaults to the metrics port + 1, which the user did not pick and may be taken: gert serve
    says so and serves without it (a test that gave three free ports failed otherwise); an asked --health-port that
    is taken fails the start, naming it."""
    import socket

    repo, log = seq_repo(tmp_path), str(tmp_path / "serve.log")
    for _ in range(20):  # three free ports whose metrics port + 1 is free too, then taken here
        ports = [free_port() for _ in range(3)]
        blocker = socket.socket()
        try:
            blocker.bind(("127.0.0.1", ports[2] + 1))
            break
        except OSError:
            blocker.close()
    blocker.listen(1)
    try:
        cmd = [
            sys.executable,
            "-m",
            "gert",
            "serve",
            repo,
            "--http-port",
            str(ports[0]),
            "--grpc-port",
            str(ports[1]),
            "--metrics-port",
            str(ports[2]),
            "--",
            "--exit-timeout-secs=5",
        ]
        with open(log, "wb") as out:
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while get(ports[0], "/v2/health/ready") != 200:
                assert p.poll() is None and time.monotonic() < deadline, log_tail(log)
                time.sleep(0.2)
            assert infer_ok(ports[1]) is None
            assert f"default port 127.0.0.1:{ports[2] + 1}" in log_tail(log, 200)
        finally:
            stop(p, log)
        asked = subprocess.run(
            cmd[:4] + ["--health-port", str(ports[2] + 1)] + cmd[4:], capture_output=True, text=True, timeout=60
        )
        assert asked.returncode == 2 and "--health-port" in asked.stderr, asked.stderr
    finally:
        blocker.close()


@e2e
def test_the_regions_of_a_gert_serve_killed_outright_are_removed_by_the_next_one(tmp_path):
    """kill -9 of gert serve and its server (as the OOM killer would) leaves its stubs' shared-memory regions and its
    lock in /dev/shm; the next gert serve removes them as it starts, and its own when it ends."""
    repo = seq_repo(tmp_path)
    log_a, log_b = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    a, _, _ = serve(repo, log_a)
    kill_tree(a, children(a.pid))

    def others_removed() -> list:
        """Lines of other gert serves' logs saying they removed a's files: any gert serve starting removes them, and
        one another test started meanwhile (xdist runs other modules' servers beside this one) may be first."""
        return [
            line
            for path in glob.glob(os.path.join(tmp_path.parent.parent, "**", "*.log"), recursive=True)
            if path not in (log_a, log_b)
            for line in open(path, errors="replace")
            if f"(/dev/shm/gert_{a.pid}_" in line
        ]

    left = [f for f in os.listdir("/dev/shm") if f.startswith(f"gert_{a.pid}_")]
    if not (any(f.endswith("_lock") for f in left) and len(left) > 1):  # the lock and the stub's regions, unless
        deadline = time.monotonic() + 10  # another gert serve is removing them now (the lock goes last)
        while not others_removed():
            assert time.monotonic() < deadline, left
            time.sleep(0.1)
    b, _, _ = serve(repo, log_b)
    try:
        assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"gert_{a.pid}_")], log_tail(log_b)
        with open(log_b) as f:
            removed_by_b = f"shared-memory file(s) of a gert serve that is gone (/dev/shm/gert_{a.pid}_" in f.read()
        others = others_removed()
        assert removed_by_b or others, log_tail(log_b)
        assert [f for f in os.listdir("/dev/shm") if f.startswith(f"gert_{b.pid}_") and f.endswith("_lock")]
    finally:
        stop(b, log_b)
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"gert_{b.pid}_")], "gert serve left its files"
