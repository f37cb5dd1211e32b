"""Split, merge and pad on any batch axis (issue 36, item 3): each request's outputs equal ONNX Runtime run on that
request alone, whichever axis carries the batch, and a model whose rows cannot be told apart is never padded,
merged, split or chunked.

The property draws the batch axis position in a [N, T, F] input (any order), T dynamic (auto, pad with gears, exact,
dynamic) or fixed, a second input with the batch on axis 0, batch gears / max_batch, streams with split_batch, and a
front door (run, run(list), run_batch, split_batch, submit, run from threads). Explicit examples keep the shapes the
fuzzers found (tests/../shared/repros/rows/axis1_*.py, batch_on_two_axes_split.py).
"""

from __future__ import annotations

import concurrent.futures
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from onnx import helper

import fake_pb_utils
import gert
from _helpers import RUNTIME
from gert.core.rows import Rows
from gert.errors import GertError
from models import _const, make_model, ort_session, vi

pytestmark = RUNTIME

F = 4
_ORT: dict = {}


# ---- models --------------------------------------------------------------------------------------------------------


def axes_model(order: str, t_dynamic: bool, second: bool) -> bytes:
    """x with the axes N (batch), T and F (4) in ``order`` ("TNF": [T, N, 4]) -> y = Tanh(x) (same shape),
    s = ReduceSum(x over F) (the batch axis moves when F comes before N), m = x @ W [.., 3] when F is last;
    ``second``: c [N, 2] -> c3 = c * 3 (an input and output with the batch on axis 0)."""
    dims = {"N": "N", "T": "T" if t_dynamic else 3, "F": F}
    shape = [dims[a] for a in order]
    f_at = order.index("F")
    nodes = [helper.make_node("Tanh", ["x"], ["y"]), helper.make_node("ReduceSum", ["x", "f_axis"], ["s"], keepdims=0)]
    inits = [_const("f_axis", np.array([f_at], np.int64))]
    outputs = [vi("y", np.float32, shape), vi("s", np.float32, [d for i, d in enumerate(shape) if i != f_at])]
    if order[-1] == "F":
        nodes.append(helper.make_node("MatMul", ["x", "W"], ["m"]))
        inits.append(_const("W", np.random.default_rng(3).standard_normal((F, 3)).astype(np.float32)))
        outputs.append(vi("m", np.float32, shape[:-1] + [3]))
    inputs = [vi("x", np.float32, shape)]
    if second:
        nodes.append(helper.make_node("Mul", ["c", "three"], ["c3"]))
        inits.append(_const("three", np.array(3, np.float32)))
        inputs.append(vi("c", np.float32, ["N", 2]))
        outputs.append(vi("c3", np.float32, ["N", 2]))
    return make_model(nodes, inputs, outputs, inits, name=f"axes_{order}_{int(t_dynamic)}{int(second)}")


def gram_model() -> bytes:
    """x [N, 3] -> y = x @ x^T [N, N]: the batch on two axes of one output."""
    return make_model(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), helper.make_node("MatMul", ["x", "xt"], ["y"])],
        [vi("x", np.float32, ["N", 3])],
        [vi("y", np.float32, ["N", "N"])],
        name="gram",
    )


def batch_max_model() -> bytes:
    """x [N, 4] -> y = x + 1 [N, 4], mx = ReduceMax over the batch [4]: an output without the batch (inseparable)."""
    nodes = [
        helper.make_node("Add", ["x", "one"], ["y"]),
        helper.make_node("ReduceMax", ["x", "ax0"], ["mx"], keepdims=0),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, ["N", 4])],
        [vi("y", np.float32, ["N", 4]), vi("mx", np.float32, [4])],
        [_const("one", np.array(1, np.float32)), _const("ax0", np.array([0], np.int64))],
        name="batch_max",
        opset=18,
    )


def feeds(order: str, second: bool, n: int, t: int, rng: np.random.Generator) -> dict:
    sizes = {"N": n, "T": t, "F": F}
    out = {"x": rng.standard_normal([sizes[a] for a in order]).astype(np.float32)}
    if second:
        out["c"] = rng.standard_normal((n, 2)).astype(np.float32)
    return out


def ort_alone(model: bytes, inputs: dict) -> dict:
    sess = _ORT.get(model)
    if sess is None:
        sess = _ORT[model] = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, inputs)))


