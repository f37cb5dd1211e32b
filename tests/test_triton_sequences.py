"""gert_triton with Triton's sequence batcher (issue 14): one device-resident gert.Sequence per correlation id.

Unit tests drive execute() with the fake pb_utils as Triton 2.51 calls it (shared/docs/triton-sequence-batching.md):
controls as [1, 1] inputs, Direct's null requests, START on a live id, END inside a batch, an unknown id, the idle
timer, a bad request in a batch. End to end: the real tritonserver with tritonclient over gRPC and HTTP, results
against ONNX Runtime with the state fed back by hand, concurrent sequences batched by the Oldest strategy, an idle
timeout, an END inside a batch, and the active-sequences metric.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import numpy as np
import pytest

import fake_pb_utils
from _helpers import RUNTIME
from gert_triton import TritonPythonModel
from gert_triton.model import onnx_io
from gert_triton.repo import config_pbtxt, init_repo
from gert_triton.server import pytriton_root
from recurrent_models import HIDDEN, INPUT, gru_model, reference, run_threads

pytestmark = RUNTIME

GRU = gru_model()
STATE = {"h": "h_out"}
CONTROLS = [
    {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
    {"name": "END", "control": [{"kind": "CONTROL_SEQUENCE_END", "int32_false_true": [0, 1]}]},
    {"name": "READY", "control": [{"kind": "CONTROL_SEQUENCE_READY", "int32_false_true": [0, 1]}]},
    {"name": "CORRID", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_UINT64"}]},
]


def step_x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 1, INPUT)).astype(np.float32)  # [triton batch, 1, 4]


class Reference:
    """ONNX Runtime per sequence, the state fed back by hand."""

    def __init__(self):
        self.states: dict = {}

    def start(self, key) -> None:
        self.states[key] = {"h": np.zeros((1, 1, HIDDEN), np.float32)}

    def step(self, key, x: np.ndarray) -> np.ndarray:
        y = reference(GRU, [{"x": np.moveaxis(x, 0, 1)}], self.states[key], STATE)[0]["y"]
        return np.moveaxis(y, 1, 0)  # back to Triton's layout [batch, 1, H]


# ---- unit: execute() as the sequence batcher calls it ---------------------------------------------------------------


def load_model(pb, model_dir, fields: dict) -> tuple:
    """(model, config): auto_complete_config and initialize, as Triton runs them."""
    pb.set_model_dir(str(model_dir))
    cfg = TritonPythonModel.auto_complete_config(pb.ModelConfig(pb.default_config("gru", **fields))).as_dict()
    m = TritonPythonModel()
    m.initialize(
        {
            "model_config": json.dumps(cfg),
            "model_instance_kind": "CPU",
            "model_instance_name": "gru_0_0",
            "model_instance_device_id": "0",
            "model_repository": str(model_dir),
            "model_version": "1",
            "model_name": "gru",
        }
    )
    return m, cfg


# max_sequence_idle_microseconds of the unit tests' model: long enough that no sequence goes idle between two steps
# of a test on a busy machine (at 0.3 s they did); the idle-timer test sets its own short one
IDLE_US = 600_000_000


@pytest.fixture
def seqmodel(request, monkeypatch, tmp_path):
    idle_us = getattr(request, "param", IDLE_US)
    pb = fake_pb_utils.install(monkeypatch)
    d = tmp_path / "gru"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(GRU)
    fields = {
        "max_batch_size": 8,
        "sequence_batching": {"max_sequence_idle_microseconds": str(idle_us), "control_input": CONTROLS},
        "parameters": {
            "state": {"string_value": "h:h_out"},
            "batch_dim": {"string_value": "N"},
            "streams": {"string_value": "1"},
        },
    }
    m, cfg = load_model(pb, d, fields)
    yield pb, m, cfg
    m.finalize()


def seq_request(pb, key, x, start=False, end=False, ready=True, flags=True, outputs=("y",)):
    tensors = [pb.Tensor("x", x)]
    for name, v in (("START", start), ("END", end), ("READY", ready)):
        tensors.append(pb.Tensor(name, np.array([[int(v)]], np.int32)))
    tensors.append(pb.Tensor("CORRID", np.array([[key]], np.uint64)))
    f = (1 if start else 0) | (2 if end else 0) if flags else 0
    return pb.InferenceRequest(tensors, list(outputs), correlation_id=key, flags=f)


def controls_only(request):
    request._correlation_id = 0
    return request


def null_request(pb, x):
    return seq_request(pb, 0, x, ready=False, flags=False)


def y_of(response) -> np.ndarray:
    assert not response.has_error(), response.error().message()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}["y"]


def test_autocomplete_lists_only_step_inputs_and_non_state_outputs(seqmodel):
    _, _, cfg = seqmodel
    assert [(i["name"], i["dims"]) for i in cfg["input"]] == [("x", [1, INPUT])]
    assert [(o["name"], o["dims"]) for o in cfg["output"]] == [("y", [1, HIDDEN])]
    assert "dynamic_batching" not in cfg  # Triton takes sequence_batching or dynamic_batching, never both


def test_interleaved_sequences_nulls_start_again_and_end_inside_a_batch(seqmodel):
    pb, m, _ = seqmodel
    ref = Reference()
    seed = iter(range(10_000))
    # A and B start; a Direct null request sits in slot 0
    xa, xb, xn = step_x(next(seed)), step_x(next(seed)), step_x(next(seed))
    ref.start(101), ref.start(202)
    rs = m.execute([null_request(pb, xn), seq_request(pb, 101, xa, start=True), seq_request(pb, 202, xb, start=True)])
    assert len(rs) == 3 and not rs[0].has_error() and rs[0].output_tensors() == []
    np.testing.assert_allclose(y_of(rs[1]), ref.step(101, xa), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_of(rs[2]), ref.step(202, xb), rtol=1e-5, atol=1e-6)
    assert m.stateful.active == 2
    for k in range(55):  # many steps, both in one batch (one graph run each time)
        xa, xb = step_x(next(seed)), step_x(next(seed))
        before = sum(g["hits"] for g in m.model.stats()["gears"].values())
        rs = m.execute([seq_request(pb, 202, xb), seq_request(pb, 101, xa)])
        assert sum(g["hits"] for g in m.model.stats()["gears"].values()) - before == 1
        np.testing.assert_allclose(y_of(rs[0]), ref.step(202, xb), rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
        np.testing.assert_allclose(y_of(rs[1]), ref.step(101, xa), rtol=1e-5, atol=1e-6, err_msg=f"step {k}")
    # START on a live id resets it; END of A inside a batch with B
    xa, xb = step_x(next(seed)), step_x(next(seed))
    ref.start(101)
    rs = m.execute([seq_request(pb, 101, xa, start=True), seq_request(pb, 202, xb)])
    np.testing.assert_allclose(y_of(rs[0]), ref.step(101, xa), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_of(rs[1]), ref.step(202, xb), rtol=1e-5, atol=1e-6)
    xa, xb = step_x(next(seed)), step_x(next(seed))
    rs = m.execute([seq_request(pb, 202, xb), seq_request(pb, 101, xa, end=True)])
    np.testing.assert_allclose(y_of(rs[1]), ref.step(101, xa), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_of(rs[0]), ref.step(202, xb), rtol=1e-5, atol=1e-6)
    assert m.stateful.active == 1
    # A ended: its next step gets its own error, B in the same batch is served
    xa, xb = step_x(next(seed)), step_x(next(seed))
    rs = m.execute([seq_request(pb, 101, xa), seq_request(pb, 202, xb, end=True)])
    assert rs[0].has_error() and rs[0].error().code() == pb.TritonError.INVALID_ARG
    assert "sequence 101" in rs[0].error().message() and "sequence_start=True" in rs[0].error().message()
    np.testing.assert_allclose(y_of(rs[1]), ref.step(202, xb), rtol=1e-5, atol=1e-6)
    assert m.stateful.active == 0


def test_one_request_sequence_and_controls_without_flags(seqmodel):
    """flags()=3 (START|END in one request); and the control inputs alone (no correlation_id(), flags 0) say the
    same."""
    pb, m, _ = seqmodel
    ref = Reference()
    x = step_x(1)
    ref.start(5)
    r = m.execute([seq_request(pb, 5, x, start=True, end=True)])[0]
    np.testing.assert_allclose(y_of(r), ref.step(5, x), rtol=1e-5, atol=1e-6)
    assert m.stateful.active == 0
    ref.start(6)
    r = m.execute([controls_only(seq_request(pb, 6, x, start=True, flags=False))])[0]
    np.testing.assert_allclose(y_of(r), ref.step(6, x), rtol=1e-5, atol=1e-6)
    r = m.execute([controls_only(seq_request(pb, 6, x, end=True, flags=False))])[0]
    np.testing.assert_allclose(y_of(r), ref.step(6, x), rtol=1e-5, atol=1e-6)
    assert m.stateful.active == 0


def test_bad_request_in_a_batch_fails_alone_and_states_stay_right(seqmodel):
    pb, m, _ = seqmodel
    ref = Reference()
    ref.start(1), ref.start(2)
    x1, x2 = step_x(10), step_x(11)
    m.execute([seq_request(pb, 1, x1, start=True), seq_request(pb, 2, x2, start=True)])
    ref.step(1, x1), ref.step(2, x2)
    bad = seq_request(pb, 2, np.zeros((1, 1, INPUT), np.float64))
    x1 = step_x(12)
    rs = m.execute([seq_request(pb, 1, x1), bad])
    np.testing.assert_allclose(y_of(rs[0]), ref.step(1, x1), rtol=1e-5, atol=1e-6)
    assert rs[1].has_error() and "input 'x'" in rs[1].error().message()
    x2 = step_x(13)  # the failed step left sequence 2's state as it was
    np.testing.assert_allclose(y_of(m.execute([seq_request(pb, 2, x2)])[0]), ref.step(2, x2), rtol=1e-5, atol=1e-6)


@pytest.mark.hostnpu_only  # injects a fault into the host NPU
def test_device_fault_in_a_batched_step_fails_only_the_sequence_that_fails_alone(seqmodel):
    """Three sequences' steps in one batch: the batch's run faults (507015), and so does sequence 1's step alone.
    A failed step leaves every state as it was, so each step is retried alone (gert.core.engine.run_isolated):
    only sequence 1's request fails; 2 and 3 advance, equal to ONNX Runtime; sequence 1 goes on from its old state."""
    import gert

    pb, m, _ = seqmodel
    ref = Reference()
    keys = (1, 2, 3)
    xs = {k: step_x(30 + k) for k in keys}
    for k in keys:
        ref.start(k)
    rs = m.execute([seq_request(pb, k, xs[k], start=True) for k in keys])  # compiles: no fault yet
    for k, r in zip(keys, rs):
        np.testing.assert_allclose(y_of(r), ref.step(k, xs[k]), rtol=1e-5, atol=1e-6)
    xs = {k: step_x(40 + k) for k in keys}
    gert.inject_fault("execute", count=2)  # the batch's run, then sequence 1's step alone
    try:
        rs = m.execute([seq_request(pb, k, xs[k]) for k in keys])
    finally:
        gert.clear_faults()
    assert rs[0].has_error() and rs[0].error().code() == pb.TritonError.INTERNAL, rs[0].error().message()
    assert "507015" in rs[0].error().message()
    for k, r in zip(keys[1:], rs[1:]):
        np.testing.assert_allclose(y_of(r), ref.step(k, xs[k]), rtol=1e-5, atol=1e-6, err_msg=f"sequence {k}")
    assert m.model.stats()["batching"]["retried_batches"] == 1
    assert m.metrics.flush(10), "published"
    assert [x.value() for x in pb.family("gert_retried_batches_total").metrics] == [1]
    xs = {k: step_x(50 + k) for k in keys}  # sequence 1's state is still the one before the failed step
    rs = m.execute([seq_request(pb, k, xs[k]) for k in keys])
    for k, r in zip(keys, rs):
        np.testing.assert_allclose(y_of(r), ref.step(k, xs[k]), rtol=1e-5, atol=1e-6, err_msg=f"sequence {k}")


