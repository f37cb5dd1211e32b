"""gert serve's readiness against the supervisor's own look, at the moments they overlap (no server: the look's
inputs are a scripted repository index and real processes standing in for stubs). A probe may run while the
supervisor finds a stub dead; it must then say 503, or 200 with the record from before the look, never 200 beside a
newer record (tests/test_serve_supervisor.py's killed-stub test saw 200 with the death already counted and then
Triton's NOT_FOUND of the reload: the race these pin)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gert_triton import stubs as stub_procs
from gert_triton.health import Health
from gert_triton.model_watch import ModelWatch
from gert_triton.serve_policy import Policy
from gert_triton.triton_args import plan

READY_INDEX = [{"name": "seq", "version": "1", "state": "READY", "reason": ""}]
PYTHON_CONFIG = {"backend": "python", "instance_group": [{"name": "seq_0", "kind": "KIND_CPU", "count": 1}]}


class ScriptedTriton:
    """Triton's HTTP API as ModelWatch uses it: the index says READY, the config names one instance."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def index(self, timeout: float = 5.0) -> list:
        return READY_INDEX

    def config(self, model: str, timeout: float = 5.0) -> dict:
        return PYTHON_CONFIG

    def unload(self, model: str, timeout: float = 60.0) -> None:
        self.calls.append(f"unload {model}")

    def load(self, model: str, timeout: float = 600.0) -> None:
        self.calls.append(f"load {model}")


@pytest.fixture
def stub_process():
    """A live process as a stub of seq's one instance (pid and start time read as stub_procs reads them)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(f"/proc/{p.pid}/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19])
    yield p, stub_procs.Stub(p.pid, started, "seq", "seq_0_0")
    p.kill()
    p.wait()


def test_a_probe_during_the_look_that_finds_a_dead_stub_says_not_ready(monkeypatch, stub_process):
    """The look lists the running stubs, finds seq's gone and marks seq down: a probe at any point of that look (here:
    at the moment the death is counted, the state still "ready") must say 503. It said 200 when the look published
    its list of running stubs (without the dead one) before marking the model down."""
    proc, stub = stub_process
    health = Health()
    watch = ModelWatch(
        plan(["--model-repository=unused"]),
        Policy(),
        health,
        log=lambda line: None,
        wake=lambda: None,
        restart_server=lambda why: pytest.fail(why),
    )
    health.check = lambda model=None: all(stub_procs.alive(s) for s in watch.stubs if model in (None, s.model))
    client = ScriptedTriton()
    watch.reset(client, 1)  # type: ignore[arg-type]
    running = [[stub]]
    monkeypatch.setattr(stub_procs, "stubs_of", lambda server_pid: running[0])
    watch.tick(0)
    assert health.model_ready("seq") is True and health.ready()

    proc.kill()
    proc.wait()  # gone: no longer among the running stubs
    running[0] = []
    probes = []
    count = health.count

    def count_and_probe(name: str, what: str) -> None:
        probes.append((health.models[name].state, health.model_report(name), health.snapshot()["ready"]))
        count(name, what)

    monkeypatch.setattr(health, "count", count_and_probe)
    watch.tick(0)
    ((state, report, ready_all),) = probes
    assert state == "ready"  # the probe came before the look marked the model down
    assert report["ready"] is False and ready_all is False, report
    assert health.models["seq"].state == "reloading" and health.models["seq"].stub_deaths == 1
    assert health.model_ready("seq") is False


def test_a_ready_verdict_comes_with_the_record_it_was_given_on():
    """The probe's check asks Triton (milliseconds); a look that marks the model down meanwhile makes the verdict
    503, and a 200's body is the record read before the check, never a newer one with the death counted."""
    health = Health()
    health.update(phase="serving")
    health.set_model("seq", state="ready", stubs=1)

    def check_while_the_stub_is_found_dead(model=None) -> bool:
        health.count("seq", "stub_deaths")
        health.set_model("seq", state="reloading", reason="the Python stub of instance seq_0_0 died")
        return True  # Triton answered 200: it still does for a dead stub

    health.check = check_while_the_stub_is_found_dead
    report = health.model_report("seq")
    assert report == {
        "ready": False,
        "model": "seq",
        "state": "ready",
        "stubs": 1,
        "reloads": 0,
        "stub_deaths": 0,
        "reason": "",
    }
    health.check = lambda model=None: True
    assert health.model_report("seq")["ready"] is False  # reloading now
    health.set_model("seq", state="ready", reason="")
    assert health.model_report("seq") == {**report, "ready": True, "stub_deaths": 1}
    assert health.model_report("nope") is None and health.model_ready("nope") is None
