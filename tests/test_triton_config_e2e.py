"""gert_triton's config generation and adapter fixes against the REAL tritonserver (issue 31 T1-T8, issue 22's
repo-init repro): every model shape class loads from `gert repo init`'s config and from auto-complete and answers one
request with ONNX Runtime's result; merged non-gear batches, bounded metric labels, one series per instance, the
served version, a symlinked default model file and a trimmed output list. One server for the module on free ports
(explicit model control: each test loads the models it needs), independent of test_triton_e2e.py's."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid

import numpy as np
import pytest

from config_models import relu_model, shape_cases, two_out_model
from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from test_triton_e2e import stub_processes
from triton_server import log_tail, running_server

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
ml_dtypes = pytest.importorskip("ml_dtypes")
from tritonclient.utils import InferenceServerException, np_to_triton_dtype  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

CALL_TIMEOUT = 60.0
P = {"streams": "1", "warmup": "false"}  # one stream, no compiles at load: each load is quick


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("triton-config")


@pytest.fixture(scope="module")
def server(root):
    repo = root / "repo"
    repo.mkdir()
    with running_server(str(repo), str(root / "server.log")) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(
        server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT, concurrency=8
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpcclient.InferenceServerClient(server.url("grpc"))
    yield c
    c.close()


def repo_of(server) -> str:
    return server.repo


def load(server, http, name: str) -> None:
    try:
        http.load_model(name)
    except InferenceServerException as e:
        pytest.fail(f"load {name}: {e}\n{log_tail(server.log, 30)}", pytrace=False)


def unload(http, name: str, timeout: float = 60.0) -> None:
    """Unload ``name`` and wait until Triton has finished (its repository index no longer says READY or UNLOADING):
    Triton answers the unload call before the model's instances are finalized, and a stateful model unloaded right
    after a sequence while the next model loads crashed tritonserver 2.51 once (Signal 11; server#6594 reports the
    same for implicit state). Every model is unloaded this way, so the next load starts on a quiet server."""
    http.unload_model(name)
    deadline, states = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        states = {m.get("name"): m.get("state") for m in http.get_model_repository_index()}
        if states.get(name) not in ("READY", "UNLOADING"):
            return
        time.sleep(0.05)
    pytest.fail(f"unload {name}: still {states.get(name)} after {timeout:.0f} s", pytrace=False)


def inputs_of(mod, arrays: dict, datatypes: dict) -> list:
    out = []
    for name, arr in arrays.items():
        if datatypes.get(name) == "BF16":
            arr = arr.astype(ml_dtypes.bfloat16)
        i = mod.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        i.set_data_from_numpy(arr)
        out.append(i)
    return out


def answer(grpc, case, model: str) -> dict:
    kw = {"sequence_id": 7, "sequence_start": True, "sequence_end": True} if case.sequence else {}
    r = grpc.infer(model, inputs_of(grpcclient, case.inputs, case.datatypes), client_timeout=CALL_TIMEOUT, **kw)
    return {name: r.as_numpy(name) for name in case.expected}


def write_onnx(root, name: str, data: bytes) -> str:
    p = root / f"{name}.onnx"
    p.write_bytes(data)
    return str(p)


def without_io(text: str) -> str:
    """config.pbtxt with the inputs, outputs, max_batch_size and dynamic_batching left to auto-complete (a
    sequence_batching block keeps max_batch_size: Triton checks its preferred_batch_size against it before
    auto-complete runs)."""
    text = re.sub(r"^(input|output) \[\n.*?^\]\n", "", text, flags=re.S | re.M)
    text = re.sub(r"^dynamic_batching \{\n.*?^\}\n", "", text, flags=re.S | re.M)
    if "sequence_batching" in text:
        return text
    return re.sub(r"^max_batch_size: \d+\n", "", text, flags=re.M)


# ---- issue 22: a config gert writes always loads, over every shape class --------------------------------------------


@pytest.mark.parametrize("case", shape_cases(), ids=lambda c: c.name)
def test_every_shape_class_loads_from_repo_init_and_auto_complete(server, http, grpc, root, case):
    src = write_onnx(root, case.name, case.onnx)
    init = {**case.init, "parameters": {**P, **case.init.get("parameters", {})}}
    target = init_repo(src, repo_of(server), name=case.name, **init)
    auto = os.path.join(repo_of(server), case.name + "_auto")
    shutil.copytree(target, auto)
    with open(os.path.join(target, "config.pbtxt")) as f:
        text = f.read().replace(f'name: "{case.name}"', f'name: "{case.name}_auto"')
    with open(os.path.join(auto, "config.pbtxt"), "w") as f:
        f.write(without_io(text))
    for model in (case.name, case.name + "_auto"):
        load(server, http, model)
        out = answer(grpc, case, model)
        for name, want in case.expected.items():
            got = out[name]
            if want.dtype == np.float32 and case.datatypes:
                got = got.astype(np.float32)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{model} {name} ({case.note})")
        unload(http, model)


# ---- T1: a merged batch of a size that is not a gear ---------------------------------------------------------------


@pytest.mark.parametrize("policy", ["exact", "auto"])
def test_merged_non_gear_batch_answers_every_request(server, http, root, policy):
    """Triton merges three batch-1 requests into one execute of 3 rows (preferred_batch_size 3 and a long queue
    delay make the merge happen: the batch goes when the third request arrives); with gears 1,2,4,8 and a non-pad
    batch policy each request gets its own result."""
    name = f"gears_{policy}"
    target = init_repo(
        write_onnx(root, "relu", relu_model()),
        repo_of(server),
        name=name,
        parameters={**P, "gears": "batch:1,2,4,8", "shape_policy": f"batch:{policy}"},
    )
    cfg = os.path.join(target, "config.pbtxt")
    with open(cfg) as f:
        text = f.read().replace(
            "max_queue_delay_microseconds: 2000",
            "preferred_batch_size: [ 3 ]\n  max_queue_delay_microseconds: 20000000",
        )
    with open(cfg, "w") as f:
        f.write(text)
    load(server, http, name)
    xs = [np.array([[i + 1.0, -1, 2, -3]], np.float32) * (-1) ** i for i in range(3)]
    handles = [http.async_infer(name, inputs_of(httpclient, {"x": x}, {})) for x in xs]
    for x, h in zip(xs, handles):
        np.testing.assert_array_equal(h.get_result(timeout=CALL_TIMEOUT).as_numpy("y"), np.maximum(x, 0))

    def counts():  # the backend reports statistics after execute() returned, i.e. after the responses went out
        s = http.get_inference_statistics(name)["model_stats"][0]
        return (int(s["inference_count"]), int(s["execution_count"])) if int(s["inference_count"]) >= 3 else None

    assert wait_for(counts) == (3, 1), "the three requests ran as one batch"
    unload(http, name)


def test_two_instances_get_one_stream_each_by_default(server, http, root):
    """instance_group count 2 and no layout parameters: each instance's stub loads one stream over the device's
    cores (its load log line says so, and its busy-seconds series names one stream), with no batch split, since the
    two instances already run batches side by side; every request gets its own rows."""
    name = f"relu_two_{uuid.uuid4().hex[:8]}"  # its own entry and log lines, however often it runs on one server
    init_repo(
        write_onnx(root, "relu", relu_model()),
        repo_of(server),
        name=name,
        instances=2,
        parameters={"warmup": "false", "metrics_interval_ms": "0"},
    )
    load(server, http, name)
    xs = [np.array([[i + 1.0, -1, 2, -3]], np.float32) * (-1) ** i for i in range(16)]
    handles = [http.async_infer(name, inputs_of(httpclient, {"x": x}, {})) for x in xs]
    for x, h in zip(xs, handles):
        np.testing.assert_array_equal(h.get_result(timeout=CALL_TIMEOUT).as_numpy("y"), np.maximum(x, 0))
    with open(server.log, errors="replace") as f:
        lines = [line for line in f if f"gert_triton '{name}':" in line]
    assert len(lines) == 2 and all("1 stream(s) per device" in line and "default layout" in line for line in lines), (
        lines
    )
    busy = wait_for(lambda: series(server, "gert_stream_busy_seconds_total", name))
    per_pid: dict = {}
    for labels, _ in busy:
        per_pid.setdefault(labels["pid"], set()).add(labels["stream"])
    assert busy and all(len(streams) == 1 for streams in per_pid.values()), per_pid
    assert not series(server, "gert_split_batches_total", name), "one stream: nothing split"
    unload(http, name)


# ---- T2 / T3: metric labels ---------------------------------------------------------------------------------------


def metrics(server) -> list:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=CALL_TIMEOUT) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{([^}]*)\}\s+(\S+)$", line)
        if m:
            out.append((m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2))), float(m.group(3))))
    return out


def series(server, family: str, model: str) -> list:
    return [(labels, v) for name, labels, v in metrics(server) if name == family and labels.get("model") == model]


def wait_for(check, timeout: float = 30.0):
    """check() until it returns something true, or fail at the deadline (the metrics thread publishes after each
    batch)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_auto_policy_sizes_share_bounded_gear_labels(server, http, root):
    """T2: 24 distinct sizes of an auto dim make one gert_gear_hits_total series (S=dynamic), not 24."""
    init_repo(
        write_onnx(root, "relu_s", relu_model(dims=("N", "S"))),
        repo_of(server),
        name="auto_s",
        parameters={**P, "metrics_interval_ms": "0"},
    )
    load(server, http, "auto_s")
    rng = np.random.default_rng(0)
    for s in range(1, 25):
        x = rng.standard_normal((1, s)).astype(np.float32)
        np.testing.assert_array_equal(
            http.infer("auto_s", inputs_of(httpclient, {"x": x}, {})).as_numpy("y"), np.maximum(x, 0)
        )
    got = wait_for(
        lambda: [
            s
            for s in series(server, "gert_gear_hits_total", "auto_s")
            if sum(v for _, v in series(server, "gert_gear_hits_total", "auto_s")) >= 24
        ]
    )
    assert [lab["gear"] for lab, _ in got] == ["S=dynamic,batch=1"], got
    assert all(lab["version"] == "1" and lab["instance"] for lab, _ in got)
    unload(http, "auto_s")