def assert_alone(model: bytes, inputs: dict, got: dict, what: str) -> None:
    want = ort_alone(model, inputs)
    assert sorted(got) == sorted(want), what
    for k, w in want.items():
        g = got[k]
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{what}: output {k}")


def run_door(m: gert.Model, door: str, reqs: list) -> list:
    """Each request's outputs, or its GertError, through one front door (run(list) and run_batch: the list's error
    raised)."""
    if door in ("run", "split_batch"):
        return [_or_error(m.run, r) for r in reqs]
    if door == "run_list":
        return m.run(reqs)
    if door == "run_batch":
        return m.run_batch(reqs)
    if door == "submit":
        return [_or_error(f.result, 60) for f in [m.submit(r) for r in reqs]]
    if door == "threads":
        with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
            return list(pool.map(lambda r: _or_error(m.run, r), reqs))
    raise AssertionError(door)


def _or_error(fn, *args):
    try:
        return fn(*args)
    except GertError as e:
        return e


DOORS = ["run", "run_list", "run_batch", "split_batch", "submit", "threads"]
T_POLICIES = [None, "pad", "exact", "dynamic"]


# ---- the property ------------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    order=st.sampled_from(["NTF", "TNF", "TFN", "FTN", "NFT", "FNT"]),
    t_dynamic=st.booleans(),
    t_policy=st.sampled_from(T_POLICIES),
    second=st.booleans(),
    gears=st.sampled_from([None, (1, 2), (2, 4), (1, 2, 4), (3,)]),
    max_batch=st.sampled_from([None, 2, 3]),
    door=st.sampled_from(DOORS),
    rows=st.lists(st.integers(1, 7), min_size=1, max_size=5),
    t_sizes=st.lists(st.integers(1, 5), min_size=1, max_size=2),
    seed=st.integers(0, 2**16),
)
@example(
    order="TNF",
    t_dynamic=False,
    t_policy=None,
    second=False,
    gears=None,
    max_batch=2,
    door="run",
    rows=[5, 5],
    t_sizes=[2],
    seed=0,
)  # axis1_split_valueerror.py: a strided chunk reached the compiled path
@example(
    order="TNF",
    t_dynamic=True,
    t_policy=None,
    second=False,
    gears=None,
    max_batch=2,
    door="run",
    rows=[5],
    t_sizes=[2],
    seed=0,
)  # axis1_split_wrong_values.py: the dynamic-shape path uploaded a strided chunk's memory
@example(
    order="TNF",
    t_dynamic=True,
    t_policy=None,
    second=False,
    gears=None,
    max_batch=None,
    door="split_batch",
    rows=[5],
    t_sizes=[2],
    seed=0,
)  # the same over two streams with split_batch
def test_every_request_gets_its_own_rows_on_any_batch_axis(
    order, t_dynamic, t_policy, second, gears, max_batch, door, rows, t_sizes, seed
):
    model = axes_model(order, t_dynamic, second)
    kw: dict = {"batch_dim": "N"}
    if gears is not None:
        kw["gears"] = {"batch": list(gears)}
    elif max_batch is not None:
        kw["max_batch"] = max_batch
    if t_dynamic and t_policy is not None:
        kw["shape_policy"] = {"T": t_policy}
        if t_policy == "pad":
            kw.setdefault("gears", {})["T"] = [2, 5]
    if door == "split_batch":
        kw.update(streams=2, split_batch=True)
    rng = np.random.default_rng(seed)
    same_t = door == "run_batch" or not t_dynamic  # run_batch takes one batch key
    reqs = [
        feeds(order, second, n, 3 if not t_dynamic else t_sizes[0 if same_t else i % len(t_sizes)], rng)
        for i, n in enumerate(rows)
    ]
    with gert.load(model, **kw) as m:
        assert m.engine.batcher.enabled
        for again in range(2):  # the second time the sizes have static graphs (the compiled path)
            for i, (r, got) in enumerate(zip(reqs, run_door(m, door, reqs))):
                assert not isinstance(got, GertError), f"{order} {kw} {door} request {i} of {rows}: {got}"
                assert_alone(model, r, got, f"{order} {kw} {door} request {i} of {rows} (round {again})")


# ---- explicit cases ----------------------------------------------------------------------------------------------