@pytest.mark.parametrize("seqmodel", [300_000], indirect=True)
def test_idle_timer_drops_the_state_without_an_end(seqmodel):
    pb, m, _ = seqmodel  # max_sequence_idle_microseconds 300000
    m.execute([seq_request(pb, 9, step_x(0), start=True)])
    assert m.stateful.active == 1
    deadline = time.monotonic() + 5
    while m.stateful.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert m.stateful.active == 0 and m.stateful.expired == 1
    r = m.execute([seq_request(pb, 9, step_x(1))])[0]
    assert r.has_error() and "idle for more than 0.3 s" in r.error().message()


def test_repo_config_for_a_stateful_model(tmp_path):
    text = config_pbtxt(
        "gru",
        onnx_io_of(tmp_path),
        8,
        {"state": "h:h_out", "batch_dim": "N"},
        sequence={"state": STATE, "batch_dim": "N", "strategy": "direct", "idle_us": 2000},
    )
    assert "dynamic_batching" not in text and "direct {" in text and "max_sequence_idle_microseconds: 2000" in text
    assert 'name: "h"' not in text and 'name: "h_out"' not in text
    # no control inputs: the adapter reads flags() and correlation_id(); each control is one more tensor per request
    assert "control_input" not in text and "CONTROL_SEQUENCE" not in text
    from gert.errors import GertError

    with pytest.raises(GertError, match="no batch axis: name it with batch_dim"):
        config_pbtxt("gru", onnx_io_of(tmp_path), 8, sequence={"state": STATE})
    with pytest.raises(GertError, match="output 'nope'"):
        config_pbtxt("gru", onnx_io_of(tmp_path), 8, sequence={"state": {"h": "nope"}, "batch_dim": "N"})


