"""gert_triton without Triton (issue 5): config.pbtxt parameters, auto_complete_config, execute() and its hooks and
metrics, `gert repo init` and the `gert serve` command line. Triton's pb_utils is the fake in fake_pb_utils.py; the
models run on gert (host NPU) in this process.
"""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

import fake_pb_utils
import gert
import gert_triton.model as gt_model
from _helpers import RUNTIME
from gert_triton import TritonPythonModel
from gert_triton.config import ConfigError, GertParams, StreamLayout, find_onnx_file, parse_parameters, stream_layout
from models import ort_run
from triton_models import SEQ_OUTPUTS, fixed_model, reduce_all_model, seq_expected, seq_inputs, seq_model

pytestmark = RUNTIME


@pytest.fixture
def pb(monkeypatch):
    """The fake triton_python_backend_utils, importable as the real one for this test."""
    return fake_pb_utils.install(monkeypatch)


# ---- helpers ------------------------------------------------------------------------------------------------------


def model_dir(tmp_path, onnx: bytes, name: str = "m", where: str = "1") -> str:
    d = tmp_path / name
    (d / "1").mkdir(parents=True)
    target = d / where / "model.onnx" if where else d / "model.onnx"
    target.write_bytes(onnx)
    (d / "1" / "model.py").write_text("from gert_triton import TritonPythonModel\n")
    return str(d)


def params(**kv) -> dict:
    """config.pbtxt parameters as the stub's JSON has them."""
    return {k: {"string_value": v} for k, v in kv.items()}


# One stream over all cores: each batch is one run, so gear hits count whole batches (the default layout of a
# batching model splits batches over two streams; test_default_stream_layout covers it).
ONE_STREAM = params(streams="1")


def autocomplete(pb, mdir: str, cls=TritonPythonModel, **fields) -> dict:
    pb.set_model_dir(mdir)
    cfg = pb.ModelConfig(pb.default_config(os.path.basename(mdir), **fields))
    out = cls.auto_complete_config(cfg)
    assert out is cfg, "auto_complete_config must return the ModelConfig it was given"
    return out.as_dict()


def init_args(mdir: str, cfg: dict, device: str = "0") -> dict:
    name = os.path.basename(mdir)
    return {
        "model_config": json.dumps(cfg),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{name}_0_0",
        "model_instance_device_id": device,
        "model_repository": mdir,
        "model_version": "1",
        "model_name": name,
    }


@pytest.fixture
def loaded(pb):
    """load(mdir, cls=..., **config fields): auto_complete_config + initialize, as Triton does; finalized after."""
    models = []

    def load(mdir: str, cls=TritonPythonModel, **fields):
        cfg = autocomplete(pb, mdir, cls, **fields)
        m = cls()
        m.initialize(init_args(mdir, cfg))
        models.append(m)
        return m

    yield load
    for m in models:
        m.finalize()


def request(pb, inputs: dict, outputs=SEQ_OUTPUTS, cancelled: bool = False):
    return pb.InferenceRequest([pb.Tensor(k, v) for k, v in inputs.items()], outputs, cancelled=cancelled)


def outputs_of(response) -> dict:
    assert not response.has_error(), response.error().message()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def assert_error(pb, response, code, *words) -> str:
    assert response.has_error(), "expected an error response"
    err = response.error()
    assert err.code() == code, f"code {err.code()} != {code}: {err.message()}"
    for w in words:
        assert w in err.message(), f"{w!r} not in {err.message()!r}"
    return err.message()


def check_seq(out: dict, inputs: dict, what: str = "") -> None:
    exp = seq_expected(inputs)
    assert set(out) == set(exp), f"{what}: outputs {sorted(out)}"
    for k, v in exp.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape, f"{what}: {k} {out[k].dtype}{out[k].shape}"
        assert np.array_equal(out[k], v), f"{what}: {k} is not this request's result"


def gear_hits(model) -> dict:
    return {k: g["hits"] for k, g in model.model.stats()["gears"].items()}


def hit_delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


@pytest.fixture(scope="module")
def seq_bytes():
    return seq_model()


# ---- config parameters --------------------------------------------------------------------------------------------


def test_parameters_every_key():
    p = parse_parameters(
        params(
            onnx_file="sub/m.onnx",
            streams="3",
            cube_cores="2",
            vector_cores="1",
            gears="batch:1,4,8;W:160,320,640",
            shape_policy="W:pad;H:exact",
            pad_value="-1.5",
            max_batch="8",
            device_ids="0, 1",
        )
    )
    assert p == GertParams(
        onnx_file="sub/m.onnx",
        load=dict(
            streams=3,
            cube_cores=2,
            vector_cores=1,
            gears={"batch": [1, 4, 8], "W": [160, 320, 640]},
            shape_policy={"W": "pad", "H": "exact"},
            pad_value=-1.5,
            max_batch=8,
            devices=(0, 1),
        ),
    )


def test_parameters_shape_tiers():
    p = parse_parameters(
        params(
            shape_policy="W:auto;H:exact",
            hot_after="2",
            hot_window="64",
            max_exact_graphs="4",
            compile_share="0.5",
            host_memory="1.5GB",
        )
    )
    assert p.get("shape_policy") == {"W": "auto", "H": "exact"}
    assert p.load == {
        "shape_policy": {"W": "auto", "H": "exact"},
        "hot_after": 2,
        "hot_window": 64,
        "max_exact_graphs": 4,
        "compile_share": 0.5,
        "host_memory": 3 << 29,
    }
    assert parse_parameters(params(host_memory="1048576")).get("host_memory") == 1 << 20
    assert GertParams().load == {}  # gert.load's defaults