def test_pieces_on_a_non_zero_axis_are_views_laid_out_once():
    """A merge, a chunk and a split_batch share of a batch on axis 1 copy nothing on the host until the executor lays
    the run's input out (Rows.write_to: one copy, padding included)."""
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(100, 100 + 2 * 2 * 4, dtype=np.float32).reshape(2, 2, 4)
    r = Rows([a, b], "input 'x'", axis=1)
    joined = np.concatenate([a, b], axis=1)
    assert r.shape == (2, 5, 4) and r.nbytes == joined.nbytes
    for start in range(6):
        for n in range(6 - start):
            piece = r.take(start, n)
            assert piece.shape == (2, n, 4)
            np.testing.assert_array_equal(np.asarray(piece), joined[:, start : start + n])
            assert all(np.shares_memory(p, a) or np.shares_memory(p, b) for p in piece.parts if p.size)
    dst = np.full((2, 6, 4), -1, np.float32)
    r.take(1, 4).write_to(dst)
    np.testing.assert_array_equal(dst[:, :4], joined[:, 1:5])
    assert (dst[:, 4:] == -1).all()  # the padding is the caller's
    with pytest.raises(TypeError):
        r[0:2]  # row slicing is for axis 0; take() names the axis-free operation
    with pytest.raises(GertError, match=r"input 'x': request 1 has shape \(2, 2, 5\), request 0 has \(2, 3, 4\)"):
        Rows([a, np.zeros((2, 2, 5), np.float32)], "input 'x'", axis=1)
    with gert.load(axes_model("TNF", False, True), batch_dim="N") as m:
        batcher = m.engine.batcher
        assert batcher.in_axes == {"x": 1, "c": 0} and batcher.out_axes == {"y": 1, "s": 1, "m": 1, "c3": 0}
        reqs = [{"x": a, "c": np.zeros((3, 2), np.float32)}, {"x": b, "c": np.ones((2, 2), np.float32)}]
        merged = batcher.merge(reqs)
        assert type(merged["x"]) is Rows and merged["x"].axis == 1 and merged["x"].parts[0] is a
        piece = batcher.piece({"x": a, "c": reqs[0]["c"]}, 1, 2)
        assert type(piece["x"]) is Rows and np.shares_memory(piece["x"].parts[0], a)  # strided: laid out later
        assert type(piece["c"]) is np.ndarray and piece["c"].flags.c_contiguous  # axis 0: a view uploaded as it is


def _batcher_calls(batcher, reqs: list) -> tuple:
    """Each way to pad, merge or split a batch, as a call on ``batcher``."""
    return (
        lambda: batcher.merge(reqs[:2]),
        lambda: batcher.split({"y": np.zeros((3, 3))}, [1, 2]),
        lambda: batcher.join([{"y": np.zeros((1, 1))}] * 2),
        lambda: batcher.piece(reqs[1], 0, 1),
    )


def test_batch_on_two_axes_is_never_split_or_merged():
    """x @ x^T with output_dims naming both axes: the Batcher refuses to pad, merge, split or chunk it, and every
    front door gives each request its own [n, n] (or a clear refusal of a size it would have had to pad or cut)."""
    model = gram_model()
    rng = np.random.default_rng(1)
    reqs = [{"x": rng.standard_normal((n, 3)).astype(np.float32)} for n in (1, 3, 2, 5, 4, 8)]
    for kw in ({"max_batch": 4}, {"streams": 2, "split_batch": True}, {}):
        try:
            m = gert.load(model, output_dims={"y": {0: "batch", 1: "batch"}}, **kw)
        except GertError as e:  # refused at load: as good as never split
            assert "'y'" in str(e), e
            continue
        with m:
            batcher = m.engine.batcher
            assert not batcher.enabled and ("output 'y'" in batcher.why or "['y']" in batcher.why), batcher.why
            for call in _batcher_calls(batcher, reqs):
                with pytest.raises(GertError, match="cannot be"):
                    call()
            for door in DOORS:
                # run(list) / run_batch raise the list's first error: sizes a padded batch takes as they are
                sent = [r for r in reqs if len(r["x"]) in (1, 2, 4)] if door in ("run_list", "run_batch") else reqs
                for i, (r, got) in enumerate(zip(sent, run_door(m, door, sent))):
                    if isinstance(got, GertError):
                        assert "cannot be padded, merged or split" in str(got), got
                        continue
                    assert_alone(model, r, got, f"gram {kw} {door} request {i}")


