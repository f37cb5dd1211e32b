"""ONNX's backend node tests (``onnx.backend.test.case.node.collect_testcases``: every operator's test cases, with
inputs and expected outputs, generated in memory) through ``gert.onnx_backend`` on the host NPU.

Nothing is hand-excluded. Per case:
- ONNX Runtime runs it first, in this session (cached): a case ONNX Runtime itself fails is skipped with its reason
  (the host NPU computes with ONNX Runtime; it cannot do better).
- A case GE refuses by design (found from the model by ``refused_by_design``, independently of gert: no inputs or
  outputs, Loop / Scan, string tensors, non-tensor graph I/O) must fail at prepare with GE's code, as a GeError.
- Every other case must equal the expected outputs within the case's tolerances (ONNX's own comparison), with no
  exception; ``XFAIL`` lists, with reasons, any that may not (none today), and ``test_pass_rate`` bounds it to 2%.
One gert.load per case, one stream, no warmup.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import pytest

import gert
import gert.onnx_backend as backend
from _helpers import RUNTIME

pytestmark = RUNTIME

with warnings.catch_warnings():  # the generators divide by zero on purpose (ReduceMax of empty sets, ...)
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases
    from onnx.backend.test.runner import Runner

    CASES = {c.name: c for c in collect_testcases(None)}

# Cases allowed to fail through gert, each with its reason (at most 2% of the eligible ones: test_pass_rate).
XFAIL: dict = {}


@functools.cache
def ort_failure(name: str) -> str | None:
    """Why ONNX Runtime fails the case (an exception or a wrong result), or None when it passes."""
    import onnxruntime as ort

    case = CASES[name]
    inputs, expected = case.data_sets[0]
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(case.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))
        Runner.assert_similar_outputs(expected, got, case.rtol, case.atol)
    except Exception as e:  # noqa: BLE001 - any failure of the reference excludes the case
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    return None


def _graphs(g: onnx.GraphProto):
    yield g
    for n in g.node:
        for a in n.attribute:
            for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                yield from _graphs(sub)


def refused_by_design(model: onnx.ModelProto) -> tuple | None:
    """(what GE's message must say, why) when CANN's ONNX parser refuses the model by design, else None."""
    g = model.graph
    if not g.input:
        return "E16001", "no graph input"
    if not g.output:
        return "E16001", "no graph output"
    for v in list(g.input) + list(g.output):
        if v.type.WhichOneof("value") not in (None, "tensor_type"):
            return "not a tensor", f"graph I/O '{v.name}' is a {v.type.WhichOneof('value')}"
    for sub in _graphs(g):
        for n in sub.node:
            if n.domain in ("", "ai.onnx") and n.op_type in ("Loop", "Scan"):
                return "E13010", f"{n.op_type} (no plugin in CANN's ONNX parser)"
    for sub in _graphs(g):
        values = list(sub.input) + list(sub.output) + list(sub.value_info)
        if any(v.type.tensor_type.elem_type == onnx.TensorProto.STRING for v in values) or any(
            t.data_type == onnx.TensorProto.STRING for t in sub.initializer
        ):
            return "DT_STRING", "string tensors"
        for n in sub.node:
            for a in n.attribute:
                if (a.type == onnx.AttributeProto.TENSOR and a.t.data_type == onnx.TensorProto.STRING) or (
                    n.op_type == "Cast" and a.name == "to" and a.i == onnx.TensorProto.STRING
                ):
                    return "DT_STRING", "string tensors"
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name):
    case = CASES[name]
    why = ort_failure(name)
    if why is not None:
        pytest.skip(f"ONNX Runtime fails this case too ({why})")
    inputs, expected = case.data_sets[0]
    refused = refused_by_design(case.model)
    if refused is not None:
        fragment, reason = refused
        with pytest.raises(gert.GeError) as ei:
            backend.prepare(case.model)
        assert ei.value.code == 0xFFFFFFFF and fragment in ei.value.message, (reason, ei.value)
        return
    if name in XFAIL:
        pytest.xfail(XFAIL[name])
    got = backend.run_model(case.model, inputs)  # a GertError here fails the case, as any other exception
    Runner.assert_similar_outputs(expected, got, case.rtol, case.atol)


def test_pass_rate():
    """Of the cases ONNX Runtime passes and GE does not refuse by design, at most 2% are allowed to fail (XFAIL)."""
    eligible = [n for n in CASES if ort_failure(n) is None and refused_by_design(CASES[n].model) is None]
    assert set(XFAIL) <= set(eligible), "XFAIL names cases that are not eligible"
    assert len(eligible) > 1000, len(eligible)
    assert len(XFAIL) <= 0.02 * len(eligible), (len(XFAIL), len(eligible))


def test_backend_interface():
    """supports_device, run_node (outputs left to shape inference: a value-dependent NonZero), prepare + run with
    positional and named inputs, and a device that does not exist."""
    assert backend.supports_device("CPU") and backend.supports_device("NPU:0")
    assert not backend.supports_device("CUDA") and not backend.supports_device("NPU:99")
    x = np.array([[1, 0, 2], [0, 3, 0]], np.float32)
    (idx,) = backend.run_node(onnx.helper.make_node("NonZero", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(idx, np.array(np.nonzero(x)))
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Sub", ["a", "b"], ["c"])],
            "sub",
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, ["n"]) for n in ("a", "b")],
            [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, ["n"])],
        )
    )
    rep = backend.prepare(model)
    try:
        a, b = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
        np.testing.assert_array_equal(rep.run([a, b])[0], a - b)
        np.testing.assert_array_equal(rep.run({"a": a[:2], "b": b[:2]})[0], (a - b)[:2])
        with pytest.raises(gert.GertError, match="takes 2 input"):
            rep.run([a])
    finally:
        rep.close()
    with pytest.raises(gert.GertError, match="not supported"):
        backend.prepare(model, device="NPU:99")