def onnx_io_of(tmp_path) -> dict:
    p = tmp_path / "gru.onnx"
    p.write_bytes(GRU)
    return onnx_io(str(p))


# ---- end to end: the real tritonserver -----------------------------------------------------------------------------

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

e2e = pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")
BATCH_DELAY_US = 200_000  # gru_batched's Oldest queue delay


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton-seq")
    (root / "gru.onnx").write_bytes(GRU)
    repo = root / "repo"
    init_repo(
        str(root / "gru.onnx"),
        str(repo),
        name="gru",
        max_batch_size=8,
        sequence={"state": STATE, "batch_dim": "N", "strategy": "oldest", "idle_us": 600_000_000},
        parameters={"streams": "1", "metrics_interval_ms": "0"},
    )
    # gru with a generous Oldest max_queue_delay_microseconds: steps of different sequences that arrive together
    # wait for each other (up to 8) instead of leaving the batching to timing (the default delay is 1 ms)
    init_repo(
        str(root / "gru.onnx"),
        str(repo),
        name="gru_batched",
        max_batch_size=8,
        sequence={"state": STATE, "batch_dim": "N", "strategy": "oldest", "idle_us": 600_000_000},
        parameters={"streams": "1", "metrics_interval_ms": "0"},
    )
    cfg = repo / "gru_batched" / "config.pbtxt"
    text = cfg.read_text()
    assert text.count("max_queue_delay_microseconds: 1000\n") == 1, text
    cfg.write_text(
        text.replace("max_queue_delay_microseconds: 1000\n", f"max_queue_delay_microseconds: {BATCH_DELAY_US}\n")
    )
    init_repo(
        str(root / "gru.onnx"),
        str(repo),
        name="gru_idle",
        max_batch_size=4,
        sequence={"state": STATE, "batch_dim": "N", "strategy": "direct", "idle_us": 400_000},
        parameters={"streams": "1", "metrics_interval_ms": "0"},
    )
    from triton_server import start_server  # this worker's ports, new ones if taken; the abort watchdog

    srv = start_server(str(repo), str(root / "server.log"), ["--exit-timeout-secs=5"])
    try:
        yield srv
    finally:
        srv.stop(timeout=20)