@pytest.mark.parametrize(
    "kw",
    [
        {"max_batch": 2},
        {"gears": {"batch": [1, 2, 4]}},
        {"streams": 2, "split_batch": True},
        {"max_batch": 2, "streams": 2, "split_batch": True},
    ],
    ids=str,
)
def test_an_inseparable_model_runs_every_request_alone_and_whole(kw):
    """A reduction over the batch (plan.unsplit): no front door pads, merges, chunks or splits its batch, whatever
    max_batch, gears or split_batch say (each request's max is its own, of all its rows)."""
    model = batch_max_model()
    rng = np.random.default_rng(2)
    reqs = [{"x": rng.integers(-50, -1, (n, 4)).astype(np.float32)} for n in (1, 3, 5, 2, 4)]
    with gert.load(model, **kw) as m:
        assert not m.engine.batcher.enabled and not m.engine.batch_limit
        for door in DOORS:
            results = (
                [_or_error(lambda r, door=door: run_door(m, door, [r])[0], r) for r in reqs]
                if door in ("run_list", "run_batch")
                else run_door(m, door, reqs)
            )
            for i, (r, got) in enumerate(zip(reqs, results)):
                if isinstance(got, GertError):  # exact batch gears: a size that is not one is refused, by name
                    assert "gear" in str(got) and "gears" in kw, got
                    continue
                assert_alone(model, r, got, f"batch_max {kw} {door} request {i}")


def test_triton_never_merges_or_cuts_an_inseparable_batch(tmp_path, monkeypatch):
    """gert_triton with max_batch_size > 0 and batch gears under a non-pad policy cuts a merged batch that is no gear
    into gear-sized pieces; a model whose rows cannot be told apart (x @ x^T) is neither merged nor cut: in one
    execute each request gets its own [n, n], and a 3-row request (gears 1, 2, 4) is refused alone, naming them."""
    model = gram_model()
    pb = fake_pb_utils.install(monkeypatch)
    d = os.path.join(str(tmp_path), "gram")
    os.makedirs(os.path.join(d, "1"))
    with open(os.path.join(d, "1", "model.onnx"), "wb") as f:
        f.write(model)
    pb.set_model_dir(d)
    from gert_triton import TritonPythonModel

    params = {"streams": {"string_value": "1"}, "gears": {"string_value": "batch:1,2,4"}}
    cfg = TritonPythonModel.auto_complete_config(
        pb.ModelConfig(pb.default_config("gram", max_batch_size=4, parameters=params))
    ).as_dict()
    try:
        tm = TritonPythonModel()
        tm.initialize(
            {
                "model_config": json.dumps(cfg),
                "model_instance_kind": "CPU",
                "model_instance_name": "gram_0",
                "model_instance_device_id": "0",
                "model_repository": d,
                "model_version": "1",
                "model_name": "gram",
            }
        )
    except GertError as e:  # refused at load: never merged either
        assert "'y'" in str(e), e
        return
    try:
        assert not tm.model.engine.batcher.enabled
        rng = np.random.default_rng(4)
        reqs = [{"x": rng.standard_normal((n, 3)).astype(np.float32)} for n in (2, 3, 4, 1)]
        responses = tm.execute([pb.InferenceRequest([pb.Tensor(k, v) for k, v in r.items()], ["y"]) for r in reqs])
        for r, resp in zip(reqs, responses):
            n = len(r["x"])
            if n == 3:
                assert resp.has_error() and resp.error().code() == pb.TritonError.INVALID_ARG
                assert "gears [1, 2, 4]" in resp.error().message(), resp.error().message()
                continue
            assert not resp.has_error(), resp.error().message()
            got = {t.name(): t.as_numpy() for t in resp.output_tensors()}
            if tm.model.engine.batcher.out_axes["y"] is None:  # gert_triton.layout: no batch axis -> a leading 1
                assert got["y"].shape[0] == 1, got["y"].shape
                got["y"] = got["y"][0]
            assert_alone(model, r, got, f"triton {n} rows")
    finally:
        tm.finalize()


def test_run_batch_of_requests_with_other_non_batch_shapes_runs_them_by_group():
    """run_batch takes requests that share a batch key; given requests whose other dims differ it groups them
    (run_many) instead of failing every one on the merge (found by the row fuzzer: [6, 7, 2] beside [6, 10, 2])."""
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x", "ax"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1], np.int64), "ax")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    rng = np.random.default_rng(0)
    reqs = [{"x": rng.standard_normal(s).astype(np.float32)} for s in ((6, 7, 2), (6, 10, 2), (2, 7, 2))]
    with gert.load(m.SerializeToString()) as model:
        for r, got in zip(reqs, model.run_batch(reqs)):
            np.testing.assert_array_equal(got["y"], r["x"][..., None])