def test_tiers_parameters_reach_the_model_and_its_metrics(pb, loaded, tmp_path, seq_bytes):
    """seq's S (no gears) is auto: warmup compiles the dynamic graph; a size seen hot_after times gets a static graph
    in the background; the graph_requests / background_compiles metrics count what the model's stats count."""
    m = loaded(
        model_dir(tmp_path, seq_bytes, name="tiered"),
        parameters={
            **ONE_STREAM,
            **params(hot_after="2", hot_window="16", max_exact_graphs="3", compile_share="0.75", host_memory="256MB"),
        },
    )
    tiers = m.model.pool.tiers
    assert (tiers.hot_after, tiers._window.size, tiers.max_static, tiers.compile_share) == (2, 16, 3, 0.75)
    assert tiers.host_memory == 256 << 20
    assert m.model.plan.dims["S"].policy == "auto" and m.model.stats()["compiles"] == 1  # the dynamic graph
    for uid in range(2):
        m.execute([request(pb, seq_inputs(1, 3, uid))])
    deadline = time.monotonic() + 30
    while m.model.stats()["background_compiles"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    m.execute([request(pb, seq_inputs(1, 3, 7))])
    st = m.model.stats()
    assert (st["dynamic_hits"], st["static_hits"], st["background_compiles"]) == (2, 1, 1)
    assert m.metrics.flush(10)
    got = {
        (f.name, tuple(sorted(x.labels.items()))): sum(v for _, v in x.calls)
        for f in pb.FAMILIES
        if f.name.startswith(("gert_graph", "gert_background", "gert_request_path"))
        for x in f.metrics
    }
    where = tuple(
        sorted(
            (
                ("device", "0"),
                ("model", "tiered"),
                ("stream", "0"),
                ("version", "1"),
                ("instance", "tiered_0_0"),
                ("pid", str(os.getpid())),
            )
        )
    )
    assert got == {
        ("gert_graph_requests_total", tuple(sorted((("graph", "dynamic"),) + where))): 2,
        ("gert_graph_requests_total", tuple(sorted((("graph", "static"),) + where))): 1,
        ("gert_background_compiles_total", where): 1,
    }


def test_parameters_ge_keys_by_level():
    p = parse_parameters(
        params(**{"ge.exec.precision_mode": "force_fp16", "session.ge.opt": "1", "graph.ge.inputShape": "x:1,3"})
    )
    assert p.get("options") == {
        "global.ge.exec.precision_mode": "force_fp16",
        "session.ge.opt": "1",
        "graph.ge.inputShape": "x:1,3",
    }
    from gert.model import _split_options  # the keys reach GEInitialize / Session / AddGraph with GE's names

    assert _split_options(p.get("options")) == (
        {"ge.exec.precision_mode": "force_fp16"},
        {"ge.opt": "1"},
        {"ge.inputShape": "x:1,3"},
    )


def test_parameters_plain_strings_triton_keys_and_empty():
    assert parse_parameters({}) == GertParams()
    assert parse_parameters(None) == GertParams()
    p = parse_parameters(
        {
            "streams": "2",
            "EXECUTION_ENV_PATH": {"string_value": "$$TRITON_MODEL_DIRECTORY/e"},
            "FORCE_CPU_ONLY_INPUT_TENSORS": {"string_value": "no"},
        }
    )
    assert p.load == {"streams": 2}


def test_dim_names_with_colons():
    p = parse_parameters(params(gears="x:3:160,320; batch:2", shape_policy="x:3:pad"))
    assert p.load == {"gears": {"x:3": [160, 320], "batch": [2]}, "shape_policy": {"x:3": "pad"}}


@pytest.mark.parametrize(
    "key,value",
    [
        ("streams", "zero"),
        ("streams", "0"),
        ("streams", "-1"),
        ("streams", ""),
        ("streams", "1.5"),
        ("cube_cores", "x"),
        ("cube_cores", "0"),
        ("vector_cores", "two"),
        ("max_batch", "0"),
        ("gears", ""),
        ("gears", "batch"),
        ("gears", ":1,2"),
        ("gears", "batch:1,a"),
        ("gears", "batch:0,4"),
        ("gears", "batch:"),
        ("shape_policy", "W:squash"),
        ("shape_policy", "W"),
        ("shape_policy", ";"),
        ("pad_value", "abc"),
        ("pad_value", ""),
        ("device_ids", "a"),
        ("device_ids", "-1"),
        ("device_ids", ""),
        ("onnx_file", ""),
        ("onnx_file", "  "),
        ("metrics_interval_ms", "-1"),
        ("metrics_interval_ms", "1e3"),
        ("warmup", "maybe"),
        ("hot_after", "0"),
        ("hot_after", "often"),
        ("hot_window", "0"),
        ("max_exact_graphs", "0"),
        ("shape_policy", "W:tiered"),
        ("compile_share", "0"),
        ("compile_share", "1.5"),
        ("compile_share", "half"),
        ("host_memory", "lots"),
        ("host_memory", "-1"),
        ("host_memory", ""),
        ("host_memory", "2XB"),
        ("load_analysis", "child"),
        ("load_analysis", ""),
    ],
)
def test_malformed_parameter_names_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        parse_parameters(params(**{key: value}))


@pytest.mark.parametrize("key", ["colour", "Streams", "session.opt", "graph.foo", "ge", "onnx", "max_batch_size"])
def test_unknown_parameter_names_key(key):
    with pytest.raises(ConfigError, match=f"unknown parameter '{key}'"):
        parse_parameters(params(**{"streams": "1", key: "1"}))


def test_onnx_file_lookup(tmp_path):
    d = tmp_path / "m"
    (d / "1").mkdir(parents=True)
    (d / "model.onnx").write_bytes(b"top")
    assert find_onnx_file(str(d), "1", None) == str((d / "model.onnx").resolve())  # model dir when no version file
    (d / "1" / "model.onnx").write_bytes(b"v1")
    assert find_onnx_file(str(d), "1", None) == str((d / "1" / "model.onnx").resolve())  # the version dir first
    (d / "sub").mkdir()
    (d / "sub" / "other.onnx").write_bytes(b"o")
    assert find_onnx_file(str(d), "1", "sub/other.onnx") == str((d / "sub" / "other.onnx").resolve())
    with pytest.raises(ConfigError, match="'onnx_file'.*missing.onnx"):
        find_onnx_file(str(d), "1", "missing.onnx")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="^no model.onnx in") as e:  # no parameter was set: none is blamed
        find_onnx_file(str(tmp_path / "empty"), "1", None)
    assert "parameter 'onnx_file':" not in str(e.value)


@pytest.mark.parametrize(
    "escape", ["../outside.onnx", "../m2/model.onnx", "sub/../../outside.onnx", "link.onnx", "ABS"]
)
def test_onnx_file_leaving_the_model_dir_is_refused(tmp_path, escape):
    (tmp_path / "outside.onnx").write_bytes(b"x")
    (tmp_path / "m2").mkdir()
    (tmp_path / "m2" / "model.onnx").write_bytes(b"x")
    d = tmp_path / "m"
    (d / "1").mkdir(parents=True)
    (d / "sub").mkdir()
    (d / "link.onnx").symlink_to(tmp_path / "outside.onnx")  # a symlink out of the dir is refused too
    if escape == "ABS":
        escape = str(tmp_path / "outside.onnx")
    with pytest.raises(ConfigError, match="'onnx_file'"):
        find_onnx_file(str(d), "1", escape)


