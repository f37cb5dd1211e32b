"""GE shape semantics (ge-shapes-and-cache.md, part A): CompileGraph infers shapes and folds constants, it never runs
the model; an output whose shape depends on input values makes an unknown-shape graph even with fixed inputs.

- Models in which an input's value decides a shape or a branch (NonMaxSuppression, Resize by input scales, If on an
  input scalar, NonZero) compile, report not static, and run equal to ONNX Runtime with that run's values.
- Shape operands from initializers fold (a Reshape / Resize by constant scales stays static); an If with a constant
  condition is pruned (static even when its branches' shapes differ).
- The summary of an unknown-shape graph: is_static false, its shape / dtype / memory getters fail (never -1).
- Outputs of unknown-shape graphs: GE allocates them, or copies into caller buffers large enough (too small fails).
- A model whose graph outputs carry no shape in the ONNX file loads and runs.
"""

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import gert
from _helpers import RUNTIME
from models import load, make_model, ort_run, vi

pytestmark = RUNTIME


def _c(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def without_output_shapes(model: bytes, untyped=()) -> bytes:
    """The model with its graph outputs' shapes removed (legal ONNX: shapes are left to inference), and the types of
    the outputs named in ``untyped`` too. Built after onnx.checker ran on the full model (it wants the fields)."""
    m = onnx.load_from_string(model)
    for o in m.graph.output:
        if o.name in untyped:
            o.ClearField("type")
        else:
            o.type.tensor_type.ClearField("shape")
    return m.SerializeToString()


# ---- models ---------------------------------------------------------------------------------------------------------


def nms_model() -> bytes:
    """boxes f32[1, 8, 4], scores f32[1, 1, 8] -> selected i64[?, 3] (NonMaxSuppression, IoU 0.5, score > 0.2)."""
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_th"], ["selected"])
    return make_model(
        [node],
        [vi("boxes", np.float32, [1, 8, 4]), vi("scores", np.float32, [1, 1, 8])],
        [vi("selected", np.int64, ["n_selected", 3])],
        [
            _c("max_out", np.array([8], np.int64)),
            _c("iou", np.array([0.5], np.float32)),
            _c("score_th", np.array([0.2], np.float32)),
        ],
        name="nms",
    )


def nms_inputs(seed: int):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 10, (1, 8, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 4, (1, 8, 2)).astype(np.float32)], axis=2)
    return [boxes, rng.uniform(0, 1, (1, 1, 8)).astype(np.float32)]


def resize_scales_model() -> bytes:
    """x f32[1, 1, 4, 4] resized by the scales input f32[4] (nearest): the output shape is the scales' value."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    return without_output_shapes(
        make_model(
            [node],
            [vi("x", np.float32, [1, 1, 4, 4]), vi("scales", np.float32, [4])],
            [vi("y", np.float32, [1, 1, "h", "w"])],
            name="resize_scales",
        )
    )


def resize_const_model() -> bytes:
    """The same Resize with its scales an initializer: folded at compile, the graph is static."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    return without_output_shapes(
        make_model(
            [node],
            [vi("x", np.float32, [1, 1, 4, 4])],
            [vi("y", np.float32, [1, 1, 8, 6])],
            [_c("scales", np.array([1, 1, 2, 1.5], np.float32))],
            name="resize_const",
        )
    )