def client_of(server, kind):
    if kind == "grpc":
        return grpcclient, grpcclient.InferenceServerClient(server.url("grpc"))
    return httpclient, httpclient.InferenceServerClient(server.url("http"), concurrency=4)


def infer_step(mod, client, model, key, x, **kw):
    i = mod.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer(model, [i], sequence_id=key, **kw).as_numpy("y")


@e2e
@pytest.mark.parametrize("kind", ["grpc", "http"])
def test_e2e_sequences_equal_onnxruntime(server, kind):
    mod, client = client_of(server, kind)
    ref = Reference()
    base = 1000 if kind == "grpc" else 2000
    keys = [base + i for i in range(3)]
    for k in keys:
        ref.start(k)
    for step in range(52):  # interleaved, one request at a time
        for k in keys:
            x = step_x(k * 100 + step)
            y = infer_step(mod, client, "gru", k, x, sequence_start=step == 0, sequence_end=step == 51)
            np.testing.assert_allclose(y, ref.step(k, x), rtol=1e-5, atol=1e-6, err_msg=f"{kind} seq {k} {step}")
    with pytest.raises(Exception, match="START|not active"):
        infer_step(mod, client, "gru", keys[0], step_x(0))  # ended


@e2e
@pytest.mark.parametrize("model", ["gru", "gru_idle"])
def test_e2e_string_sequence_ids_are_served_by_repo_inits_config(server, model):
    """tritonclient's string sequence ids (Triton >= 24.04): the adapter keys states by correlation_id(), a str here.
    Two string sequences and an int one, interleaved, each get their own state (Oldest, and Direct, whose null
    requests carry id 0)."""
    mod, client = client_of(server, "grpc")
    ref = Reference()
    keys = [f"{model}-a", f"{model}-b", 4242 if model == "gru" else 4343]
    for k in keys:
        ref.start(k)
    for step in range(3):
        for k in keys:
            x = step_x(100 * keys.index(k) + step)
            y = infer_step(mod, client, model, k, x, sequence_start=step == 0, sequence_end=step == 2)
            np.testing.assert_allclose(y, ref.step(k, x), rtol=1e-5, atol=1e-6, err_msg=f"{model} seq {k!r} {step}")


