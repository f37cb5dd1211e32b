"""gert_triton's config generation, load-time check, error codes, gear split, metric labels and BF16 tensors (issue
31 T1-T8, issue 22's repo-init repro), with the fake pb_utils; the same behaviour against the real server is in
test_triton_config_e2e.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from config_models import bf16_model, relu_model, shape_cases, stateful_sr_model, two_out_model
from gert import executor
from gert.errors import AclError, GertError, RequestTimeout
from gert_triton import TritonPythonModel
from gert_triton.config import ConfigError, parse_parameters, parse_state, served_version
from gert_triton.error_codes import triton_code
from gert_triton.gears import GearSplitter, gear_chunks
from gert_triton.metrics import GEAR_HITS, Publisher, gear_label
from gert_triton.model_config import TensorSpec, describe, onnx_io, triton_dtype
from gert_triton.repo import init_repo
from gert_triton.tensors import DLPackArray, array_from_dlpack, live_exports
from test_triton_unit import autocomplete, init_args, model_dir, params, parse_pbtxt, pb  # noqa: F401

pytestmark = RUNTIME
ml_dtypes = pytest.importorskip("ml_dtypes")


def triton_json(path: str) -> dict:
    """config.pbtxt as the stub's model_config JSON (int64 fields as numbers, max_batch_size always present)."""
    cfg = parse_pbtxt(path)
    cfg["max_batch_size"] = int(cfg.get("max_batch_size", 0))
    for kind in ("input", "output"):
        for e in cfg.get(kind, []):
            e["dims"] = [int(d) for d in e.get("dims", [])]
            if "reshape" in e:
                e["reshape"] = {"shape": [int(d) for d in e["reshape"].get("shape", [])]}
    return cfg


def write_case(tmp_path, case) -> str:
    src = tmp_path / f"{case.name}.onnx"
    src.write_bytes(case.onnx)
    return init_repo(str(src), str(tmp_path / "repo"), name=case.name, **case.init)


def run_one(pb, m, case) -> dict:
    """One request as the client sends it; an input whose config has a reshape arrives reshaped (Triton's core
    reshapes it before the backend sees it: [batch] + reshape.shape)."""
    reshape = {e["name"]: e["reshape"].get("shape", []) for e in m.config.get("input", []) if "reshape" in e}
    tensors = [
        pb.Tensor(k, v.reshape(v.shape[:1] + tuple(reshape[k])) if k in reshape else v) for k, v in case.inputs.items()
    ]
    kw = {"correlation_id": 11, "flags": 3} if case.sequence else {}
    (r,) = m.execute([pb.InferenceRequest(tensors, list(case.expected), **kw)])
    assert not r.has_error(), r.error()
    return {t.name(): t.as_numpy() for t in r.output_tensors()}


def load(pb, mdir: str, cfg: dict) -> TritonPythonModel:
    pb.set_model_dir(os.path.join(mdir, "1"))
    cfg = TritonPythonModel.auto_complete_config(pb.ModelConfig(cfg)).as_dict()
    m = TritonPythonModel()
    m.initialize(init_args(mdir, cfg))
    return m