SHARED_SERIES_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        amount = float(json.loads(args["model_config"])["parameters"]["amount"]["string_value"])
        self.family = pb_utils.MetricFamily(name="gert_test_shared_total", description="shared series probe",
                                            kind=pb_utils.MetricFamily.COUNTER)
        self.metric = self.family.Metric(labels={"series": "same"})
        self.metric.increment(amount)

    def execute(self, requests):
        return []

    def finalize(self):
        del self.metric
        del self.family
"""


def test_triton_shares_a_series_between_stubs_with_equal_labels(server, http):
    """Why gert_triton's series carry the stub's pid (gert_triton/metrics.py): two stubs creating a family of one name
    and a series of equal labels get ONE series in this tritonserver (2.51), and when the first stub deletes its
    Metric the series is removed while the other stub still holds it (triton-inference-server/server#8663: its next
    write is a use after free). Plain Python models, no gert: this checks the server's behaviour gert relies on."""
    repo = repo_of(server)
    for name, amount in (("shared_a", "1"), ("shared_b", "10")):
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(SHARED_SERIES_MODEL)
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(
                f'backend: "python"\nmax_batch_size: 0\n'
                f'input [{{ name: "x", data_type: TYPE_FP32, dims: [ 1 ] }}]\n'
                f'output [{{ name: "y", data_type: TYPE_FP32, dims: [ 1 ] }}]\n'
                f"instance_group [{{ kind: KIND_CPU, count: 1 }}]\n"
                f'parameters: {{ key: "amount", value: {{ string_value: "{amount}" }} }}\n'
            )

    def shared() -> list:
        return [v for name, labels, v in metrics(server) if name == "gert_test_shared_total"]

    load(server, http, "shared_a")
    load(server, http, "shared_b")
    try:
        assert shared() == [11.0], "one series for both stubs: 1 + 10"
        unload(http, "shared_a")
        assert wait_for(lambda: not stub_processes(server, "shared_a")), "shared_a's stub exited"
        assert http.is_model_ready("shared_b")
        assert shared() == [], "the series went with shared_a although shared_b still holds it"
    finally:
        for name in ("shared_a", "shared_b"):
            unload(http, name)
        wait_for(lambda: not stub_processes(server, "shared_a") and not stub_processes(server, "shared_b"))