def test_bad_parameters_fail_the_load_naming_the_key(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    for key, value in [("streams", "zero"), ("colour", "red"), ("onnx_file", "../x.onnx"), ("gears", "batch:1,x")]:
        with pytest.raises(ConfigError, match=f"'{key}'"):  # in auto_complete_config, before a stub starts
            autocomplete(pb, mdir, parameters=params(**{key: value}))
        cfg = pb.default_config("m", max_batch_size=8, parameters=params(**{key: value}))
        with pytest.raises(ConfigError, match=f"'{key}'"):  # and in initialize (--disable-auto-complete-config)
            TritonPythonModel().initialize(init_args(mdir, cfg))


def test_initialize_passes_parameters_to_gert_load(pb, tmp_path, seq_bytes, monkeypatch):
    mdir = model_dir(tmp_path, seq_bytes)
    seen = {}

    class Stop(Exception):
        pass

    def fake_load(path, config):
        seen.update(vars(config), path=path)
        raise Stop

    monkeypatch.setattr(gt_model.gert, "load", fake_load)
    cfg = autocomplete(
        pb,
        mdir,
        parameters=params(
            streams="2",
            cube_cores="1",
            vector_cores="1",
            gears="S:4,8",
            shape_policy="S:pad",
            pad_value="3",
            request_timeout_ms="1500",
            **{"session.ge.x": "1", "ge.y": "2"},
        ),
    )
    with pytest.raises(Stop):
        TritonPythonModel().initialize(init_args(mdir, cfg, device="0"))
    assert seen == dict(
        vars(gert.LoadConfig()),
        path=os.path.realpath(os.path.join(mdir, "1", "model.onnx")),
        devices=(0,),
        streams=2,
        cube_cores=1,
        vector_cores=1,
        gears={"S": (4, 8)},
        shape_policy={"S": "pad"},
        pad_value=3.0,
        max_batch=8,
        options={"session.ge.x": "1", "global.ge.y": "2"},
        request_timeout_s=1.5,
        split_batch=True,
        load_analysis="process",  # gert_triton's default: the stub never imports onnx (issue 41)
    )  # several streams: one batch is split over the idle ones by default
    seen.clear()
    cfg = autocomplete(pb, mdir, parameters=params(device_ids="0,1", gears="batch:1,2", split_batch="false"))
    with pytest.raises(Stop):
        TritonPythonModel().initialize(init_args(mdir, cfg, device="3"))
    assert seen["devices"] == (0, 1) and seen["gears"] == {"batch": (1, 2)} and seen["max_batch"] is None
    assert seen["split_batch"] is False
    seen.clear()
    cfg = autocomplete(pb, mdir)
    with pytest.raises(Stop):
        TritonPythonModel().initialize(init_args(mdir, cfg, device="3"))
    assert seen["devices"] == (3,), "the instance's device comes from model_instance_device_id"
    assert seen["split_batch"] is False, "one stream: nothing to split over"
    seen.clear()
    cfg = autocomplete(pb, mdir, parameters=params(load_analysis="inline"))
    with pytest.raises(Stop):
        TritonPythonModel().initialize(init_args(mdir, cfg, device="0"))
    assert seen["load_analysis"] == "inline"


@pytest.mark.parametrize(
    "given, batching, cores, want",
    [
        ({}, True, (2, 2), StreamLayout(2, None, None, auto=True)),  # batching: two streams sharing the cores by load
        ({}, True, (24, 48), StreamLayout(2, None, None, auto=True)),
        ({}, True, (3, 1), StreamLayout(2, None, None, auto=True)),
        ({}, True, (1, 1), StreamLayout(1, None, None, auto=True)),  # one core: nothing to split
        ({}, False, (2, 2), StreamLayout(1, None, None, auto=True)),  # no batches to split
        ({"split_batch": "false"}, True, (2, 2), StreamLayout(1, None, None, auto=True)),  # batches not split
        ({"streams": "3"}, True, (2, 2), StreamLayout(3, None, None, auto=False)),
        ({"cube_cores": "1"}, True, (2, 2), StreamLayout(1, 1, None, auto=False)),
        ({"vector_cores": "2"}, True, (2, 2), StreamLayout(1, None, 2, auto=False)),
        ({"streams": "2", "cube_cores": "2"}, False, (2, 2), StreamLayout(2, 2, None, auto=False)),
    ],
)
def test_stream_layout(given, batching, cores, want):
    asked = []
    got = stream_layout(parse_parameters(params(**given)), batching, lambda: asked.append(1) or cores)
    assert got == want
    needed = want.auto and batching and given.get("split_batch") != "false"
    assert asked == ([1] if needed else []), "device cores are read only when the layout needs them"


def test_default_stream_layout(pb, loaded, tmp_path, seq_bytes):
    """Unset streams / cores: a batching model runs on two streams sharing the device's cube cores by load (when it
    has two or more), and a batch is split over them (first: gert/core/split_choice.py then measures the whole
    batch too); a model without batching gets one stream."""
    cube = gert._cann.get_device_info(0, gert._cann.DEV_ATTR_CUBE_CORE_NUM)
    m = loaded(model_dir(tmp_path, seq_bytes))
    streams = m.model.stats()["streams"]
    if cube >= 2:
        assert len(streams) == 2 and m.model.num_streams == 2
        assert any("2 stream(s) per device" in msg and "default layout" in msg for _, msg in pb.Logger.messages)
        reqs = [seq_inputs(1, 5, uid) for uid in range(1, 5)]
        before = gear_hits(m)
        responses = m.execute([request(pb, r) for r in reqs])
        for i, (resp, r) in enumerate(zip(responses, reqs)):
            check_seq(outputs_of(resp), r, f"request {i}")
        assert hit_delta(before, gear_hits(m)) == {"S=5,batch=2": 2}, "4 rows split over the two streams"
    else:
        assert [s["cube_cores"] for s in streams] == [cube]
    nb = loaded(model_dir(tmp_path, fixed_model(), name="fixed"))
    assert nb.max_batch_size == 0
    assert [s["cube_cores"] for s in nb.model.stats()["streams"]] == [cube], "no batching: one stream, all cores"
    two = loaded(model_dir(tmp_path, seq_bytes, name="two"), instance_group=[{"kind": "KIND_CPU", "count": 2}])
    assert two.model.num_streams == 1 and not two.model.split_batch, "two instances: one stream each, unsplit"
    assert any("'two': 1 stream(s) per device" in msg for _, msg in pb.Logger.messages)


@pytest.mark.parametrize(
    "groups, want",
    [
        ([], 1),
        ([{"kind": "KIND_CPU", "count": 1}], 1),
        ([{"kind": "KIND_CPU", "count": 2}], 2),
        ([{"kind": "KIND_CPU"}, {"kind": "KIND_MODEL", "count": 3}], 4),
        ([{"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]}], 4),
    ],
)
def test_instance_count(groups, want):
    from gert_triton.config import instance_count

    assert instance_count({"instance_group": groups}) == want
    cores = (4, 4)
    layout = stream_layout(parse_parameters({}), True, lambda: cores, instances=want)
    assert layout.streams == (2 if want == 1 else 1) and layout.auto


def test_warmup_compiles_declared_gears_at_load(pb, loaded, tmp_path, seq_bytes):
    """Every declared gear combination is compiled on every stream before the first request (parameter warmup,
    default true), so no request pays a compile; warmup "false" leaves it to the requests."""
    gears = dict(gears="batch:1,4;S:4,8", shape_policy="S:pad")
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=params(streams="2", cube_cores="1", **gears))
    assert m.model.stats()["compiles"] == 2 * 2 * 2
    assert any("8 graph(s) compiled at load" in msg for _, msg in pb.Logger.messages)
    for b, sz in ((1, 3), (3, 8), (4, 5)):
        check_seq(outputs_of(m.execute([request(pb, seq_inputs(b, sz, b))])[0]), seq_inputs(b, sz, b))
    assert m.model.stats()["compiles"] == 8, "the requests found their graphs compiled"
    cold = loaded(model_dir(tmp_path, seq_bytes, name="cold"), parameters=params(warmup="false", **gears))
    assert cold.model.stats()["compiles"] == 0
    # dims that config.pbtxt fixes (S = 6 here) are compiled too: Triton only lets those sizes through
    fixed = loaded(
        model_dir(tmp_path, seq_bytes, name="fixed"),
        parameters=ONE_STREAM,
        max_batch_size=8,
        input=[
            {"name": "a", "data_type": "TYPE_FP32", "dims": [6, 4]},
            {"name": "m", "data_type": "TYPE_INT64", "dims": [6]},
        ],
    )
    assert fixed.max_batch_size == 8
    assert fixed.model.stats()["compiles"] == 4, "batch gears 1, 2, 4, 8 at S = 6"
    check_seq(outputs_of(fixed.execute([request(pb, seq_inputs(3, 6, 1))])[0]), seq_inputs(3, 6, 1))
    assert fixed.model.stats()["compiles"] == 4


def test_initialize_refuses_batch_gear_above_max_batch_size(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    cfg = autocomplete(pb, mdir, max_batch_size=4, parameters=params(gears="batch:1,8"))
    with pytest.raises(ConfigError, match="'gears'.*8.*max_batch_size 4"):
        TritonPythonModel().initialize(init_args(mdir, cfg))


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_initialize_refuses_config_that_does_not_match_the_onnx_model(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    cfg = autocomplete(pb, mdir)
    bad = json.loads(json.dumps(cfg))
    bad["input"][0]["name"] = "zz"
    with pytest.raises(ConfigError, match="zz"):
        TritonPythonModel().initialize(init_args(mdir, bad))
    bad = json.loads(json.dumps(cfg))
    bad["input"][1]["data_type"] = "TYPE_INT32"  # m is int64 in the ONNX file: every request would fail
    with pytest.raises(ConfigError, match="'m'.*TYPE_INT32.*TYPE_INT64|'m'.*TYPE_INT64.*TYPE_INT32"):
        TritonPythonModel().initialize(init_args(mdir, bad))
    bad = json.loads(json.dumps(cfg))
    bad["input"][0]["dims"] = [-1, -1, 4]  # the batch axis written out although max_batch_size > 0
    with pytest.raises(ConfigError, match="'a'.*dims.*batch axis"):
        TritonPythonModel().initialize(init_args(mdir, bad))
    bad = json.loads(json.dumps(cfg))
    bad["output"][1]["data_type"] = "TYPE_FP32"
    streams = gert.host_counters()["streams_alive"]
    failed = TritonPythonModel()  # kept: what it took must be released by initialize itself, not by the GC
    with pytest.raises(ConfigError, match="output 'c'"):
        failed.initialize(init_args(mdir, bad))
    assert gert.host_counters()["streams_alive"] == streams, "a failed load releases what it took"
    ok = json.loads(json.dumps(cfg))
    ok["input"][0]["dims"] = [12]
    ok["input"][0]["reshape"] = {"shape": [3, 4]}  # Triton hands the model the reshaped tensor
    m = TritonPythonModel()
    m.initialize(init_args(mdir, ok))
    m.finalize()


def test_subclass_converting_inputs_may_declare_other_dtypes(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    cfg = autocomplete(pb, mdir)
    cfg["input"][0]["data_type"] = "TYPE_FP64"  # Scaled.preprocess casts 'a' to float32
    m = Scaled()
    m.initialize(init_args(mdir, cfg))
    m.finalize()


# ---- auto_complete_config -----------------------------------------------------------------------------------------


def test_autocomplete_batchable(pb, tmp_path, seq_bytes):
    cfg = autocomplete(pb, model_dir(tmp_path, seq_bytes))
    assert cfg["max_batch_size"] == gt_model.DEFAULT_MAX_BATCH
    assert cfg["input"] == [
        {"name": "a", "data_type": "TYPE_FP32", "dims": [-1, 4]},
        {"name": "m", "data_type": "TYPE_INT64", "dims": [-1]},
    ]
    assert cfg["output"] == [
        {"name": "y", "data_type": "TYPE_FP32", "dims": [-1]},
        {"name": "c", "data_type": "TYPE_INT64", "dims": [-1]},
    ]
    assert cfg["dynamic_batching"] == {}


def test_autocomplete_max_batch_from_parameters_and_config(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    assert autocomplete(pb, mdir, parameters=params(gears="batch:1,2,4"))["max_batch_size"] == 4
    assert autocomplete(pb, mdir, parameters=params(max_batch="6"))["max_batch_size"] == 6
    cfg = autocomplete(pb, mdir, max_batch_size=3)
    assert cfg["max_batch_size"] == 3 and cfg["dynamic_batching"] == {} and cfg["input"][0]["dims"] == [-1, 4]
    cfg = autocomplete(pb, mdir, max_batch_size=3, dynamic_batching={"max_queue_delay_microseconds": 500})
    assert cfg["dynamic_batching"] == {"max_queue_delay_microseconds": 500}  # the user's scheduler is kept
    cfg = autocomplete(pb, mdir, max_batch_size=3, sequence_batching={})
    assert "dynamic_batching" not in cfg  # another scheduler: not replaced (the real set_dynamic_batching raises)


def test_autocomplete_keeps_what_the_config_gives(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    given = [{"name": "a", "data_type": "TYPE_FP32", "dims": [16, 4]}]  # a narrower S than the model's: allowed
    cfg = autocomplete(pb, mdir, max_batch_size=2, input=given)
    assert cfg["max_batch_size"] == 2
    assert cfg["input"] == given + [{"name": "m", "data_type": "TYPE_INT64", "dims": [-1]}]
    assert [o["name"] for o in cfg["output"]] == ["y", "c"]


@pytest.mark.parametrize(
    "maker,inputs,outputs",
    [
        (
            fixed_model,
            [{"name": "x", "data_type": "TYPE_FP32", "dims": [2, 3]}],
            [{"name": "y", "data_type": "TYPE_FP32", "dims": [2, 3]}],
        ),
        (
            reduce_all_model,
            [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]}],
            [{"name": "total", "data_type": "TYPE_FP32", "dims": [1, 1]}],
        ),
    ],
)
def test_autocomplete_not_batchable(pb, tmp_path, maker, inputs, outputs):
    cfg = autocomplete(pb, model_dir(tmp_path, maker()))
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"] == inputs and cfg["output"] == outputs


def test_autocomplete_batchable_with_max_batch_size_zero_keeps_full_dims(pb, tmp_path, seq_bytes):
    # the user wrote the full shapes (batch dim included): max_batch_size stays 0, no dynamic batching
    given = [{"name": "a", "data_type": "TYPE_FP32", "dims": [-1, -1, 4]}]
    cfg = autocomplete(pb, model_dir(tmp_path, seq_bytes), input=given)
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    assert cfg["input"][1] == {"name": "m", "data_type": "TYPE_INT64", "dims": [-1, -1]}
    assert cfg["output"][0] == {"name": "y", "data_type": "TYPE_FP32", "dims": [-1, -1]}


def test_autocomplete_finds_onnx_file_parameter_and_version_dirs(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes, where="")  # model.onnx in the model dir, not the version dir
    assert autocomplete(pb, mdir)["max_batch_size"] == 8
    os.rename(os.path.join(mdir, "model.onnx"), os.path.join(mdir, "seq.onnx"))
    assert autocomplete(pb, mdir, parameters=params(onnx_file="seq.onnx"))["input"][0]["name"] == "a"
    with pytest.raises(ConfigError, match="'onnx_file'"):
        autocomplete(pb, mdir)
    pb.set_model_dir(os.path.join(mdir, "1"))  # a stub that reports the version dir
    cfg = TritonPythonModel.auto_complete_config(
        pb.ModelConfig(pb.default_config("m", parameters=params(onnx_file="seq.onnx")))
    )
    assert cfg.as_dict()["max_batch_size"] == 8


# ---- execute ------------------------------------------------------------------------------------------------------


def test_execute_batches_same_shape_requests_into_one_run(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=ONE_STREAM)
    reqs = [seq_inputs(b, 5, uid) for uid, b in enumerate([1, 2, 1], start=1)]
    before = gear_hits(m)
    responses = m.execute([request(pb, r) for r in reqs])
    assert len(responses) == 3
    for i, (resp, r) in enumerate(zip(responses, reqs)):
        check_seq(outputs_of(resp), r, f"request {i}")
    assert hit_delta(before, gear_hits(m)) == {"S=5,batch=4": 1}, "one run for the whole batch (4 rows)"
    # the same as ONNX Runtime on the concatenated batch
    ref = ort_run(seq_bytes, [np.concatenate([r["a"] for r in reqs]), np.concatenate([r["m"] for r in reqs])])
    got = {k: np.concatenate([outputs_of(x)[k] for x in responses]) for k in SEQ_OUTPUTS}
    for k, v in zip(SEQ_OUTPUTS, ref):
        np.testing.assert_array_equal(got[k], v)


def test_execute_groups_different_shapes_separately(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=ONE_STREAM)
    reqs = [seq_inputs(1, 3, 1), seq_inputs(1, 7, 2), seq_inputs(2, 3, 3), seq_inputs(1, 7, 4), seq_inputs(1, 1, 5)]
    before = gear_hits(m)
    responses = m.execute([request(pb, r) for r in reqs])
    for i, (resp, r) in enumerate(zip(responses, reqs)):
        check_seq(outputs_of(resp), r, f"request {i}")
    assert hit_delta(before, gear_hits(m)) == {"S=3,batch=4": 1, "S=7,batch=2": 1, "S=1,batch=1": 1}


def test_execute_bad_requests_get_their_own_errors(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=ONE_STREAM)
    good = [seq_inputs(1, 4, uid) for uid in range(1, 4)]
    bad_dtype = dict(seq_inputs(1, 4, 10), a=seq_inputs(1, 4, 10)["a"].astype(np.float64))
    bad_shape = dict(seq_inputs(1, 4, 11), a=np.zeros((1, 4, 5), np.float32))
    bad_rank = dict(seq_inputs(1, 4, 12), m=np.zeros((1, 4, 1), np.int64))
    mismatch = dict(seq_inputs(1, 4, 13), m=np.ones((1, 6), np.int64))  # S is 4 in a, 6 in m
    missing = {"a": seq_inputs(1, 4, 14)["a"]}
    reqs = [good[0], bad_dtype, good[1], bad_shape, bad_rank, mismatch, missing, good[2]]
    before = gear_hits(m)
    responses = m.execute([request(pb, r) for r in reqs])
    E = pb.TritonError.INVALID_ARG
    assert_error(pb, responses[1], E, "'a'", "float32", "float64")
    assert_error(pb, responses[3], E, "'a'", "5")
    assert_error(pb, responses[4], E, "'m'", "rank")
    assert_error(pb, responses[5], E, "'S'", "4", "6")
    assert_error(pb, responses[6], E, "'m'", "missing")
    for i, r in zip((0, 2, 7), good):
        check_seq(outputs_of(responses[i]), r, f"request {i}")
    assert hit_delta(before, gear_hits(m)) == {"S=4,batch=4": 1}, "the good ones ran as one batch"


def test_execute_all_bad_runs_nothing(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes))
    before = gear_hits(m)
    responses = m.execute([request(pb, {"a": np.zeros((1, 2, 4), np.float32)})])
    assert_error(pb, responses[0], pb.TritonError.INVALID_ARG, "'m'")
    assert gear_hits(m) == before


def test_execute_returns_only_requested_outputs(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes))
    r1, r2, r3 = (seq_inputs(1, 3, uid) for uid in (1, 2, 3))
    responses = m.execute([request(pb, r1, outputs=["c"]), request(pb, r2, outputs=["y"]), request(pb, r3)])
    assert list(outputs_of(responses[0])) == ["c"] and np.array_equal(outputs_of(responses[0])["c"], r1["m"] * 2)
    assert list(outputs_of(responses[1])) == ["y"]
    check_seq(outputs_of(responses[2]), r3)


def test_execute_without_batch_axis_runs_each_request(pb, loaded, tmp_path):
    m = loaded(model_dir(tmp_path, fixed_model()))
    xs = [np.full((2, 3), i, np.float32) for i in range(3)]
    before = gear_hits(m)
    responses = m.execute([request(pb, {"x": x}, outputs=["y"]) for x in xs])
    for x, r in zip(xs, responses):
        np.testing.assert_array_equal(outputs_of(r)["y"], x + x)
    assert sum(hit_delta(before, gear_hits(m)).values()) == 3


def test_execute_output_tensors_are_contiguous_arrays(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes))
    responses = m.execute([request(pb, seq_inputs(1, 3, 1)), request(pb, seq_inputs(2, 3, 2))])
    for resp in responses:
        for t in resp.output_tensors():
            assert t.as_numpy().flags.c_contiguous


class Scaled(TritonPythonModel):
    """preprocess: accept float64 'a' and double it; postprocess: c + 1. Counts its calls."""

    def initialize(self, args):
        super().initialize(args)
        self.calls = {"pre": 0, "post": 0}

    def preprocess(self, inputs):
        self.calls["pre"] += 1
        if (inputs["m"] < 0).any():
            raise ValueError("m must not be negative")
        return {**inputs, "a": (inputs["a"] * 2).astype(np.float32)}

    def postprocess(self, outputs):
        self.calls["post"] += 1
        if (outputs["c"] == 2 * 99).any():
            raise RuntimeError("postprocess refuses 99")
        return {**outputs, "c": outputs["c"] + 1}


def test_preprocess_postprocess_overrides(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes), cls=Scaled, parameters=ONE_STREAM)
    r1 = seq_inputs(1, 3, 1)
    r2 = dict(seq_inputs(1, 3, 2), a=seq_inputs(1, 3, 2)["a"].astype(np.float64))  # fine after preprocess
    r3 = dict(seq_inputs(1, 3, 3), m=-np.ones((1, 3), np.int64))  # preprocess refuses it
    r4 = dict(seq_inputs(1, 3, 4), m=np.full((1, 3), 99, np.int64))  # postprocess fails on it
    before = gear_hits(m)
    responses = m.execute([request(pb, r) for r in (r1, r2, r3, r4)])
    for i, r in ((0, r1), (1, r2)):
        out = outputs_of(responses[i])
        exp = seq_expected({"a": (r["a"] * 2).astype(np.float32), "m": r["m"]})
        np.testing.assert_array_equal(out["y"], exp["y"])
        np.testing.assert_array_equal(out["c"], exp["c"] + 1)
    assert_error(pb, responses[2], pb.TritonError.INVALID_ARG, "must not be negative")
    assert_error(pb, responses[3], pb.TritonError.INTERNAL, "refuses 99")
    assert m.calls == {"pre": 4, "post": 3}, "preprocess per request before batching, postprocess per request after"
    assert hit_delta(before, gear_hits(m)) == {"S=3,batch=4": 1}, "r1, r2 and r4 ran in one batch"


def test_metrics_once_per_batch(pb, loaded, tmp_path, seq_bytes):
    m = loaded(model_dir(tmp_path, seq_bytes, name="seqm"), parameters=ONE_STREAM)
    names = {f.name for f in pb.FAMILIES}
    assert {"gert_gear_hits_total", "gert_padding_ratio", "gert_stream_busy_seconds_total"} <= names
    hits, pad, busy, pad_s = (
        pb.family(n)
        for n in (
            "gert_gear_hits_total",
            "gert_padding_ratio",
            "gert_stream_busy_seconds_total",
            "gert_padding_seconds_total",
        )
    )

    def calls():
        assert m.metrics.flush(10), "published"
        return {
            (f.name, tuple(sorted(x.labels.items()))): list(x.calls)
            for f in (hits, pad, busy, pad_s)
            for x in f.metrics
        }

    def key(family, gear):
        return family, tuple(
            sorted(
                (
                    ("gear", gear),
                    ("model", "seqm"),
                    ("version", "1"),
                    ("instance", "seqm_0_0"),
                    ("pid", str(os.getpid())),
                )
            )
        )

    m.execute([request(pb, seq_inputs(1, 3, uid)) for uid in range(3)])  # one batch of 3 rows -> gear batch=4
    c1 = calls()
    gear4 = key("gert_gear_hits_total", "S=dynamic,batch=4")  # S has no gears: its sizes share one label
    assert c1[gear4] == [("increment", 1)]
    assert c1[key("gert_padding_ratio", "S=dynamic,batch=4")] == [("set", 0.25)]
    # the padding's cost: a quarter of the run's seconds (the stream's busy time: its only run)
    (cost,) = c1[key("gert_padding_seconds_total", "S=dynamic,batch=4")]
    busy_s = sum(v[0][1] for k, v in c1.items() if k[0] == "gert_stream_busy_seconds_total")
    assert cost[0] == "increment" and cost[1] == pytest.approx(0.25 * busy_s, rel=1e-9), (cost, busy_s)
    busy_calls = [v for k, v in c1.items() if k[0] == "gert_stream_busy_seconds_total"]
    assert len(busy_calls) == 1 and len(busy_calls[0]) == 1 and busy_calls[0][0][1] > 0
    assert busy_calls[0][0][0] == "increment"
    # two groups in one execute: each gear hit once, each metric touched at most once per execute
    m.execute(
        [request(pb, seq_inputs(1, 5, 1))]
        + [request(pb, seq_inputs(1, 3, uid)) for uid in range(3)]
        + [request(pb, seq_inputs(1, 5, 3))]
    )
    c2 = calls()
    new = {k: v[len(c1.get(k, [])) :] for k, v in c2.items()}
    assert new[gear4] == [("increment", 1)]
    assert new[key("gert_gear_hits_total", "S=dynamic,batch=2")] == [("increment", 1)]
    assert all(len(v) <= 1 for v in new.values()), new
    # a batch that only hits one gear leaves the other gears' metrics alone (every metric call is an IPC message)
    m.execute([request(pb, seq_inputs(1, 5, 4))])
    c3 = calls()
    new = {k: v[len(c2.get(k, [])) :] for k, v in c3.items() if len(v) > len(c2.get(k, []))}
    assert all("batch=4" not in dict(k[1]).get("gear", "") for k in new), new
    # all requests bad: no gear hit is counted
    m.execute([request(pb, {"a": np.zeros((1, 2, 4), np.float32)})])
    assert calls()[gear4] == c3[gear4]
    # the counters match gert's own statistics
    totals = {dict(x.labels)["gear"]: x.value() for x in hits.metrics}
    bounded: dict = {}
    for k, v in gear_hits(m).items():
        label = ",".join(p if p.startswith("batch=") else p.split("=")[0] + "=dynamic" for p in k.split(","))
        bounded[label] = bounded.get(label, 0) + v
    assert totals == bounded


def test_metrics_are_published_off_the_request_path(pb, loaded, tmp_path, seq_bytes, monkeypatch):
    """Metric calls are blocking IPC round trips in the stub: execute() hands its changes to the publisher thread
    and returns without waiting; changes queued meanwhile are merged (counters add up); finalize publishes what is
    left; a failing metric call is logged once and never fails a request."""
    gate = threading.Event()
    real_increment = pb.Metric.increment

    def blocked_increment(self, value):
        assert gate.wait(30), "test gate"
        real_increment(self, value)

    monkeypatch.setattr(pb.Metric, "increment", blocked_increment)
    m = loaded(model_dir(tmp_path, seq_bytes), parameters=ONE_STREAM)
    for uid in range(3):  # each returns while the publisher is stuck in its first metric call
        check_seq(outputs_of(m.execute([request(pb, seq_inputs(2, 5, uid))])[0]), seq_inputs(2, 5, uid))
    assert not m.metrics.flush(0.05), "still blocked: execute did not wait for it"
    gate.set()
    assert m.metrics.flush(10)
    hits = pb.family("gert_gear_hits_total").metrics
    assert [x.value() for x in hits] == [3] and len(hits[0].calls) <= 2, "3 batches, merged into <= 2 calls"
    # what is pending at finalize is published before the families go
    m.execute([request(pb, seq_inputs(2, 5, 9))])
    m.finalize()
    assert hits[0].value() == 4
    # at most one publication per interval: any number of batches in between become one call per metric
    m3 = loaded(model_dir(tmp_path, seq_bytes, name="m3"), parameters=params(streams="1", metrics_interval_ms="600000"))
    for uid in range(10):
        m3.execute([request(pb, seq_inputs(1, 5, uid))])
    assert m3.metrics.flush(10)
    hits3 = [x for x in pb.family("gert_gear_hits_total").metrics if x.labels["model"] == "m3"]
    assert [x.value() for x in hits3] == [10] and len(hits3[0].calls) <= 2, hits3[0].calls
    # a metric call that fails: logged once, requests unaffected
    m2 = loaded(model_dir(tmp_path, seq_bytes, name="m2"), parameters=ONE_STREAM)

    def broken(self, value):
        raise pb.TritonModelException("metrics IPC failed")

    monkeypatch.setattr(pb.Metric, "increment", broken)
    for uid in range(2):
        check_seq(outputs_of(m2.execute([request(pb, seq_inputs(1, 5, uid))])[0]), seq_inputs(1, 5, uid))
        assert m2.metrics.flush(10)
    errors = [msg for level, msg in pb.Logger.messages if level == pb.Logger.ERROR and "metrics" in msg]
    assert len(errors) == 1 and "metrics IPC failed" in errors[0]


def test_metrics_absent_metric_api_is_tolerated(pb, loaded, tmp_path, seq_bytes, monkeypatch):
    monkeypatch.delattr(pb, "MetricFamily")  # an old stub without custom metrics
    m = loaded(model_dir(tmp_path, seq_bytes))
    check_seq(outputs_of(m.execute([request(pb, seq_inputs(1, 2, 1))])[0]), seq_inputs(1, 2, 1))


def test_finalize_closes_the_model(pb, tmp_path, seq_bytes):
    mdir = model_dir(tmp_path, seq_bytes)
    m = TritonPythonModel()
    m.initialize(init_args(mdir, autocomplete(pb, mdir)))
    inner = m.model
    m.finalize()
    with pytest.raises(gert.GertError, match="closed"):
        inner.run(seq_inputs(1, 2, 1))
    m.finalize()  # twice is harmless


# ---- gert repo init and the command line --------------------------------------------------------------------------


def parse_pbtxt(path: str) -> dict:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    with open(path) as f:
        msg = text_format.Parse(f.read(), model_config_pb2.ModelConfig())
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def test_repo_init_batchable(tmp_path, seq_bytes):
    from gert_triton.repo import MODEL_PY, init_repo

    src = tmp_path / "seq.onnx"
    src.write_bytes(seq_bytes)
    target = init_repo(str(src), str(tmp_path / "repo"))
    assert target == str(tmp_path / "repo" / "seq")
    cfg = parse_pbtxt(os.path.join(target, "config.pbtxt"))  # valid ModelConfig text
    assert cfg["name"] == "seq" and cfg["backend"] == "python" and cfg["max_batch_size"] == 8
    assert cfg["input"] == [
        {"name": "a", "data_type": "TYPE_FP32", "dims": ["-1", "4"]},
        {"name": "m", "data_type": "TYPE_INT64", "dims": ["-1"]},
    ]
    assert cfg["output"] == [
        {"name": "y", "data_type": "TYPE_FP32", "dims": ["-1"]},
        {"name": "c", "data_type": "TYPE_INT64", "dims": ["-1"]},
    ]
    assert "dynamic_batching" in cfg and cfg["instance_group"] == [{"kind": "KIND_CPU", "count": 1}]
    assert "platform" not in cfg
    with open(os.path.join(target, "1", "model.onnx"), "rb") as f:
        assert f.read() == seq_bytes
    with open(os.path.join(target, "1", "model.py")) as f:
        text = f.read()
    assert text == MODEL_PY and text.startswith("from gert_triton import TritonPythonModel")
    ns: dict = {}
    exec(compile(text, "model.py", "exec"), ns)  # the one line is a complete model.py
    assert ns["TritonPythonModel"] is TritonPythonModel
    # options: max_batch_size, parameters; an existing entry is refused unless overwrite
    with pytest.raises(gert.GertError, match="exists"):
        init_repo(str(src), str(tmp_path / "repo"))
    target = init_repo(str(src), str(tmp_path / "repo"), max_batch_size=4, parameters={"streams": "2"}, overwrite=True)
    cfg = parse_pbtxt(os.path.join(target, "config.pbtxt"))
    assert cfg["max_batch_size"] == 4 and cfg["parameters"] == {"streams": {"string_value": "2"}}
    parse_parameters(cfg["parameters"])  # what repo init writes, gert_triton reads


def test_repo_init_not_batchable_and_bad_names(tmp_path):
    from gert_triton.repo import init_repo

    src = tmp_path / "fixed.onnx"
    src.write_bytes(fixed_model())
    cfg = parse_pbtxt(os.path.join(init_repo(str(src), str(tmp_path / "repo"), name="f"), "config.pbtxt"))
    assert cfg.get("max_batch_size", 0) == 0 and "dynamic_batching" not in cfg
    assert cfg["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": ["2", "3"]}]
    for name in ("a/b", ".hidden"):
        with pytest.raises(gert.GertError, match="name"):
            init_repo(str(src), str(tmp_path / "repo"), name=name)
    with pytest.raises(gert.GertError, match="not a file"):
        init_repo(str(tmp_path / "missing.onnx"), str(tmp_path / "repo"))


def test_repo_init_matches_autocomplete(pb, tmp_path, seq_bytes):
    """The config `gert repo init` writes is what auto_complete_config would have produced."""
    from gert_triton.repo import init_repo

    src = tmp_path / "seq.onnx"
    src.write_bytes(seq_bytes)
    target = init_repo(str(src), str(tmp_path / "repo"))
    written = parse_pbtxt(os.path.join(target, "config.pbtxt"))
    auto = autocomplete(pb, target)
    assert written["max_batch_size"] == auto["max_batch_size"]
    for kind in ("input", "output"):
        assert [(e["name"], e["data_type"], [int(d) for d in e["dims"]]) for e in written[kind]] == [
            (e["name"], e["data_type"], e["dims"]) for e in auto[kind]
        ]


def test_cli_repo_init(tmp_path, seq_bytes, capsys):
    from gert.cli import main

    src = tmp_path / "seq.onnx"
    src.write_bytes(seq_bytes)
    assert main(["repo", "init", str(src), str(tmp_path / "r"), "--name", "cls", "--max-batch-size", "2"]) == 0
    assert "gert serve" in capsys.readouterr().out
    assert parse_pbtxt(str(tmp_path / "r" / "cls" / "config.pbtxt"))["max_batch_size"] == 2
    assert main(["repo", "init", str(src), str(tmp_path / "r"), "--name", "cls"]) == 2  # exists
    assert "exists" in capsys.readouterr().err
    assert main(["repo", "init", str(src), str(tmp_path / "r"), "--name", "cls", "--force"]) == 0
    assert main(["repo", "init", str(tmp_path / "nope.onnx"), str(tmp_path / "r")]) == 2
    # parameters (checked before anything is written, as the model load would) and the instance count
    assert (
        main(
            [
                "repo",
                "init",
                str(src),
                str(tmp_path / "r"),
                "--name",
                "p",
                "--param",
                "streams=1",
                "--param",
                "gears=batch:1,4",
                "--param",
                'onnx_file=odd "name".onnx',
                "--instances",
                "2",
            ]
        )
        == 0
    )
    cfg = parse_pbtxt(str(tmp_path / "r" / "p" / "config.pbtxt"))
    assert cfg["parameters"] == {
        "streams": {"string_value": "1"},
        "gears": {"string_value": "batch:1,4"},
        "onnx_file": {"string_value": 'odd "name".onnx'},
    }
    assert cfg["instance_group"] == [{"kind": "KIND_CPU", "count": 2}]
    capsys.readouterr()
    for bad, says in (
        (["--param", "colour=red"], "unknown parameter 'colour'"),
        (["--param", "streams=zero"], "'streams'"),
        (["--param", "streams"], "KEY=VALUE"),
        (["--instances", "0"], "instances must be >= 1"),
    ):
        assert main(["repo", "init", str(src), str(tmp_path / "r"), "--name", "q", *bad]) == 2, bad
        assert says in capsys.readouterr().err, bad
        assert not os.path.exists(tmp_path / "r" / "q" / "config.pbtxt")


def test_cli_serve_arguments(tmp_path, monkeypatch, capsys):
    """Options after REPO are gert's; what follows `--` goes to tritonserver."""
    import gert_triton.supervisor as supervisor
    from gert.cli import main

    seen = []
    monkeypatch.setattr(
        supervisor,
        "run_supervised",
        lambda repo, ports, ts, extra, address, health, replica, *_: (
            seen.append((repo, *supervisor.replica_ports(ports, replica), ts, list(extra), address)) or 7
        ),
    )
    repo = str(tmp_path)
    assert main(["serve", repo, "--http-port", "1", "--grpc-port", "2", "--metrics-port", "3"]) == 7
    assert seen[-1] == (repo, 1, 2, 3, None, [], "127.0.0.1"), "loopback unless told otherwise"
    assert (
        main(
            [
                "serve",
                "--http-port",
                "1",
                repo,
                "--tritonserver",
                "/bin/ts",
                "--address",
                "0.0.0.0",
                "--",
                "--log-verbose=1",
                "--exit-timeout-secs",
                "5",
            ]
        )
        == 7
    )
    assert seen[-1] == (repo, 1, 8001, 8002, "/bin/ts", ["--log-verbose=1", "--exit-timeout-secs", "5"], "0.0.0.0")
    assert main(["serve", repo]) == 7 and seen[-1] == (repo, 8000, 8001, 8002, None, [], "127.0.0.1")
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["serve", repo, "--bogus"]) == 2