def if_model(cond_from_input: bool = True) -> bytes:
    """A recurrent-style step: state f32[2, 3] and a mode flag (bool scalar input, or a constant). Then: the state
    doubled [2, 3]; else: its rows summed [1, 3] (branches of different shapes)."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["state", "state"], ["t"])], "then", [], [vi("t", np.float32, [2, 3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("ReduceSum", ["state", "axes0"], ["e"], keepdims=1)],
        "else",
        [],
        [vi("e", np.float32, [1, 3])],
    )
    node = helper.make_node("If", ["mode"], ["out"], then_branch=then_g, else_branch=else_g)
    inputs = [vi("state", np.float32, [2, 3])]
    inits = [_c("axes0", np.array([0], np.int64))]
    if cond_from_input:
        inputs.append(vi("mode", np.bool_, []))
    else:
        inits.append(_c("mode", np.array(False)))
    return without_output_shapes(
        make_model(
            [node], inputs, [vi("out", np.float32, ["r", 3])], inits, name="if_input" if cond_from_input else "if_const"
        )
    )


def nonzero_model() -> bytes:
    """x f32[3, 4] -> idx i64[2, ?] = NonZero(x > 0), and a static output rowsum f32[3]."""
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("NonZero", ["pos"], ["idx"]),
        helper.make_node("ReduceSum", ["x", "axes1"], ["rowsum"], keepdims=0),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, [3, 4])],
        [vi("idx", np.int64, [2, "nnz"]), vi("rowsum", np.float32, [3])],
        [_c("zero", np.array(0, np.float32)), _c("axes1", np.array([1], np.int64))],
        name="nonzero",
    )


def reshape_const_model() -> bytes:
    """x f32[2, 6] -> Reshape by an initializer shape, then by Shape-derived dims: folded, static, no -1 left."""
    nodes = [
        helper.make_node("Reshape", ["x", "shape34"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "idx1"], ["cols"]),
        helper.make_node("Concat", ["minus1", "cols"], ["shape2"], axis=0),
        helper.make_node("Reshape", ["r", "shape2"], ["y"]),
    ]
    return without_output_shapes(
        make_model(
            nodes,
            [vi("x", np.float32, [2, 6])],
            [vi("y", np.float32, ["a", "b"])],
            [
                _c("shape34", np.array([3, 4], np.int64)),
                _c("idx1", np.array([1], np.int64)),
                _c("minus1", np.array([-1], np.int64)),
            ],
            name="reshape_const",
        )
    )


def assert_unknown_shape(summary) -> None:
    assert not summary.is_static
    for field in ("output_shapes", "output_dtypes", "const_memory_size", "feature_memory_size"):
        with pytest.raises(gert.GeError, match="unknown-shape graph") as ei:
            getattr(summary, field)
        assert ei.value.code == 0xFFFFFFFF


def run_ge(session, gid, stream, arrays, outputs=None):
    """ExecuteGraphWithStreamAsync with GE-allocated outputs (or the given DeviceTensors); numpy results."""
    ins = [gert.DeviceTensor.from_numpy(a, stream) for a in arrays]
    outs = session.execute_async(gid, stream, ins, outputs)
    results = [t.to_numpy(stream) for t in outs]
    stream.synchronize()
    return results


def assert_equal_ort(got, ref, what):
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        assert g.dtype == r.dtype and g.shape == r.shape, f"{what} output {i}: {g.dtype}{g.shape} != {r.dtype}{r.shape}"
        np.testing.assert_array_equal(g, r, err_msg=f"{what} output {i}")


# ---- compile: inference, folding, pruning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, feeds",
    [
        (nms_model, [nms_inputs(1), nms_inputs(2), nms_inputs(3)]),
        (
            resize_scales_model,
            [
                [np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), np.array(s, np.float32)]
                for s in ([1, 1, 2, 2], [1, 1, 0.5, 1], [1, 1, 3, 0.75])
            ],
        ),
        (if_model, [[np.arange(6, dtype=np.float32).reshape(2, 3), np.array(m)] for m in (True, False, True)]),
        (nonzero_model, [[np.random.default_rng(s).standard_normal((3, 4)).astype(np.float32)] for s in (1, 2, 3)]),
    ],
    ids=["nms", "resize_scales", "if_input", "nonzero"],
)
def test_value_dependent_graph_is_unknown_shape_and_runs(session, stream, make, feeds):
    """Fixed input shapes, yet an output's shape comes from input values: CompileGraph succeeds without running the
    model, the graph is not static, and every run equals ONNX Runtime with that run's values."""
    model = make()
    gid = load(session, model, stream)
    assert_unknown_shape(session.summary(gid))
    shapes = set()
    for arrays in feeds:
        ref = ort_run(model, arrays)
        assert_equal_ort(run_ge(session, gid, stream, arrays), ref, model[:0] or make.__name__)
        shapes.add(tuple(r.shape for r in ref))
    assert len(shapes) > 1, "the runs should have produced different output shapes"