def test_instances_publish_their_own_active_sequences(server, http, grpc, root):
    """T3: 4 live sequences over 2 instances: the gauges of the instances add up to 4 (one series per instance)."""
    case = next(c for c in shape_cases() if c.name == "colon_state")
    init_repo(
        write_onnx(root, "gru2", case.onnx),
        repo_of(server),
        name="gru2",
        instances=2,
        parameters={**P, "metrics_interval_ms": "0"},
        sequence=case.init["sequence"],
    )
    load(server, http, "gru2")
    for sid in (101, 102, 103, 104):
        grpc.infer(
            "gru2",
            inputs_of(grpcclient, case.inputs, {}),
            sequence_id=sid,
            sequence_start=True,
            client_timeout=CALL_TIMEOUT,
        )
    got = wait_for(
        lambda: (lambda s: s if sum(v for _, v in s) == 4 else None)(series(server, "gert_active_sequences", "gru2"))
    )
    assert got and sum(v for _, v in got) == 4, series(server, "gert_active_sequences", "gru2")
    assert len({lab["instance"] for lab, _ in got}) == len(got), "one series per instance"
    assert {int(lab["pid"]) for lab, _ in got} == set(stub_processes(server, "gru2")), "each series names its stub"
    for sid in (101, 102, 103, 104):
        grpc.infer(
            "gru2",
            inputs_of(grpcclient, case.inputs, {}),
            sequence_id=sid,
            sequence_end=True,
            client_timeout=CALL_TIMEOUT,
        )
    unload(http, "gru2")


