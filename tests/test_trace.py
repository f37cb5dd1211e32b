"""gert.trace (issue 25): a per-request timeline of every stream as Chrome trace-event JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert.core import trace as core_trace
from models import mlp_model

pytestmark = RUNTIME

STAGES = ("h2d", "execute", "d2h")


def _x(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def model():
    """Two streams, one static graph (batch 4): a 4-row request runs alone on a stream (no dynamic batching)."""
    with gert.load(mlp_model(1), streams=2, gears={"batch": [4]}) as m:
        m.warmup()
        yield m


def _x_events(events: list, name: str = None) -> list:
    return [e for e in events if e["ph"] == "X" and (name is None or e["name"] == name)]


def _inside(inner: dict, outer: dict, slack_us: float = 1.0) -> bool:
    return outer["ts"] - slack_us <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + slack_us


def test_schema_every_event_complete_and_every_track_named(model, tmp_path):
    path = tmp_path / "t.json"
    with gert.trace(path) as t:
        for i in range(3):
            model.run({"x": _x(4, i)})
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms" and data["traceEvents"] == t.events
    events = data["traceEvents"]
    xs = _x_events(events)
    assert xs
    for e in xs:
        assert {"name", "ts", "dur", "pid", "tid"} <= set(e), e
        assert e["dur"] >= 0
    named_threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    named_procs = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] in ("X", "s", "f")}
    assert used <= named_threads and {p for p, _ in used} <= named_procs
    names = {e["name"] for e in xs}
    assert {"request", "validate", "queue", "graph", "run", "synchronize", *STAGES} <= names
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert len([e for e in flows if e["ph"] == "s"]) == 3 and len([e for e in flows if e["ph"] == "f"]) == 3
    assert core_trace.active is None  # off again


@pytest.mark.hostnpu_only
def test_stages_nest_in_the_request_and_sum_to_its_latency(model):
    """Each run is held 20 ms on the device (the host NPU's hang fault, with a duration), so that the request's
    time is the pipeline's, not the loaded test machine's scheduling noise around a 0.1 ms run."""
    gert.inject_fault("hang", duration_ms=20, count=5)
    try:
        with gert.trace() as t:
            for i in range(5):
                model.run({"x": _x(4, i)})
    finally:
        gert.clear_faults()
    events = t.events
    requests = _x_events(events, "request")
    assert len(requests) == 5
    for req in requests:
        mine = [e for e in _x_events(events) if e is not req and _inside(e, req)]
        by_name = {}
        for e in mine:
            by_name.setdefault(e["name"], []).append(e)
        for name in ("validate", "queue", "graph", "prepare", *STAGES, "synchronize", "run"):
            assert len(by_name.get(name, [])) == 1, (name, by_name.keys())
        run = by_name["run"][0]
        for name in ("graph", "prepare", *STAGES):
            assert _inside(by_name[name][0], run), name
        # the caller's stages and the stream's run account for the request's latency: within 10%, or 5 ms where the
        # OS preempted the caller between stages (seen under the parallel suite: 28.2 of 32.4 ms); a stage left out
        # (the 20 ms run) is far more
        total = sum(by_name[n][0]["dur"] for n in ("validate", "queue", "run"))
        assert abs(total - req["dur"]) <= max(0.1 * req["dur"], 5000.0), (total, req["dur"])
        # the device's stages account for the stream's run (graph selection, buffers, the stages)
        parts = sum(by_name[n][0]["dur"] for n in ("graph", "prepare", *STAGES))
        assert parts <= run["dur"] * 1.001 + 1.0


def test_two_streams_overlap_one_stream_never_overlaps_itself(model):
    """Both streams are held (a host function each, waiting for one event) until a request has taken each of them;
    each request's run then hangs 1 s on the device (the host NPU's hang fault): released together, the two execute
    spans overlap; on one stream they never do. (On the host NPU a request waits for its stream to go idle before it
    launches anything, so the hold is seen as both streams taken, not as launched work.)"""
    workers = model.pool.workers
    gate = threading.Event()
    gert.inject_fault("hang", duration_ms=1000, count=2)
    try:
        with gert.trace() as t:
            for w in workers:
                w.stream.launch_host_func(lambda: gate.wait(60))  # the one gate
            outs = []
            clients = [threading.Thread(target=lambda i=i: outs.append(model.run({"x": _x(4, i)}))) for i in range(2)]
            for c in clients:
                c.start()
            deadline = time.monotonic() + 30
            while model.pool.idle() > 0:  # each request has taken a stream (and waits behind its hold)
                assert time.monotonic() < deadline, "the two requests never took the two streams"
                time.sleep(0.005)
            gate.set()  # release both streams at once
            for c in clients:
                c.join(30)
            assert len(outs) == 2
            for i in range(6):  # and a few more, in turn
                model.run({"x": _x(4, i)})
    finally:
        gert.clear_faults()
    execs = _x_events(t.events, "execute")
    by_track: dict = {}
    for e in execs:
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    assert len(by_track) == 2
    held = sorted((e for e in execs if e["dur"] >= 250_000), key=lambda e: e["ts"])
    assert len(held) == 2 and (held[0]["pid"], held[0]["tid"]) != (held[1]["pid"], held[1]["tid"])
    assert held[1]["ts"] < held[0]["ts"] + held[0]["dur"], "the held streams' executes do not overlap"
    for spans in by_track.values():
        spans.sort(key=lambda e: e["ts"])
        for a, b in zip(spans, spans[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + 1.0, "one stream ran two requests at once"


def test_background_compile_on_the_compiler_track():
    with gert.load(mlp_model(2), streams=1, shape_policy={"batch": "auto"}, hot_after=2) as m:
        m.warmup()
        with gert.trace() as t:
            for i in range(4):
                m.run({"x": _x(3, i)})
            _wait_background(m)
    compiles = _x_events(t.events, "compile")
    assert compiles, [e["name"] for e in _x_events(t.events)]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in t.events if e["ph"] == "M" and e["name"] == "thread_name"}
    track = (compiles[0]["pid"], compiles[0]["tid"])
    assert names[track].startswith("compiler")
    assert all((e["pid"], e["tid"]) != track for e in _x_events(t.events) if e["name"] != "compile")


def _wait_background(m, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while m.stats()["background_compiles"] < 1:
        assert time.monotonic() < deadline, "no background compile"
        time.sleep(0.01)


@pytest.mark.hostnpu_only
def test_a_fault_shows_as_an_error_event(model):
    gert.clear_faults()
    gert.inject_fault("execute", count=1)
    try:
        with gert.trace() as t:
            with pytest.raises(gert.GertError):
                model.run({"x": _x(4)})
            model.run({"x": _x(4, 1)})  # the stream serves again
    finally:
        gert.clear_faults()
    errors = [e for e in _x_events(t.events) if e.get("cat") == "error"]
    assert any(e["name"] == "fault" and e["args"]["code"] == 507015 for e in errors), errors
    assert any(e["name"] == "request" for e in errors)
    fault = next(e for e in errors if e["name"] == "fault")
    assert fault["pid"] != core_trace.HOST_PID  # on the stream's track


def test_off_records_nothing_and_stats_show_stages(model):
    n = len(core_trace.last.events) if core_trace.last is not None else 0
    model.run({"x": _x(4)})
    assert (len(core_trace.last.events) if core_trace.last is not None else 0) == n
    with gert.trace():
        model.run({"x": _x(4)})
    stages = model.stats()["stages"]
    assert {"execute", "h2d", "d2h", "run"} <= set(stages)
    assert stages["execute"]["count"] == 1 and stages["execute"]["p99_ms"] >= stages["execute"]["mean_ms"] > 0


def test_unfused_trace_has_one_execute_span(model):
    with gert.trace(stages=False) as t:
        model.run({"x": _x(4)})
    names = [e["name"] for e in _x_events(t.events)]
    assert names.count("execute") == 1 and "h2d" not in names


def test_a_trace_file_is_whole_or_absent_never_half_written(model, tmp_path, monkeypatch):
    """A reader polling for the file (a viewer, Triton's finalize writing while a client waits) never reads a
    truncated JSON: the write goes to a temporary file renamed over the path, and a failed write leaves the previous
    trace as it was and no temporary file behind."""
    path = tmp_path / "run.json"
    with gert.trace(path) as t:
        model.run({"x": _x(4)})
    first = path.read_text()
    assert json.loads(first)["traceEvents"]

    def half_then_fail(data, f):
        f.write(json.dumps(data)[:100])
        raise OSError("disk full")

    monkeypatch.setattr(gert.tracing.json, "dump", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        t.write(path, {"model": "m"})
    assert path.read_text() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    monkeypatch.undo()
    t.write(path, {"model": "m"})
    assert json.loads(path.read_text())["otherData"]["model"] == "m"


def test_one_trace_at_a_time():
    with gert.trace():
        with pytest.raises(gert.GertError, match="another gert.trace"):
            gert.trace().start()


def test_bench_writes_trace_and_timeline(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(mlp_model(3))
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gert",
            "bench",
            str(path),
            "--streams",
            "1,2",
            "--batch",
            "4",
            "--iterations",
            "40",
            "--concurrency",
            "4",
            "--trace",
            str(out),
            "--timeline",
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert data["displayTimeUnit"] == "ms"
    assert len(_x_events(data["traceEvents"], "request")) == 40
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- gert_triton: parameter trace_file, GERT_TRACE (unit: the fake pb_utils; the real server: test_trace_triton_e2e)
def _triton_model(pb, tmp_path, parameters: dict):
    from gert_triton import TritonPythonModel

    mdir = tmp_path / "mlp"
    (mdir / "1").mkdir(parents=True)
    (mdir / "1" / "model.onnx").write_bytes(mlp_model(4))
    pb.set_model_dir(str(mdir))
    raw = {k: {"string_value": v} for k, v in dict(parameters, streams="1").items()}
    cfg = TritonPythonModel.auto_complete_config(
        pb.ModelConfig(pb.default_config("mlp", max_batch_size=8, parameters=raw))
    ).as_dict()
    m = TritonPythonModel()
    m.initialize(
        {
            "model_config": json.dumps(cfg),
            "model_instance_kind": "CPU",
            "model_instance_name": "mlp_0_0",
            "model_instance_device_id": "0",
            "model_repository": str(mdir),
            "model_version": "1",
            "model_name": "mlp",
        }
    )
    return m, mdir


def test_triton_trace_names_the_batch_each_request_rode_in(monkeypatch, tmp_path):
    import fake_pb_utils

    pb = fake_pb_utils.install(monkeypatch)
    m, mdir = _triton_model(pb, tmp_path, {"trace_file": "trace.json"})
    try:
        reqs = [
            pb.InferenceRequest([pb.Tensor("x", _x(rows, rows))], ["logits"], request_id=f"r{rows}")
            for rows in (1, 2, 3)
        ]
        responses = m.execute(reqs)
        assert all(not r.has_error() for r in responses)
    finally:
        m.finalize()
    data = json.loads((mdir / "trace.json").read_text())
    events = data["traceEvents"]
    batches = _x_events(events, "triton_batch")
    assert len(batches) == 1 and batches[0]["args"]["request_ids"] == ["r1", "r2", "r3"]
    assert batches[0]["args"]["rows"] == [1, 2, 3]
    execute = _x_events(events, "triton_execute")[0]
    assert _inside(batches[0], execute)
    assert [e for e in _x_events(events, "execute") if _inside(e, batches[0])]  # its run on the stream
    assert data["otherData"]["model"] == "mlp" and data["otherData"]["wall_clock_origin_ns"] > 0


def test_triton_env_var_traces_every_model_and_a_bad_trace_file_names_the_key(monkeypatch, tmp_path):
    import fake_pb_utils
    from gert_triton.config import ConfigError, parse_parameters

    with pytest.raises(ConfigError, match="parameter 'trace_file'.*got ' '"):
        parse_parameters({"trace_file": {"string_value": " "}})
    with pytest.raises(ConfigError, match="parameter 'trace_file'"):
        parse_parameters({"trace_file": {"string_value": "traces/"}})
    pb = fake_pb_utils.install(monkeypatch)
    monkeypatch.setenv("GERT_TRACE", str(tmp_path / "traces"))
    m, _ = _triton_model(pb, tmp_path, {})
    try:
        m.execute([pb.InferenceRequest([pb.Tensor("x", _x(2))], ["logits"], request_id="only")])
    finally:
        m.finalize()
    (written,) = list((tmp_path / "traces").iterdir())
    assert written.name.startswith("mlp.mlp_0_0.")
    batches = _x_events(json.loads(written.read_text())["traceEvents"], "triton_batch")
    assert batches[0]["args"]["request_ids"] == ["only"]


def test_dynamic_batching_shows_which_requests_rode_together():
    """One stream held (a host function waiting for an event) while a first request runs behind the hold and two
    more queue: released, the two queued run as one batch, shown on the stream's track with their rows."""
    with gert.load(mlp_model(6), streams=1, gears={"batch": [1, 2, 4]}) as m:
        m.warmup()
        gate = threading.Event()
        (w,) = m.pool.workers
        w.stream.launch_host_func(lambda: gate.wait(30))
        outs: list = []
        with gert.trace() as t:
            first = threading.Thread(target=lambda: outs.append(m.run({"x": _x(1, 0)})))
            first.start()
            deadline = time.monotonic() + 30
            while m.pool.queue.idle():  # the first request holds the stream
                assert time.monotonic() < deadline
                time.sleep(0.002)
            rest = [threading.Thread(target=lambda i=i: outs.append(m.run({"x": _x(1, i)}))) for i in (1, 2)]
            for c in rest:
                c.start()
            while m.pool.queue.waiting() < 2:  # both queued for the stream
                assert time.monotonic() < deadline
                time.sleep(0.002)
            gate.set()
            for c in [first, *rest]:
                c.join(30)
        assert len(outs) == 3
    batches = _x_events(t.events, "batch")
    assert any(b["args"]["requests"] == 2 and b["args"]["rows"] == [1, 1] for b in batches), batches
    assert all(b["pid"] != core_trace.HOST_PID for b in batches)  # on the stream's track


@pytest.mark.hostnpu_only
def test_a_timeout_shows_as_an_error_event_and_the_stream_serves_again(model):
    gert.clear_faults()
    gert.inject_fault("hang", duration_ms=0, count=1)  # until the stream is aborted
    try:
        with gert.trace() as t:
            with pytest.raises(gert.RequestTimeout):
                model.run({"x": _x(4)}, timeout=0.2)
            model.run({"x": _x(4, 1)})
    finally:
        gert.clear_faults()
    timeouts = [e for e in _x_events(t.events, "timeout") if e.get("cat") == "error"]
    assert len(timeouts) == 1 and timeouts[0]["args"]["code"] == 507046
    assert len([e for e in _x_events(t.events, "run")]) == 1  # the second request ran