def test_compile_does_not_run_the_model(session, stream):
    """Zero-filled inputs would fail these graphs (NMS and Resize took them; a Mod by an input would divide by zero):
    compiling must not compute. Counted: no provider run happens at CompileGraph."""
    mod = make_model(
        [helper.make_node("Mod", ["a", "b"], ["y"])],
        [vi("a", np.int32, [4]), vi("b", np.int32, [4])],
        [vi("y", np.int32, [4])],
        name="mod_input",
    )
    for model in (mod, resize_scales_model()):
        gid = 50_000 + len(model) % 1000
        session.add_graph(gid, gert.Graph.from_onnx(model))
        session.compile_graph(gid)  # would fail on zeros: "Integer modulo by zero" / "scale value should be > 0"
        session.remove_graph(gid)
    gid = load(session, mod, stream)
    assert session.summary(gid).is_static and session.summary(gid).output_shapes == [(4,)]
    a, b = np.array([7, 8, 9, 10], np.int32), np.array([2, 3, 4, 6], np.int32)
    out = gert.DeviceTensor.empty((4,), np.int32)
    (y,) = run_ge(session, gid, stream, [a, b], [out])
    np.testing.assert_array_equal(y, a % b)


def test_constants_fold_and_constant_if_is_pruned(session, stream):
    """Initializer-fed Resize scales and Reshape shapes (and Shape-derived dims) fold: static, with the shapes GE
    would report; an If on a constant condition keeps one branch, so it is static although its branches differ."""
    cases = [
        (resize_const_model(), [np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)], [(1, 1, 8, 6)]),
        (reshape_const_model(), [np.arange(12, dtype=np.float32).reshape(2, 6)], [(3, 4)]),
        (if_model(cond_from_input=False), [np.arange(6, dtype=np.float32).reshape(2, 3)], [(1, 3)]),
    ]
    for model, arrays, shapes in cases:
        gid = load(session, model, stream)
        s = session.summary(gid)
        assert s.is_static and s.output_shapes == shapes and s.output_dtypes == [np.dtype(np.float32)]
        outs = [gert.DeviceTensor.empty(sh, np.float32) for sh in shapes]
        assert_equal_ort(run_ge(session, gid, stream, arrays, outs), ort_run(model, arrays), "folded")


def test_static_graph_with_dynamic_inputs_stays_dynamic(session, stream):
    """The same graph with a symbolic input dim is dynamic (-1 input dims), and fixed by input_shape it is static."""
    model = without_output_shapes(
        make_model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [vi("x", np.float32, ["n", 3])],
            [vi("y", np.float32, ["n", 3])],
            name="relu",
        )
    )
    assert_unknown_shape(session.summary(load(session, model, stream)))
    gid = load(session, model, stream, {"input_shape": "x:5,3"})
    assert session.summary(gid).is_static and session.summary(gid).output_shapes == [(5, 3)]


# ---- execution of unknown-shape graphs ------------------------------------------------------------------------------


def test_unknown_shape_caller_buffers(session, stream):
    """NonZero with caller buffers: one large enough gets the data and the real shape written into its tensor; one
    too small fails the call, naming the sizes; the static output beside it is written in place."""
    model = nonzero_model()
    gid = load(session, model, stream)
    x = np.array([[1, -1, 2, 0], [0, 0, 3, 0], [-1, 5, 0, 0]], np.float32)
    idx_ref, rowsum_ref = ort_run(model, [x])
    assert idx_ref.shape == (2, 4)
    big, rowsum = gert.DeviceTensor.empty((2, 12), np.int64), gert.DeviceTensor.empty((3,), np.float32)
    idx, rs = run_ge(session, gid, stream, [x], [big, rowsum])
    assert big.shape == (2, 4)
    np.testing.assert_array_equal(idx, idx_ref)
    np.testing.assert_array_equal(rs, rowsum_ref)
    small = gert.DeviceTensor.empty((2, 3), np.int64)
    with pytest.raises(gert.GeError) as ei:
        session.execute_async(gid, stream, [gert.DeviceTensor.from_numpy(x)], [small, rowsum])
    assert "needs 64 bytes" in ei.value.message and "holds 48" in ei.value.message, ei.value.message
    stream.synchronize()


def test_run_graph_on_value_dependent_graph(device):
    """RunGraph (numpy in and out) sizes the outputs per run too."""
    model = nms_model()
    with gert.Session({"ge.aicoreNum": "1|1"}) as s:
        s.add_graph(1, gert.Graph.from_onnx(model))
        for seed in (4, 5):
            arrays = nms_inputs(seed)
            assert_equal_ort(s.run_graph(1, arrays), ort_run(model, arrays), f"nms run_graph {seed}")