# ---- issue 22: a config gert writes always loads --------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c in shape_cases() if c.name != "bf16"], ids=lambda c: c.name)
@pytest.mark.parametrize("how", ["repo_init", "auto_complete"])
def test_generated_config_loads_and_answers_for_every_shape_class(pb, tmp_path, case, how):
    """`gert repo init`'s config, and auto-complete's from a config that gives only the parameters (and the
    scheduler), load and answer one request with ONNX Runtime's result (BF16: the real server only, the fake has no
    DLPack)."""
    target = write_case(tmp_path, case)
    cfg = triton_json(os.path.join(target, "config.pbtxt"))
    if how == "auto_complete":
        cfg = {
            k: v for k, v in cfg.items() if k not in ("name", "input", "output", "max_batch_size", "dynamic_batching")
        }
        cfg = pb.default_config(case.name, **cfg)
    m = load(pb, target, cfg)
    try:
        out = run_one(pb, m, case)
        for name, want in case.expected.items():
            np.testing.assert_allclose(out[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{case.name} {name}")
    finally:
        m.finalize()


def test_zero_d_input_config_is_checked_by_the_same_function(pb, tmp_path):
    """issue 22's repro: the 0-d `sr` of a stateful model is dims [1] + reshape [] and the check accepts exactly
    that; dims that contradict the model are still refused, naming both."""
    case = shape_cases()[0]
    target = write_case(tmp_path, case)
    cfg = triton_json(os.path.join(target, "config.pbtxt"))
    sr = next(i for i in cfg["input"] if i["name"] == "sr")
    assert sr["dims"] == [1] and sr["reshape"] == {"shape": []}
    sr["dims"], sr["reshape"] = [2], {"shape": [2]}
    with pytest.raises(ConfigError, match=r"input 'sr' has dims \[2\].*takes dims \[1\] reshaped to \[\]"):
        load(pb, target, cfg)


# ---- T4: the served version -----------------------------------------------------------------------------------------


def test_served_version_follows_the_stub_and_the_version_policy(tmp_path):
    d = tmp_path / "m"
    for v in ("1", "2", "10"):
        (d / v).mkdir(parents=True)
    assert served_version(str(d / "2"), None) == (str(d), "2")  # the stub reports the version it loads
    assert served_version(str(d), None) == (str(d), "10")
    assert served_version(str(d), {"latest": {"num_versions": 2}}) == (str(d), "10")
    assert served_version(str(d), {"specific": {"versions": [1, 2]}}) == (str(d), "2")
    assert served_version(str(d), {"specific": {"versions": [1]}}) == (str(d), "1")
    assert served_version(str(d), {"all": {}}) == (str(d), "10")


def test_autocomplete_reads_the_pinned_version_not_the_highest(pb, tmp_path):
    mdir = model_dir(tmp_path, relu_model())
    (tmp_path / "m" / "2").mkdir()  # an empty version dir being staged
    pb.set_model_dir(mdir)  # a stub that reports the model dir
    cfg = pb.default_config("m", parameters=params(streams="1"), version_policy={"specific": {"versions": [1]}})
    out = TritonPythonModel.auto_complete_config(pb.ModelConfig(cfg)).as_dict()
    assert [i["name"] for i in out["input"]] == ["x"]


# ---- T5: ':' in state names -----------------------------------------------------------------------------------------


def test_state_parameter_with_colon_names_round_trips(tmp_path):
    assert parse_state("h:0=h_out:0;c:0=c_out:0") == {"h:0": "h_out:0", "c:0": "c_out:0"}
    assert parse_state("h:h_out") == {"h": "h_out"}  # the older form
    with pytest.raises(ConfigError, match="'state'"):
        parse_state("h=")
    case = next(c for c in shape_cases() if c.name == "colon_state")
    text = open(os.path.join(write_case(tmp_path, case), "config.pbtxt")).read()
    assert parse_parameters(triton_json(os.path.join(tmp_path, "repo", case.name, "config.pbtxt"))["parameters"]).get(
        "state"
    ) == {"h:0": "h_out:0"}, text


# ---- T6: BF16 -------------------------------------------------------------------------------------------------------


def test_bf16_has_a_triton_type_and_repo_init_writes_it(tmp_path):
    assert triton_dtype(ml_dtypes.bfloat16) == "TYPE_BF16"
    spec = describe(onnx_io(str(_write(tmp_path, "b.onnx", bf16_model()))))
    assert [t.data_type for t in spec.inputs + spec.outputs] == ["TYPE_BF16", "TYPE_BF16"]


def _write(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_dlpack_export_and_import_match_numpy():
    """The capsules gert_triton makes and reads are the ones numpy (a real DLPack producer and consumer) makes and
    reads; bfloat16, which numpy cannot carry, goes the same way with its own type code."""
    import gc

    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    imported = np.from_dlpack(DLPackArray(a))  # ours -> numpy
    np.testing.assert_array_equal(imported, a)
    assert live_exports() == 1
    del imported
    gc.collect()
    assert live_exports() == 0, "the consumer's deleter call releases the exported array"
    np.testing.assert_array_equal(array_from_dlpack(a.__dlpack__()), a)  # numpy -> ours
    b = np.array([[-1.5, 2, 0.25], [3, -4, 8]], dtype=ml_dtypes.bfloat16)
    back = array_from_dlpack(DLPackArray(b).__dlpack__())
    assert back.dtype == b.dtype and np.array_equal(back.view(np.uint16), b.view(np.uint16))
    cap = a.__dlpack__()
    array_from_dlpack(cap)
    with pytest.raises(GertError, match="unconsumed"):
        array_from_dlpack(cap)  # consumed once, as DLPack requires


# ---- T7: a default model.onnx symlinked from a shared store -------------------------------------------------------


def test_symlinked_default_model_loads(pb, tmp_path):
    store = _write(tmp_path, "relu.onnx", relu_model())
    mdir = tmp_path / "m"
    (mdir / "1").mkdir(parents=True)
    (mdir / "1" / "model.onnx").symlink_to(store)
    m = load(pb, str(mdir), pb.default_config("m", parameters=params(streams="1")))
    try:
        x = np.array([[-1, 2, -3, 4]], np.float32)
        (r,) = m.execute([pb.InferenceRequest([pb.Tensor("x", x)], ["y"])])
        np.testing.assert_array_equal(r.output_tensors()[0].as_numpy(), np.maximum(x, 0))
    finally:
        m.finalize()


# ---- T8: outputs a config leaves out ------------------------------------------------------------------------------


def test_autocomplete_keeps_a_trimmed_output_list(pb, tmp_path):
    """onnxruntime_backend's auto-complete fills the outputs only when the config lists none."""
    mdir = model_dir(tmp_path, two_out_model())
    cfg = autocomplete(pb, mdir, max_batch_size=8, output=[{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}])
    assert [o["name"] for o in cfg["output"]] == ["y"]
    assert [o["name"] for o in autocomplete(pb, mdir)["output"]] == ["y", "z"]


# ---- T1: batch gears under a non-pad policy -----------------------------------------------------------------------


def test_gear_chunks():
    assert gear_chunks(3, (1, 2, 4, 8)) == (2, 1)
    assert gear_chunks(7, (1, 2, 4, 8)) == (4, 2, 1)
    assert gear_chunks(6, (3, 4)) == (3, 3)
    assert gear_chunks(5, (2, 4)) == ()


@pytest.mark.parametrize("policy", ["exact", "dynamic", "auto"])
def test_merged_batch_of_a_non_gear_size_runs_as_gears(pb, tmp_path, policy):
    """T1: Triton merges three batch-1 requests (one execute, 3 rows); with gears 1,2,4,8 and a non-pad batch policy
    they run as 2 + 1 and each request gets its own row."""
    mdir = model_dir(tmp_path, relu_model())
    m = load(
        pb,
        mdir,
        pb.default_config(
            "m", max_batch_size=8, parameters=params(streams="1", gears="batch:1,2,4,8", shape_policy=f"batch:{policy}")
        ),
    )
    try:
        xs = [np.full((1, 4), -1.0 + i, np.float32) * (1 if i % 2 else -1) for i in range(3)]
        responses = m.execute([pb.InferenceRequest([pb.Tensor("x", x)], ["y"]) for x in xs])
        for x, r in zip(xs, responses):
            assert not r.has_error(), r.error()
            np.testing.assert_array_equal(r.output_tensors()[0].as_numpy(), np.maximum(x, 0))
        hits = {k: g["hits"] for k, g in m.model.stats()["gears"].items()}
        if policy == "dynamic":  # one dynamic-shape graph (key batch=-1) runs both pieces
            assert hits == {"batch=-1": 2}, hits
        else:
            assert hits == {"batch=2": 1, "batch=1": 1}, hits
    finally:
        m.finalize()


def test_gears_that_cannot_make_every_batch_size_fail_the_load(pb, tmp_path):
    mdir = model_dir(tmp_path, relu_model())
    with pytest.raises(ConfigError, match=r"'gears'.*cannot make up batch sizes \[1, 3\].*add gear 1"):
        load(
            pb,
            mdir,
            pb.default_config(
                "m", max_batch_size=4, parameters=params(streams="1", gears="batch:2,4", shape_policy="batch:exact")
            ),
        )
    assert GearSplitter((1, 4)).check(8) is None


# ---- T2 / T3: bounded labels, one series per instance ---------------------------------------------------------------


def test_gear_label_is_bounded():
    gears = {"batch": frozenset({"1", "2", "4"}), "S": frozenset()}
    assert gear_label("S=37,batch=4", gears) == "S=dynamic,batch=4"
    assert gear_label("S=38,batch=3", gears) == "S=dynamic,batch=dynamic"
    assert gear_label("static", gears) == "static"


def test_a_reloaded_instance_never_shares_a_series_with_the_stub_it_replaces(pb):
    """A reload starts a new stub with the same model, version and instance names while the old stub still serves.
    Triton hands both stubs one shared series when their labels are equal, and the first to delete its Metric frees
    it under the other (triton-inference-server/server#8663: a use after free in the server). The stub's pid keeps
    the two sets of series apart."""

    def publisher(pid: int) -> Publisher:
        return Publisher(
            pb,
            "m",
            lambda: [(GEAR_HITS, {"gear": "batch=1"}, "increment", 1.0)],
            version="1",
            instance="m_0_0",
            pid=pid,
        )

    old, new = publisher(1001), publisher(1002)
    try:
        for p in (old, new):
            assert p.flush(10)
        labels = [
            tuple(sorted(x.labels.items())) for f in pb.FAMILIES if f.name == "gert_gear_hits_total" for x in f.metrics
        ]
        assert len(labels) == 2 and len(set(labels)) == 2, labels
        assert sorted(dict(x)["pid"] for x in labels) == ["1001", "1002"]
    finally:
        old.close()
        new.close()


def test_auto_policy_sizes_share_one_label_and_instances_their_own_series(pb, tmp_path, monkeypatch):
    """T2: 12 distinct sizes of an auto dim make one gear series per batch gear, not one per size; executor's label
    cache stays bounded. T3: two instances of one model publish separate series (an ``instance`` label)."""
    monkeypatch.setattr(executor, "_LABELS", {})
    monkeypatch.setattr(executor, "_LABELS_KEPT", 4)
    mdir = model_dir(tmp_path, relu_model(dims=("N", "S")))
    pb.set_model_dir(mdir)
    cfg = TritonPythonModel.auto_complete_config(
        pb.ModelConfig(pb.default_config("m", parameters=params(streams="1", metrics_interval_ms="0")))
    ).as_dict()
    models = []
    for instance in ("m_0_0", "m_0_1"):
        m = TritonPythonModel()
        m.initialize({**init_args(mdir, cfg), "model_instance_name": instance})
        models.append(m)
    try:
        rng = np.random.default_rng(0)
        for s in range(1, 13):
            x = rng.standard_normal((1, s)).astype(np.float32)
            (r,) = models[s % 2].execute([pb.InferenceRequest([pb.Tensor("x", x)], ["y"])])
            np.testing.assert_array_equal(r.output_tensors()[0].as_numpy(), np.maximum(x, 0))
        for m in models:
            assert m.metrics.flush(10)
        assert len(executor._LABELS) <= 4
        series = [
            (dict(x.labels)["instance"], dict(x.labels)["gear"], x.value())
            for f in pb.FAMILIES
            if f.name == "gert_gear_hits_total"
            for x in f.metrics
        ]
        assert sorted(series) == [("m_0_0", "S=dynamic,batch=1", 6.0), ("m_0_1", "S=dynamic,batch=1", 6.0)]
        assert all(
            dict(x.labels)["version"] == "1" for f in pb.FAMILIES if f.name == "gert_padding_ratio" for x in f.metrics
        )
    finally:
        for m in models:
            m.finalize()


# ---- issue 22: one map from gert errors to Triton codes ------------------------------------------------------------


def test_error_codes():
    oom = AclError(207001, "out of memory")
    try:
        raise GertError("sequence 3: out of device memory for state 'h'") from oom
    except GertError as e:
        wrapped = e
    assert triton_code(GertError("bad shape")) == "INVALID_ARG"
    assert triton_code(RequestTimeout("late", 0, 0, 0.1)) == "UNAVAILABLE"
    assert triton_code(wrapped) == "UNAVAILABLE" and triton_code(wrapped, checking=True) == "UNAVAILABLE"
    assert triton_code(GertError("out of device memory, said in text only")) == "INVALID_ARG"  # never by text
    assert triton_code(AclError(507015, "aicore")) == "INTERNAL"
    assert triton_code(ValueError("x")) == "INTERNAL" and triton_code(ValueError("x"), checking=True) == "INVALID_ARG"


def test_bf16_model_loads_with_gert_itself(tmp_path):
    """The model gert runs (exp7b) and gert_triton now describes; served end to end in test_triton_config_e2e."""
    m = gert.load(str(_write(tmp_path, "b.onnx", bf16_model())), streams=1)
    try:
        x = np.array([[-1, 2, -3, 4]], dtype=ml_dtypes.bfloat16)
        np.testing.assert_array_equal(m.run({"x": x})["y"].astype(np.float32), (x + x).astype(np.float32))
    finally:
        m.close()


def test_describe_gives_the_zero_d_input_no_batch_axis_and_hides_the_state(tmp_path):
    spec = describe(
        onnx_io(str(_write(tmp_path, "s.onnx", stateful_sr_model()))), {"state": "stateN"}, ["input:0", "state:1"]
    )
    assert spec.inputs == (TensorSpec("input", "TYPE_FP32", (-1, 4), 0), TensorSpec("sr", "TYPE_FP32", (), None))
    assert spec.outputs == (TensorSpec("output", "TYPE_FP32", (-1, 4), 0),) and spec.batchable


def test_config_naming_an_output_the_model_lacks_or_batching_a_fixed_model_is_refused(pb, tmp_path):
    """As onnxruntime_backend refuses them: an output the model does not have, max_batch_size > 0 for a model whose
    first dims are fixed (its rows could not be told apart)."""
    mdir = model_dir(tmp_path, relu_model())
    cfg = autocomplete(pb, mdir, parameters=params(streams="1"))
    bad = json.loads(json.dumps(cfg))
    bad["output"].append({"name": "nope", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(ConfigError, match="output 'nope' is not an output of the ONNX model"):
        TritonPythonModel().initialize(init_args(mdir, bad))
    fixed = model_dir(tmp_path / "f", relu_model(dims=(2, 4)))
    cfg = autocomplete(pb, fixed, parameters=params(streams="1"))
    assert cfg["max_batch_size"] == 0
    cfg = {
        **cfg,
        "max_batch_size": 8,
        "input": [{**cfg["input"][0], "dims": [4]}],
        "output": [{**cfg["output"][0], "dims": [4]}],
    }
    with pytest.raises(ConfigError, match="max_batch_size is 8, but the model has no batch axis"):
        TritonPythonModel().initialize(init_args(fixed, cfg))