# ---- T4: the served version ---------------------------------------------------------------------------------------


def test_pinned_version_loads_with_an_empty_staged_version_dir(server, http, root):
    target = init_repo(write_onnx(root, "relu", relu_model()), repo_of(server), name="pinned", parameters=P)
    with open(os.path.join(target, "config.pbtxt"), "a") as f:
        f.write("version_policy: { specific: { versions: [ 1 ] } }\n")
    os.makedirs(os.path.join(target, "2"))  # being staged: no model file yet
    load(server, http, "pinned")
    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(
        http.infer("pinned", inputs_of(httpclient, {"x": x}, {})).as_numpy("y"), np.maximum(x, 0)
    )
    unload(http, "pinned")


# ---- T7: a default model.onnx symlinked from a shared store -------------------------------------------------------


def test_symlinked_default_model_file_loads(server, http, root):
    store = root / "store"
    store.mkdir()
    shutil.copy(write_onnx(root, "relu", relu_model()), store / "relu.onnx")
    target = init_repo(str(store / "relu.onnx"), repo_of(server), name="symlinked", parameters=P)
    os.remove(os.path.join(target, "1", "model.onnx"))
    os.symlink(store / "relu.onnx", os.path.join(target, "1", "model.onnx"))
    load(server, http, "symlinked")
    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(
        http.infer("symlinked", inputs_of(httpclient, {"x": x}, {})).as_numpy("y"), np.maximum(x, 0)
    )
    unload(http, "symlinked")
    os.remove(os.path.join(target, "1", "model.onnx"))  # no model file at all: no parameter is blamed
    with pytest.raises(InferenceServerException) as e:
        http.load_model("symlinked")
    assert "no model.onnx in" in str(e.value) and "parameter 'onnx_file':" not in str(e.value), str(e.value)