def test_server_helpers(tmp_path):
    from gert_triton import server

    with pytest.raises(gert.GertError, match="not an executable"):
        server.find_tritonserver(str(tmp_path / "nope"))
    with pytest.raises(gert.GertError, match="not a directory"):
        server.TritonServer(str(tmp_path / "missing"))
    root = server.pytriton_root()
    if root is None:
        pytest.skip("nvidia-pytriton is not installed")
    assert server.find_tritonserver() == os.path.join(root, "bin", "tritonserver")
    dest = server.prepare_backends(root, str(tmp_path / "backends"))
    stub = os.path.join(dest, "python", "triton_python_backend_stub")
    assert os.access(stub, os.X_OK) and os.path.isfile(os.path.join(dest, "python", "libtriton_python.so"))
    assert not os.path.exists(os.path.join(root, "backends", "python", "triton_python_backend_stub")), (
        "the installed package stays untouched"
    )
    s = server.TritonServer(str(tmp_path), http_port=1, grpc_port=2, metrics_port=3)
    s.backends = dest
    cmd = s.command()
    assert "--http-port=1" in cmd and "--grpc-port=2" in cmd and "--metrics-port=3" in cmd
    assert "--http-address=127.0.0.1" in cmd and f"--backend-directory={dest}" in cmd
    anywhere = server.TritonServer(str(tmp_path), http_port=1, grpc_port=2, metrics_port=3, address="0.0.0.0")
    anywhere.backends = dest
    cmd = anywhere.command()
    assert all(f"--{k}-address=0.0.0.0" in cmd for k in ("http", "grpc", "metrics")), cmd
    assert anywhere.url("http") == "127.0.0.1:1" and anywhere.url("grpc") == "127.0.0.1:2"


def test_split_batches_and_cancellation_checks_become_increments():
    """gert_split_batches_total (Model.stats()["split_batch"]) and gert_cancellation_checks_total (the AskPolicy's
    asks and unasked requests): each publication adds what was counted since the one before, nothing when unchanged."""
    from gert_triton.metrics import CANCEL_CHECKS, SPLIT_BATCHES, StatsChanges

    changes = StatsChanges({})
    stats = {"gears": {}, "streams": [], "batching": {}, "split_batch": {"split": 3, "whole": 0}}
    first = changes(stats, None, {"asked": 5, "skipped": 0})
    assert first == [
        (SPLIT_BATCHES, {"way": "split"}, "increment", 3),
        (CANCEL_CHECKS, {"check": "asked"}, "increment", 5),
    ]
    stats["split_batch"] = {"split": 3, "whole": 2}
    second = changes(stats, None, {"asked": 5, "skipped": 4})
    assert second == [
        (SPLIT_BATCHES, {"way": "whole"}, "increment", 2),
        (CANCEL_CHECKS, {"check": "skipped"}, "increment", 4),
    ]
    assert changes(stats, None, {"asked": 5, "skipped": 4}) == []
