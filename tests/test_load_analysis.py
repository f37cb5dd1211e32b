"""gert.load(load_analysis="process"): the load's analysis in a child process gives what the analysis in this process
gives (the I/O, the shape plan, the same errors), and the loading process never imports onnx (issue 41)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import gert
from _helpers import RUNTIME, run_python
from gert.core import load_analysis
from gert.core.load_analysis import PlanArgs
from gert.errors import GertError
from models import CLS, DET, REC, attention_model, make_model, mlp_model, multi_io_model, ppocr_model, vi

pytestmark = RUNTIME


def _softmax_over_batch() -> bytes:
    """A model whose output rows are not independent (softmax over the batch axis): the plan marks it unsplit."""
    return make_model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=0)],
        [vi("x", np.float32, ["n", 4])],
        [vi("y", np.float32, ["n", 4])],
    )


CASES = {
    "mlp": (lambda: mlp_model(0), PlanArgs(gears={"batch": [1, 4]})),
    "attention": (lambda: attention_model(1), PlanArgs()),
    "multi_io": (multi_io_model, PlanArgs()),
    "softmax_over_batch": (_softmax_over_batch, PlanArgs()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_child_plans_what_this_process_plans(name):
    make, args = CASES[name]
    data = make()
    here = load_analysis.analyse(data, None, args, "inline")
    there = load_analysis.analyse(data, None, args, "process")
    assert there == here
    assert load_analysis.describe(data, None, "process") == here.described


@pytest.mark.parametrize("name", [DET, REC, CLS])
def test_the_child_plans_the_ppocr_models_as_this_process(name):
    data = open(ppocr_model(name), "rb").read()
    args = PlanArgs(gears={"batch": [1, 2, 4]}, max_batch=4)
    assert load_analysis.analyse(data, None, args, "process") == load_analysis.analyse(data, None, args, "inline")


@pytest.mark.parametrize(
    "data,args",
    [
        (b"not an onnx model", PlanArgs()),
        (mlp_model(0), PlanArgs(gears={"nosuchdim": [1, 2]})),
        (mlp_model(0), PlanArgs(output_dims={"nosuchoutput": {0: "batch"}})),
    ],
)
def test_the_childs_errors_are_raised_here_as_this_process_raises_them(data, args):
    with pytest.raises(GertError) as here:
        load_analysis.analyse(data, None, args, "inline")
    with pytest.raises(GertError) as there:
        load_analysis.analyse(data, None, args, "process")
    assert type(there.value) is type(here.value) and str(there.value) == str(here.value)


def test_the_childs_warnings_are_raised_here_where_this_process_raises_them():
    """A model whose rows are not proved independent: the load warns (RowsNotIndependent) at the caller of
    gert.load, analysed here or in the child."""
    import warnings

    seen = {}
    for place in ("inline", "process"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gert.load(_softmax_over_batch(), load_analysis=place).close()
        seen[place] = [(w.category, str(w.message), w.filename, w.lineno) for w in caught]
    assert seen["process"] == seen["inline"]
    assert [w[0] for w in seen["inline"]] == [gert.errors.RowsNotIndependent]
    assert seen["inline"][0][2].endswith("gert/model.py")  # gert.load, called from here: where it always pointed


def _undeclared_output() -> bytes:
    """A model whose output has no shape in the file: its I/O needs shape inference."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    "make, declared", [(lambda: mlp_model(0), True), (multi_io_model, True), (_undeclared_output, False)]
)
def test_the_io_alone_is_what_the_description_says(make, declared, monkeypatch):
    """read_io (gert_triton's config check): the file's own I/O where it declares every output, with no child
    process; else the description's, from a child (here one that cannot start: the analysis runs here, warned)."""
    import warnings

    data = make()
    want = load_analysis.describe(data, None, "inline").io
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_analysis.read_io(data, "process") == want
    tried_a_child = any("the load analysis ran in this process" in str(w.message) for w in caught)
    assert tried_a_child == (not declared)


def test_a_child_that_cannot_run_leaves_the_analysis_to_this_process(monkeypatch):
    data = mlp_model(0)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.warns(UserWarning, match="the load analysis ran in this process.*exit status 1"):
        got = load_analysis.analyse(data, None, PlanArgs(), "process")
    assert got == load_analysis.analyse(data, None, PlanArgs(), "inline")


def test_a_bad_place_is_named():
    with pytest.raises(gert.GertError, match="load_analysis: expected 'inline' or 'process', got 'child'"):
        gert.load(mlp_model(0), load_analysis="child")


def test_a_model_loaded_with_the_analysis_apart_serves_without_importing_onnx():
    """The three PP-OCR models, each with static batch gears and the auto policy's dynamic graph, at several sizes:
    every load, compile and run of the process imports no onnx module; results equal a load analysed here."""
    paths = [(ppocr_model(n), h) for n, h in ((DET, 64), (REC, 48), (CLS, 48))]
    out = run_python(
        f"""
        import sys
        import numpy as np
        import gert
        results = []
        for path, h in {paths!r}:
            with gert.load(path, load_analysis="process", gears={{"batch": [1, 2, 4]}}) as m:
                for n, w in ((1, 96), (3, 160), (2, 96), (4, 320)):
                    x = np.random.default_rng(n * w).random((n, 3, h, w), np.float32)
                    results.append({{k: v.tolist() for k, v in m.run({{"x": x}}).items()}})
        print(sorted(k for k in sys.modules if k == "onnx" or k.startswith("onnx.")))
        import json, hashlib
        print(hashlib.sha256(json.dumps(results).encode()).hexdigest())
        """,
        timeout=300,
    )
    modules, digest = out.strip().splitlines()[-2:]
    assert modules == "[]", out
    same = run_python(
        f"""
        import numpy as np
        import gert
        results = []
        for path, h in {paths!r}:
            with gert.load(path, gears={{"batch": [1, 2, 4]}}) as m:
                for n, w in ((1, 96), (3, 160), (2, 96), (4, 320)):
                    x = np.random.default_rng(n * w).random((n, 3, h, w), np.float32)
                    results.append({{k: v.tolist() for k, v in m.run({{"x": x}}).items()}})
        import json, hashlib
        print(hashlib.sha256(json.dumps(results).encode()).hexdigest())
        """,
        timeout=300,
    )
    assert same.strip().splitlines()[-1] == digest


def test_the_wire_reader_and_its_fallback_agree_on_a_model_with_a_subgraph():
    """A model the wire reader leaves to onnx (an If) loads and plans alike in both places."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "then", [], [y])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "else", [], [y])
    model = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
            [y],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    ).SerializeToString()
    here = load_analysis.analyse(model, None, PlanArgs(), "inline")
    assert load_analysis.analyse(model, None, PlanArgs(), "process") == here