# ---- T8: a trimmed output list ------------------------------------------------------------------------------------


def test_outputs_a_config_leaves_out_stay_out(server, http, grpc, root):
    target = init_repo(write_onnx(root, "two", two_out_model()), repo_of(server), name="trim", parameters=P)
    cfg = os.path.join(target, "config.pbtxt")
    with open(cfg) as f:
        text = f.read()
    trimmed = re.sub(r',\n  \{\n    name: "z"\n.*?\n  \}', "", text, flags=re.S)
    assert trimmed != text
    with open(cfg, "w") as f:
        f.write(trimmed)
    load(server, http, "trim")
    assert [o["name"] for o in http.get_model_config("trim")["output"]] == ["y"]
    x = np.array([[-1, 2, -3, 4]], np.float32)
    r = grpc.infer("trim", inputs_of(grpcclient, {"x": x}, {}), client_timeout=CALL_TIMEOUT)
    assert [o.name for o in r.get_response().outputs] == ["y"]
    np.testing.assert_array_equal(r.as_numpy("y"), np.maximum(x, 0))
    unload(http, "trim")


# ---- T5 through the CLI, as the repro ran it ----------------------------------------------------------------------


def test_cli_repo_init_with_colon_state_names_loads(server, http, grpc, root):
    case = next(c for c in shape_cases() if c.name == "colon_state")
    src = write_onnx(root, "colon_cli", case.onnx)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gert",
            "repo",
            "init",
            src,
            repo_of(server),
            "--name",
            "colon_cli",
            "--state",
            "h:0=h_out:0",
            "--batch-dim",
            "N",
            "--param",
            "streams=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    load(server, http, "colon_cli")
    out = answer(grpc, case, "colon_cli")
    np.testing.assert_allclose(out["y:0"], case.expected["y:0"], rtol=1e-5, atol=1e-6)
    unload(http, "colon_cli")


# ---- issue 28: the host_memory budget reaches the model ------------------------------------------------------------


def test_host_memory_parameter_keeps_static_graphs_within_its_budget(server, http, root):
    """Two instances of one auto model, one with room for static graphs (host_memory 1GB), one with none (1 byte):
    a size sent often enough turns hot in both; the first serves it from a static graph, the second never builds one
    into service and keeps answering from the dynamic graph, correctly."""
    path = write_onnx(root, "relu_hm", relu_model(dims=("N", "S")))
    for name, budget in (("hm_room", "1GB"), ("hm_none", "1")):
        init_repo(
            path,
            repo_of(server),
            name=name,
            parameters={**P, "metrics_interval_ms": "0", "hot_after": "2", "host_memory": budget},
        )
        load(server, http, name)
    rng = np.random.default_rng(0)

    def ask(model: str) -> None:
        x = rng.standard_normal((1, 5)).astype(np.float32)
        np.testing.assert_array_equal(
            http.infer(model, inputs_of(httpclient, {"x": x}, {})).as_numpy("y"), np.maximum(x, 0)
        )

    def static_hits(model: str) -> float:
        return sum(v for lab, v in series(server, "gert_graph_requests_total", model) if lab.get("graph") == "static")

    def served_static() -> bool:
        for model in ("hm_none", "hm_room"):
            ask(model)
        return static_hits("hm_room") > 0

    assert wait_for(served_static, timeout=60), "the size never turned static with room in the budget"
    ask("hm_none")
    assert static_hits("hm_none") == 0
    assert sum(v for _, v in series(server, "gert_background_compiles_total", "hm_none")) == 0
    assert (
        sum(v for lab, v in series(server, "gert_graph_requests_total", "hm_none") if lab.get("graph") == "dynamic")
        >= 3
    )
    for name in ("hm_room", "hm_none"):
        unload(http, name)
