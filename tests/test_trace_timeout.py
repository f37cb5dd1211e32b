"""A hung request under gert.trace(stages=True) (the default) ends at its timeout, as an untraced one does (issue 43):
the traced run is still the staged one (h2d / execute / d2h timed by the stream), its waits are bounded by the
request's timeout and end on the watchdog's abort; the request raises RequestTimeout and the stream serves again.
Hangs come from the host NPU's fault injection (gert.inject_fault)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert.errors import RequestTimeout
from models import scale_model

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # injects faults into the host NPU

STAGES = ("h2d", "execute", "d2h")
DEADLINE_S = 30  # the hang lasts until aborted: a wait the timeout does not end never returns


@pytest.fixture(autouse=True)
def _no_faults_left():
    gert.clear_faults()
    yield
    gert.clear_faults()


def _x(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)


def _stages(events: list) -> list:
    """The stage spans of the trace's runs on the streams, in order: (name, clock)."""
    return [(e["name"], e.get("args", {}).get("clock")) for e in events if e["ph"] == "X" and e["name"] in STAGES]


@pytest.fixture
def model(device):
    """One stream, one static graph (batch 4), every request bounded by 0.3 s."""
    m = gert.load(scale_model(2.0, shape=("batch", 4)), gears={"batch": [4]}, request_timeout_s=0.3)
    m.warmup()
    yield m
    m.close()


def test_a_hung_traced_request_times_out_and_the_stream_serves_again(model):
    gert.inject_fault("hang", duration_ms=0)  # until the stream is aborted
    x = _x(4, 1)
    with gert.trace() as t:
        t0 = time.monotonic()
        with pytest.raises(RequestTimeout) as e:  # (a wait that the timeout does not end fails here, at the deadline)
            model.submit({"x": _x(4, 0)}).result(DEADLINE_S)
        waited = time.monotonic() - t0
        np.testing.assert_array_equal(model.run({"x": x})["y"], x * 2)  # the same stream, aborted and reused
    assert waited < DEADLINE_S
    assert "0.3 s on device 0 stream 0" in str(e.value) and "507046" in str(e.value)
    # both requests ran staged (each stage timed on the stream), not as the fused call: the second one's stages all
    # there; the hung one's stages are not recorded (it raised at its synchronize)
    assert _stages(t.events) == [(s, "device") for s in STAGES]
    timeouts = [e for e in t.events if e.get("cat") == "error" and e["name"] == "timeout"]
    assert len(timeouts) == 1 and timeouts[0]["args"]["code"] == 507046
    st = model.stats()
    assert st["timeouts"] == 1 and st["aborted_streams"] >= 1 and st["failed_tasks"] == 0


def test_a_per_request_timeout_bounds_a_traced_run(model):
    """submit(timeout=) under a trace: the request's own timeout, not the model's, bounds the staged waits."""
    gert.inject_fault("hang", duration_ms=120_000)  # without the abort the run would succeed, 2 minutes late
    x = _x(4, 2)
    with gert.trace(stages=True):
        t0 = time.monotonic()
        with pytest.raises(RequestTimeout, match="0.1 s"):
            model.submit({"x": x}, timeout=0.1).result(DEADLINE_S)
        assert time.monotonic() - t0 < DEADLINE_S
        for i in range(3):  # the stream serves again, request after request
            xi = _x(4, 10 + i)
            np.testing.assert_array_equal(model.run({"x": xi})["y"], xi * 2)
    assert model.stats()["timeouts"] == 1