def test_shapeless_outputs_load_and_run(session, stream):
    """Graph outputs without a shape (and one without even a type) in the ONNX file: GE's parser keeps only the
    names; dtypes and shapes come from inference at compile."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("ArgMax", ["h"], ["cls"], axis=1, keepdims=0),
    ]
    model = without_output_shapes(
        make_model(
            nodes,
            [vi("x", np.float32, [4, 3])],
            [vi("y", np.float32, [4, 2]), vi("cls", np.int64, [4])],
            [_c("w", np.arange(6, dtype=np.float32).reshape(3, 2) - 2)],
            name="shapeless",
        ),
        untyped=("cls",),
    )
    gid = load(session, model, stream)
    s = session.summary(gid)
    assert s.is_static and s.output_shapes == [(4, 2), (4,)]
    assert s.output_dtypes == [np.dtype(np.float32), np.dtype(np.int64)]
    x = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    outs = [gert.DeviceTensor.empty(sh, dt) for sh, dt in zip(s.output_shapes, s.output_dtypes)]
    assert_equal_ort(run_ge(session, gid, stream, [x], outs), ort_run(model, [x]), "shapeless")


def test_incompatible_shapes_fail_the_compile(session):
    """GE's InferShape refuses shapes that do not fit (a[2,3] + b[2,2]): CompileGraph fails, naming the node."""
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="the_add")],
        [vi("a", np.float32, [2, "n"]), vi("b", np.float32, [2, "m"])],
        [vi("y", np.float32, [2, "k"])],
        name="bad_add",
    )
    session.add_graph(60_001, gert.Graph.from_onnx(model, {"input_shape": "a:2,3;b:2,2"}))
    with pytest.raises(gert.GeError) as ei:
        session.compile_graph(60_001)
    assert "the_add" in ei.value.message and "failed to compile" in ei.value.message
    session.remove_graph(60_001)


# ---- gert.Model on value-dependent models -------------------------------------------------------------------------


def nms_batch_model() -> bytes:
    """NonMaxSuppression over a batch: boxes f32[N, 8, 4], scores f32[N, 2, 8] -> selected i64[?, 3] (batch index,
    class, box). The output's first axis is not the batch."""
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_th"], ["selected"])
    return make_model(
        [node],
        [vi("boxes", np.float32, ["N", 8, 4]), vi("scores", np.float32, ["N", 2, 8])],
        [vi("selected", np.int64, ["n_selected", 3])],
        [
            _c("max_out", np.array([3], np.int64)),
            _c("iou", np.array([0.5], np.float32)),
            _c("score_th", np.array([0.3], np.float32)),
        ],
        name="nms_batch",
    )


def nms_batch_inputs(n: int, seed: int):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 10, (n, 8, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 4, (n, 8, 2)).astype(np.float32)], axis=2)
    return {"boxes": boxes, "scores": rng.uniform(0, 1, (n, 2, 8)).astype(np.float32)}


@pytest.mark.hostnpu_only  # reads gert.host_counters()
def test_model_value_dependent_batch_defaults_to_exact_and_runs():
    """gert.load on NMS over a batch: the batch policy is exact (no filler rows), each batch size runs as it is and
    equals ONNX Runtime; the output is allocated per run and copied once into the result (D2H bytes = its size)."""
    model = nms_batch_model()
    with gert.load(model, streams=1) as m:
        assert m.value_dependent == ["selected"]
        assert m.plan.batch.policy == "exact" and m.plan.batch.gears == ()
        assert ("selected", 0) not in m.plan.output_axes  # not split or sliced as a batch axis
        for n, seed in ((1, 1), (3, 2), (2, 3), (3, 4)):
            feeds = nms_batch_inputs(n, seed)
            ref = ort_run(model, [feeds["boxes"], feeds["scores"]])[0]
            gert.reset_host_counters()
            got = m.run(feeds)["selected"]
            c = gert.host_counters()
            assert got.dtype == ref.dtype and got.shape == ref.shape
            np.testing.assert_array_equal(got, ref)
            assert c["bytes_d2h"] == ref.nbytes, (c, ref.nbytes)
            assert c["bytes_h2d"] == feeds["boxes"].nbytes + feeds["scores"].nbytes, c
        assert m.stats()["compiles"] == 3  # one graph per batch size seen (1, 3, 2)


def test_model_requests_with_unsplittable_outputs_run_one_by_one():
    """A list of requests to a model whose value-dependent output has no batch axis (NMS's [selected, 3]) is not
    merged into one batch: each request gets exactly its own result."""
    model = nms_batch_model()
    reqs = [nms_batch_inputs(n, 10 + n) for n in (1, 2, 1)]
    with gert.load(model) as m:
        for results in (m.run(reqs), m.run_batch(reqs)):  # run_batch: what gert_triton calls per batch
            for r, got in zip(reqs, results):
                np.testing.assert_array_equal(got["selected"], ort_run(model, [r["boxes"], r["scores"]])[0])