@e2e
def test_e2e_concurrent_sequences_batch_and_end_inside_a_batch(server):
    """16 sequences from 16 threads: Oldest batches them (fewer graph runs than requests: gru_batched's queue delay
    makes steps that arrive together wait for each other); each ends at a different step, inside batches with the
    others, and every output equals its own ONNX Runtime run."""
    n, steps = 16, 12
    ref = Reference()
    results = {}
    clients = [grpcclient.InferenceServerClient(server.url("grpc")) for _ in range(n)]
    before = gear_hits(server, "gru_batched")

    def run(i):
        key = 5000 + i
        got = []
        for s in range(steps - (i % 4)):
            x = step_x(key * 1000 + s)
            y = infer_step(
                grpcclient,
                clients[i],
                "gru_batched",
                key,
                x,
                sequence_start=s == 0,
                sequence_end=s == steps - (i % 4) - 1,
            )
            got.append((x, y))
        results[key] = got

    errors = run_threads(run, n)
    assert not errors, errors
    for key, got in results.items():
        ref.start(key)
        for s, (x, y) in enumerate(got):
            np.testing.assert_allclose(y, ref.step(key, x), rtol=1e-5, atol=1e-6, err_msg=f"seq {key} step {s}")
    requests = sum(len(g) for g in results.values())
    # every sequence ended and was freed; published with the last batch's hits (metrics_interval_ms 0)
    assert metric(server, "gert_active_sequences", "gru_batched", 0.0) == 0.0
    runs = gear_hits(server, "gru_batched") - before
    assert 0 < runs < requests, (runs, requests)  # sequences shared graph runs


@e2e
def test_e2e_idle_timeout_frees_the_state(server):
    mod, client = client_of(server, "grpc")
    ref = Reference()
    ref.start(77)
    x = step_x(1)
    np.testing.assert_allclose(
        infer_step(mod, client, "gru_idle", 77, x, sequence_start=True), ref.step(77, x), rtol=1e-5, atol=1e-6
    )
    assert metric(server, "gert_active_sequences", "gru_idle", 1.0) == 1.0
    # after max_sequence_idle_microseconds (0.4 s) Triton releases the slot and gert's timer the state: waited for
    assert metric(server, "gert_active_sequences", "gru_idle", 0.0) == 0.0  # dropped without any request
    with pytest.raises(Exception, match="START|not active"):
        infer_step(mod, client, "gru_idle", 77, step_x(2))
    # started again: a fresh (zero) state, and the freed one is no longer counted
    ref.start(77)
    x = step_x(3)
    np.testing.assert_allclose(
        infer_step(mod, client, "gru_idle", 77, x, sequence_start=True, sequence_end=True),
        ref.step(77, x),
        rtol=1e-5,
        atol=1e-6,
    )
    assert metric(server, "gert_active_sequences", "gru_idle", 0.0) == 0.0


def metrics_text(server) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric(server, name: str, model: str, want: float) -> float:
    """The metric's value once it is ``want`` (published by a thread: poll, bounded), else its last value."""
    deadline, value = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        m = re.search(rf'^{name}{{[^}}]*model="{model}"[^}}]*}} ([0-9.e+-]+)$', metrics_text(server), re.MULTILINE)
        value = float(m.group(1)) if m else None
        if value == want:
            break
        time.sleep(0.05)
    return value


def gear_hits(server, model: str) -> int:
    text = metrics_text(server)
    return int(
        sum(
            float(v)
            for v in re.findall(
                rf'^gert_gear_hits_total{{[^}}]*model="{model}"[^}}]*}} ([0-9.e+-]+)$', text, re.MULTILINE
            )
        )
    )


