"""`gert bench` and `gert info` through the real command line (python -m gert)."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import gert
from _helpers import live_threads, still_alive


def _model(path):
    """y = x * 2 + 1 with a symbolic batch axis and a fixed width of 16."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 16])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 16])
    two = onnx.numpy_helper.from_array(np.array(2, np.float32), "two")
    one = onnx.numpy_helper.from_array(np.array(1, np.float32), "one")
    g = oh.make_graph(
        [oh.make_node("Mul", ["x", "two"], ["t"]), oh.make_node("Add", ["t", "one"], ["y"])],
        "affine",
        [x],
        [y],
        [two, one],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def gert_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "gert", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return _model(str(tmp_path_factory.mktemp("bench") / "affine.onnx"))


def test_short_sweep_table_json_csv_agree(model_path, tmp_path):
    j, c = tmp_path / "out.json", tmp_path / "out.csv"
    r = gert_cli(
        "bench",
        model_path,
        "--streams",
        "1,2",
        "--batch",
        "1,4",
        "--iterations",
        "40",
        "--concurrency",
        "2",
        "--json",
        str(j),
        "--csv",
        str(c),
        "--latency-budgets",
        "1000",
    )
    assert r.returncode == 0, r.stderr
    assert "gert bench" in r.stderr and "4/4" in r.stderr  # progress on stderr (tqdm or plain lines)
    data = json.loads(j.read_text())["results"]
    assert len(data) == 4
    assert {(d["streams"], d["batch"]) for d in data} == {(1, 1), (1, 4), (2, 1), (2, 4)}
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 4
    table_lines = [ln for ln in r.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert len(table_lines) == 4
    for d in data:
        assert d["requests"] == 40
        assert d["samples_per_s"] == pytest.approx(d["inferences_per_s"] * d["batch"], rel=1e-6)
        assert d["p50_ms"] <= d["p90_ms"] <= d["p99_ms"]
        assert len(d["stream_busy"]) == d["streams"]
        row = next(x for x in rows if int(x["streams"]) == d["streams"] and int(x["batch"]) == d["batch"])
        assert float(row["samples_per_s"]) == pytest.approx(d["samples_per_s"])
        line = next(ln for ln in table_lines if ln.split()[:4] == [str(d["streams"]), "-", "-", str(d["batch"])])
        assert float(line.split()[5]) == pytest.approx(d["samples_per_s"], abs=0.06)
    # the table is sorted by throughput and the best configuration under the budget is marked once
    tps = [float(ln.split()[5]) for ln in table_lines]
    assert tps == sorted(tps, reverse=True)
    assert sum(1 for d in data if d["best_under_ms"] == [1000.0]) == 1
    assert "p99<=1000ms" in table_lines[0]


def test_cache_dir_reports_compile_seconds_cold_and_warm(model_path, tmp_path):
    j = tmp_path / "out.json"
    cache = tmp_path / "cache"
    r = gert_cli(
        "bench",
        model_path,
        "--streams",
        "2",
        "--batch",
        "4",
        "--iterations",
        "10",
        "--cache-dir",
        str(cache),
        "--json",
        str(j),
    )
    assert r.returncode == 0, r.stderr
    (d,) = json.loads(j.read_text())["results"]
    # the warm load compiled nothing afresh: its compiles (one per stream) were all cache hits
    assert d["cache_hits"] == 2 and d["compile_s_cold"] > 0 and d["compile_s"] >= 0
    assert "compile s cold/warm" in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.split() and ln.split()[0] == "2")
    assert f"{d['compile_s_cold']:.2f}/{d['compile_s']:.2f}" in line
    assert os.listdir(cache) == []  # the cold run's subdirectory is removed


@pytest.mark.usefixtures("device")
def test_a_dynamic_non_batch_dim_is_measured_on_its_static_graph(tmp_path):
    """x [N, W] with W auto (the default): the hot shape's static graph (its compile made slow here) is compiled
    before the measurement starts, so every measured request runs on it."""
    import time

    from gert._ort_provider import OrtGraphProvider
    from gert.bench import BenchConfig, run_config

    path = str(tmp_path / "affine_w.onnx")
    _model(path)
    m = onnx.load(path)
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[1].dim_param = "W"
    orig = OrtGraphProvider.compile

    def slow(self, model, inputs, outputs, group=0):
        if all(d >= 0 for i in inputs for d in i[2]):
            time.sleep(0.3)
        return orig(self, model, inputs, outputs, group)

    OrtGraphProvider.compile = slow
    before = live_threads("gert-tiers")
    try:
        r = run_config(m.SerializeToString(), BenchConfig(2, None, None, None), {}, {"x": (1, 24)}, {}, 2, None, 30, 1)
    finally:
        OrtGraphProvider.compile = orig
    assert r.requests == 30 and r.static_share == 1.0
    # no compile was in flight at close: the model's compiler thread ends (it is not waited for by close())
    assert not still_alive(live_threads("gert-tiers") - before)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--shape", "nope=1x16"], "unknown input 'nope'"),
        (["--shape", "x=1x17"], "cannot take"),
        (["--cube-cores", "999"], "cube cores"),
        (["--streams", "two"], "--streams"),
        (["--input", "x=/nonexistent/file.npy"], "cannot read"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(model_path, args, needle):
    r = gert_cli("bench", model_path, "--iterations", "2", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]


def test_unreadable_model_exits_2(tmp_path):
    r = gert_cli("bench", str(tmp_path / "missing.onnx"))
    assert r.returncode == 2
    assert "cannot read model file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_info_reports_backend_devices_and_settings():
    env = dict(os.environ, GERT_HOST_DEVICES="2", GERT_HOST_CUBE_CORES="6")
    r = subprocess.run([sys.executable, "-m", "gert", "info"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert f"backend: {gert.backend()}" in r.stdout
    assert "devices: 2" in r.stdout and "device 1: 6 cube cores" in r.stdout
    assert "onnxruntime" in r.stdout and "numpy" in r.stdout
    assert "GERT_HOST_DEVICES=2" in r.stdout
    root = gert._cann.toolkit_root()
    assert f"toolkit: {root}," in r.stdout if root else "toolkit: none: the host NPU is built into" in r.stdout


def test_info_names_the_toolkit_its_version_and_whether_it_is_the_host_npu(tmp_path):
    from gert.cli import _toolkit_line

    (tmp_path / "version.info").write_text("Version=8.5.0\ntimestamp=x\n")
    assert _toolkit_line(str(tmp_path), False) == f"{tmp_path}, version 8.5.0 ({tmp_path}/version.info); CANN"
    (tmp_path / "gert_hostnpu.info").write_text("toolkit=gert host NPU\n")
    assert _toolkit_line(str(tmp_path), True).endswith("; the host NPU packaged as a toolkit")
    (tmp_path / "version.info").unlink()
    assert "version no version file" in _toolkit_line(str(tmp_path), True)