def test_model_pad_on_value_dependent_model_is_refused_naming_the_output_and_node():
    """NMS's [selected, 3] has no row of its own per image: padding would add boxes of the filler images, so 'pad'
    is refused at load (it used to be only warned about, and the padding rows came back)."""
    with pytest.raises(gert.GertError, match=r"output 'selected'.*NonMaxSuppression"):
        gert.load(nms_batch_model(), shape_policy={"batch": "pad"})


def test_model_static_model_keeps_pad():
    """A model without value-dependent outputs keeps the batch default (pad), and loads without a warning."""
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("x", np.float32, ["N", 3])],
        [vi("y", np.float32, ["N", 3])],
        name="relu_b",
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gert.load(model) as m:
            assert m.value_dependent == [] and m.plan.batch.policy == "pad"


@pytest.mark.parametrize(
    "make, feeds",
    [
        (
            resize_scales_model,
            [
                {"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4), "scales": np.array(s, np.float32)}
                for s in ([1, 1, 2, 2], [1, 1, 0.5, 1], [1, 1, 3, 0.75])
            ],
        ),
        (
            if_model,
            [
                {"state": np.arange(6, dtype=np.float32).reshape(2, 3), "mode": np.array(m)}
                for m in (True, False, False, True)
            ],
        ),
        (nonzero_model, [{"x": np.random.default_rng(s).standard_normal((3, 4)).astype(np.float32)} for s in (1, 2)]),
        (nms_model, [dict(zip(("boxes", "scores"), nms_inputs(s))) for s in (1, 2)]),
    ],
    ids=["resize_scales", "if_input", "nonzero", "nms"],
)
def test_model_runs_value_dependent_models(make, feeds):
    """Resize by input scales, If on an input scalar (a mode flag), NonZero and NMS through gert.load: every run
    equals ONNX Runtime, with that run's values deciding the shape or the branch."""
    model = make()
    with gert.load(model, streams=2) as m:
        assert m.value_dependent
        for f in feeds:
            ref = ort_run(model, [f[t.name] for t in m.inputs])
            got = m.run(f)
            assert_equal_ort([got[o.name] for o in m.outputs], ref, make.__name__)


def test_model_with_shapeless_outputs():
    """Outputs without a shape in the file get it from shape inference (symbolic input dims carry through), an
    output without a type gets its dtype; the batch axis is recognized and batching splits it."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("ArgMax", ["h"], ["cls"], axis=1, keepdims=0),
    ]
    model = without_output_shapes(
        make_model(
            nodes,
            [vi("x", np.float32, ["N", 3])],
            [vi("y", np.float32, ["N", 2]), vi("cls", np.int64, ["N"])],
            [_c("w", np.arange(6, dtype=np.float32).reshape(3, 2) - 2)],
            name="shapeless_b",
        ),
        untyped=("cls",),
    )
    with gert.load(model) as m:
        assert [(o.name, o.dtype, o.shape) for o in m.outputs] == [
            ("y", np.dtype(np.float32), ("N", 2)),
            ("cls", np.dtype(np.int64), ("N",)),
        ]
        assert m.plan.batch.policy == "pad"
        rng = np.random.default_rng(7)
        reqs = [{"x": rng.standard_normal((k, 3)).astype(np.float32)} for k in (1, 3, 2)]
        for r, got in zip(reqs, m.run(reqs)):
            ref = ort_run(model, [r["x"]])
            assert_equal_ort([got["y"], got["cls"]], ref, "shapeless batch")


def test_triton_config_of_shapeless_outputs(tmp_path):
    """gert_triton builds config.pbtxt I/O for a model whose outputs carry no shape in the file."""
    from gert_triton.model import io_config, onnx_io

    model = without_output_shapes(
        make_model(
            [helper.make_node("Relu", ["x"], ["y"])],
            [vi("x", np.float32, ["N", 3])],
            [vi("y", np.float32, ["N", 3])],
            name="relu_triton",
        )
    )
    path = tmp_path / "model.onnx"
    path.write_bytes(model)
    batchable, inputs, outputs = io_config(onnx_io(str(path)))
    assert batchable and outputs == [{"name": "y", "data_type": "TYPE_FP32", "dims": [3]}]