def test_state_and_batch_dim_parameters():
    from gert_triton.config import ConfigError, parse_parameters

    p = parse_parameters({"state": {"string_value": "h:h_out;c:c_out"}, "batch_dim": {"string_value": "x:1,h:1"}})
    assert p.load == {"state": {"h": "h_out", "c": "c_out"}, "batch_dim": ["x:1", "h:1"]}
    assert parse_parameters({"batch_dim": "N"}).get("batch_dim") == "N"
    with pytest.raises(ConfigError, match="parameter 'batch_dim'"):
        parse_parameters({"batch_dim": "x:one"})
    with pytest.raises(ConfigError, match="parameter 'state'"):
        parse_parameters({"state": "h"})


def test_cli_repo_init_writes_the_sequence_batcher(tmp_path, capsys):
    from gert.cli import main

    (tmp_path / "gru.onnx").write_bytes(GRU)
    repo = tmp_path / "repo"
    assert (
        main(
            [
                "repo",
                "init",
                str(tmp_path / "gru.onnx"),
                str(repo),
                "--state",
                "h=h_out",
                "--batch-dim",
                "N",
                "--sequence-strategy",
                "direct",
                "--max-sequence-idle-us",
                "700000",
            ]
        )
        == 0
    )
    text = (repo / "gru" / "config.pbtxt").read_text()
    assert "sequence_batching" in text and "direct {" in text and "700000" in text and "dynamic_batching" not in text
    assert 'string_value: "h=h_out"' in text and 'string_value: "N"' in text
    assert main(["repo", "init", str(tmp_path / "gru.onnx"), str(repo), "--name", "g2", "--state", "h"]) == 2
    assert "INPUT=OUTPUT" in capsys.readouterr().err
    assert main(["repo", "init", str(tmp_path / "gru.onnx"), str(repo), "--name", "g3", "--state", "h=h_out"]) == 2
    assert "batch_dim" in capsys.readouterr().err and not (repo / "g3").exists()


def test_batch_dim_model_without_state_batches_on_axis_1(monkeypatch, tmp_path):
    """A stateless model whose batch is axis 1 (batch_dim N): `gert repo init --batch-dim` config, requests in
    Triton's layout [1, ...] batched on the model's axis 1 and split back."""
    from gert_triton.config import parse_parameters
    from models import ort_session

    pb = fake_pb_utils.install(monkeypatch)
    d = tmp_path / "gru"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.onnx").write_bytes(GRU)
    text = config_pbtxt("gru", onnx_io_of(tmp_path), 8, {"batch_dim": "N", "streams": "1"})
    assert "dynamic_batching" in text and "max_batch_size: 8" in text and "dims: [ 1, 4 ]" in text
    fields = {
        "max_batch_size": 8,
        "dynamic_batching": {},
        "input": [
            {"name": "x", "data_type": "TYPE_FP32", "dims": [1, INPUT]},
            {"name": "h", "data_type": "TYPE_FP32", "dims": [1, HIDDEN]},
        ],
        "output": [
            {"name": "y", "data_type": "TYPE_FP32", "dims": [1, HIDDEN]},
            {"name": "h_out", "data_type": "TYPE_FP32", "dims": [1, HIDDEN]},
        ],
        "parameters": {"batch_dim": {"string_value": "N"}, "streams": {"string_value": "1"}},
    }
    assert parse_parameters(fields["parameters"]).get("batch_dim") == "N"
    m, _ = load_model(pb, d, fields)
    try:
        rng = np.random.default_rng(0)
        feeds = [
            {
                "x": rng.standard_normal((b, 1, INPUT)).astype(np.float32),
                "h": rng.standard_normal((b, 1, HIDDEN)).astype(np.float32),
            }
            for b in (1, 2, 1)
        ]
        reqs = [pb.InferenceRequest([pb.Tensor(k, v) for k, v in f.items()], ["y", "h_out"]) for f in feeds]
        before = sum(g["hits"] for g in m.model.stats()["gears"].values())
        rs = m.execute(reqs)
        assert sum(g["hits"] for g in m.model.stats()["gears"].values()) - before == 1  # one batch of 4 rows
        sess = ort_session(GRU)
        for f, r in zip(feeds, rs):
            got = {t.name(): t.as_numpy() for t in r.output_tensors()}
            y, h = sess.run(None, {k: np.moveaxis(v, 0, 1) for k, v in f.items()})
            np.testing.assert_allclose(got["y"], np.moveaxis(y, 1, 0), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got["h_out"], np.moveaxis(h, 1, 0), rtol=1e-5, atol=1e-6)
    finally:
        m.finalize()
