"""Differential row fuzzer (issue 36, item 6): random small ONNX models, random gert.load options, every front door;
each request's outputs must equal ONNX Runtime's for that request run alone.

Models (tests/fuzz_rows_models.py): elementwise and broadcasting, MatMul / Gemm, Conv / Pool, Reshape / Flatten /
Transpose / Squeeze / Unsqueeze / Split / Concat / Slice (negative steps too) / Gather / Tile / Expand / Pad,
reductions, Softmax / LogSoftmax / Hardmax / CumSum, TopK / ArgMax, RNN / GRU / LSTM (seq-first, and batch-first
written with transposes: ONNX Runtime's CPU kernels refuse layout=1), Shape / Size feeding values; the batch on
axis 0 or another, named / unnamed / fixed dims, a second dynamic dim, several inputs and outputs, pass-through
outputs. Options: gears, shape_policy, batch_dim, output_dims, streams, split_batch, dynamic_batching, max_batch,
pad_value. Doors: Model.run, run(list), run_batch, run from threads, submit from threads, run_async,
gert.InferenceSession from threads. Allowed outcomes and failure kinds: tests/fuzz_rows_check.py.

Default: BOUNDED examples (about a minute on one core). Long: ``python -m pytest tests/test_fuzz_rows.py -n 0
--hypothesis-profile long`` (GERT_FUZZ_EXAMPLES examples, default 3000), or ``benchmarks/fuzz_rows.py --minutes N``
for counts. A failure prints a standalone repro script; keep it in REGRESSIONS.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from _helpers import RUNTIME
from fuzz_rows_check import TIMEOUT, check, repro
from fuzz_rows_models import Case, cases

pytestmark = RUNTIME

BOUNDED = 2000  # about 25-30 s of CPU on one core (GERT_FUZZ_EXAMPLES sets the long profile's)
LONG = settings.get_current_profile_name() == "long"
COLLECT = os.environ.get("GERT_FUZZ_COLLECT") == "1"  # benchmarks/fuzz_rows.py: record failures, go on, no shrinking

# Defect classes whose failures are expected until they are fixed (../shared/repros/rows/README.md): their failures
# are counted, not raised, and their REGRESSIONS are skipped with the class as the reason. Remove a class once it
# is fixed: the fuzzer and its regression examples then hold it. Empty when issue 36 is done.
KNOWN_CLASSES: dict = {}
# Classes this held while they were open (class -> the shared repro scripts), the names REGRESSIONS use:
#   rows_mixed: rowmix_softmax_batch_axis.py, slice_reverse_batch.py, range_of_batch_size.py;
#   batch_axis_split: axis1_split_*.py; batch_two_axes: batch_on_two_axes_split.py;
#   output_dims: output_dims_drops_padded_dim.py; pad_value_dependent: pad_on_value_dependent.py;
#   passthrough: passthrough_output.py; session_error_class: session_runtime_error_class.py;
#   pad_dim_lost: found by this fuzzer (a padded non-batch dim not sliced off after Conv kernel 1 / Slice to end).
# A new open class: KNOWN_CLASSES["name"] = "what, and its repro", until its fix lands.
# GERT_FUZZ_STRICT=1: every class strict: is a class fixed? (benchmarks/fuzz_rows.py --strict)
if os.environ.get("GERT_FUZZ_STRICT") == "1":
    KNOWN_CLASSES = {}
# Never generated: a 0-sized batch or sequence into RNN / GRU / LSTM. ONNX Runtime's own kernels abort the process
# on it (the reference cannot run in process; gert's side is empty_batch_rnn_abort.py), so recurrent models get
# requests of 1 row or more (tests/fuzz_rows_models.py `_requests`).
EXCLUDED = {"rnn_zero_rows": "ONNX Runtime aborts the process on a 0-sized RNN / GRU / LSTM input"}


def _record(case: Case, result) -> None:
    """One JSON line per example into $GERT_FUZZ_STATS (benchmarks/fuzz_rows.py counts them)."""
    path = os.environ.get("GERT_FUZZ_STATS")
    if not path:
        return
    ops = sorted({n[0] for n in case.nodes})
    line = {
        "families": case.families,
        "ops": ops,
        "door": case.door,
        "outcome": result.outcome,
        "requests": result.requests,
        "options": sorted(case.options),
        "load_error": result.load_error,
        "failures": [list(f) for f in result.failures[:4]],
        "inputs": [list(i) for i in case.inputs],
        "bname": case.bname,
        "load_options": repr(case.options),
    }
    if result.failures:
        line["repro"] = repro(case, result)
        line["case"] = repr(case)
    with open(path, "a") as f:
        f.write(json.dumps(line, default=str) + "\n")


def _run(case: Case):
    path = os.environ.get("GERT_FUZZ_STATS")
    if path:  # the example in progress, for a crash that takes the process down (benchmarks/fuzz_rows.py)
        with open(path + ".current.py", "w") as f:
            f.write(repro(case) + "\n# ---- case ----\n# " + repr(case) + "\n")
    faulthandler.dump_traceback_later(3 * TIMEOUT, file=sys.stderr)  # a hang beyond the doors' deadlines: stacks
    try:
        result = check(case, KNOWN_CLASSES)
    finally:
        faulthandler.cancel_dump_traceback_later()
    _record(case, result)
    return result


def _report(case: Case, result) -> str:
    lines = [f"{result.outcome}: door {case.door}, options {case.options}"]
    lines += [f"  request {i} output {o}: {k}: {d} [{c}]" for k, i, o, d, c in result.failures[:10]]
    return (
        "\n".join(lines) + "\n\n---- standalone repro ----\n" + repro(case, result) + "\n---- case ----\n" + repr(case)
    )


@settings(
    max_examples=settings.default.max_examples if LONG else BOUNDED,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(case=cases())
def test_every_request_gets_onnx_runtimes_answer_alone(case: Case) -> None:
    result = _run(case)
    if result.outcome.startswith("FAIL") and not COLLECT:
        raise AssertionError(_report(case, result))


# ---- regression examples: every failure the fuzzer found, by class ----------------------------------------------


def _c(
    inputs, nodes, outputs, options, door, requests, inits=(), tags=None, bname="N", tname="T", seed=0, repeat=1
) -> Case:
    """A regression Case written by hand (the fuzzer prints its finds as full Case(...) literals)."""
    return Case(
        inputs=list(inputs),
        nodes=list(nodes),
        inits=list(inits),
        outputs=list(outputs),
        bname=bname,
        tname=tname,
        options=options,
        door=door,
        requests=list(requests),
        seed=seed,
        shared_params=True,
        tags=tags or {},
        families=[],
        repeat=repeat,
    )


_X4 = ("x", "float32", ("B", 4), None)
_TWO_AXES = [("Transpose", ["x"], ["xt"], {"perm": [1, 0]}), ("MatMul", ["x", "xt"], ["y"], {})]
_RANGE = [
    ("Shape", ["x"], ["s"], {}),
    ("Gather", ["s", "zero"], ["n"], {}),
    ("Range", ["zero", "n", "one"], ["r"], {}),
    ("Cast", ["r"], ["rf"], {"to": 1}),
    ("ReduceSum", ["x", "one1"], ["xs"], {"keepdims": 0}),
    ("Add", ["xs", "rf"], ["y"], {}),
]
_RANGE_INITS = [("zero", "int64", [], [0]), ("one", "int64", [], [1]), ("one1", "int64", [1], [1])]
_SIZE = [("Size", ["x"], ["s3"], {}), ("Cast", ["s3"], ["t4"], {"to": 1}), ("Mul", ["x", "t4"], ["y"], {})]
_MIXED = {"y": ["rows_mixed"]}

# (id, class, Case): the classes of ../shared/repros/rows/ written as cases, then what the fuzzer found on the code
# before the row proof (35ee1af); each failed there and passes on the fixed code.
REGRESSIONS: list = [
    (
        "softmax_batch_axis_padded",
        "rows_mixed",
        _c(
            [_X4],
            [("Softmax", ["x"], ["y"], {"axis": 0})],
            [("y", "float32", ("B", 4))],
            {},
            "run",
            [(3, 1, None)],
            tags=_MIXED,
            seed=7,
        ),
    ),
    (
        "softmax_batch_axis_merged",
        "rows_mixed",
        _c(
            [_X4],
            [("Softmax", ["x"], ["y"], {"axis": 0})],
            [("y", "float32", ("B", 4))],
            {"shape_policy": {"batch": "dynamic"}, "dynamic_batching": {"max_queue_delay_ms": 50}},
            "submit",
            [(2, 1, None)] * 4,
            tags=_MIXED,
            seed=7,
        ),
    ),
    (
        "slice_reverse_batch",
        "rows_mixed",
        _c(
            [("x", "float32", ("B", 3), None)],
            [("Slice", ["x", "st", "en", "ax", "sp"], ["y"], {})],
            [("y", "float32", ("B", 3))],
            {},
            "run_list",
            [(3, 1, None), (1, 1, None), (2, 1, None)],
            inits=[
                ("st", "int64", [1], [-1]),
                ("en", "int64", [1], [-(2**62)]),
                ("ax", "int64", [1], [0]),
                ("sp", "int64", [1], [-1]),
            ],
            tags=_MIXED,
            repeat=2,
        ),
    ),
    (
        "range_of_batch_size",
        "rows_mixed",
        _c(
            [("x", "float32", ("B", 3), None)],
            _RANGE,
            [("y", "float32", ("B",))],
            {"max_batch": 2},
            "run",
            [(5, 1, None)],
            inits=_RANGE_INITS,
            tags=_MIXED,
        ),
    ),
    (
        "size_times_x",
        "rows_mixed",
        _c(
            [("x", "float32", ("B", "T"), None)],
            _SIZE,
            [("y", "float32", (None, None))],
            {"max_batch": 8},
            "run",
            [(3, 3, None)],
            tags=_MIXED,
        ),
    ),
    (
        "size_times_x_batch_axis1",
        "rows_mixed",
        _c(
            [("x", "float32", (4, "B", 3, 4), None)],
            _SIZE,
            [("y", "float32", (None,) * 4)],
            {"batch_dim": ["x:1"]},
            "run",
            [(3, 3, None)],
            bname=None,
            tags=_MIXED,
        ),
    ),
    (
        "conv_over_batch_axis",
        "rows_mixed",
        _c(
            [("x", "float32", (2, 2, 4, "B"), None)],
            [("Conv", ["x", "w4"], ["y"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]})],
            [("y", "float32", (2, 1, 4, "B"))],
            {"batch_dim": "N", "max_batch": 8, "gears": {"N": [1, 2, 3]}, "split_batch": True, "pad_value": "nan"},
            "run_batch",
            [(5, 3, None)],
            inits=[("w4", "float32", [1, 2, 3, 3], ("randn", 0, 0.5))],
            tags=_MIXED,
        ),
    ),
    (
        "cumsum_batch_axis1",
        "rows_mixed",
        _c(
            [("x", "float32", (3, "B", "T", 1), None)],
            [("CumSum", ["x", "c7"], ["y"], {})],
            [("y", "float32", (3, "B", "T", 1))],
            {
                "batch_dim": "N",
                "max_batch": 8,
                "gears": {"batch": [1, 3]},
                "shape_policy": {"T": "exact"},
                "dynamic_batching": False,
            },
            "run_async",
            [(3, 2, None), (10, 1, None)],
            inits=[("c7", "int64", [], [-3])],
            tags=_MIXED,
            seed=1048576,
        ),
    ),
    (
        "logsoftmax_split_session",
        "rows_mixed",
        _c(
            [("x", "float32", ("B", "T"), None)],
            [("LogSoftmax", ["x"], ["y"], {"axis": -2})],
            [("y", "float32", ("B", "T"))],
            {"batch_dim": ["x:0"], "max_batch": 4, "split_batch": True, "pad_value": "nan"},
            "session",
            [(9, 2, None)],
            tags=_MIXED,
            seed=7547,
        ),
    ),
    (
        "batch_axis1_above_gear",
        "batch_axis_split",
        _c(
            [("x", "float32", (2, "B", 4), None)],
            [("MatMul", ["x", "W"], ["y"], {})],
            [("y", "float32", (2, "B", 3))],
            {"batch_dim": "N", "max_batch": 2},
            "run",
            [(5, 1, None)],
            inits=[("W", "float32", [4, 3], ("randn", 0, 1.0))],
            repeat=2,
        ),
    ),
    (
        "batch_axis1_with_t_split_streams",
        "batch_axis_split",
        _c(
            [("x", "float32", ("T", "B", 4), None)],
            [("MatMul", ["x", "W"], ["y"], {})],
            [("y", "float32", ("T", "B", 3))],
            {"batch_dim": "N", "streams": 2, "split_batch": True},
            "run",
            [(5, 2, None)],
            inits=[("W", "float32", [4, 3], ("randn", 0, 1.0))],
            repeat=2,
        ),
    ),
    (
        "x_times_xt_split",
        "batch_two_axes",
        _c(
            [("x", "float32", ("B", 3), None)],
            _TWO_AXES,
            [("y", "float32", ("B", "B"))],
            {"max_batch": 4, "output_dims": {"y": {0: "batch", 1: "batch"}}},
            "run",
            [(3, 1, None), (8, 1, None), (5, 1, None)],
            tags={"y": ["batch_two_axes"]},
        ),
    ),
    (
        "x_times_xt_merged",
        "batch_two_axes",
        _c(
            [("x", "float32", ("B", 3), None)],
            _TWO_AXES,
            [("y", "float32", ("B", "B"))],
            {"max_batch": 4, "output_dims": {"y": {0: "batch", 1: "batch"}}},
            "run_list",
            [(1, 1, None), (2, 1, None)],
            tags={"y": ["batch_two_axes"]},
        ),
    ),
    (
        "output_dims_keeps_padded_t",
        "output_dims",
        _c(
            [("x", "float32", ("T", "B", 5), None)],
            [("Relu", ["x"], ["y"], {})],
            [("y", "float32", ("T", "B", 5))],
            {
                "batch_dim": "N",
                "gears": {"T": [1, 2, 5]},
                "shape_policy": {"T": "pad"},
                "output_dims": {"y": {1: "batch"}},
            },
            "run",
            [(2, 3, None)],
        ),
    ),
    (
        "topk_k_input_batch_pad",
        "pad_value_dependent",
        _c(
            [("x", "float32", ("B", 3), None), ("k1", "int64", (1,), 3)],
            [("TopK", ["x", "k1"], ["top", "idx"], {"axis": 1})],
            [("top", "float32", ("B", None)), ("idx", "int64", ("B", None))],
            {"batch_dim": "N", "shape_policy": {"batch": "pad"}},
            "run",
            [(6, 1, None)],
            tags={"top": ["value_dependent"], "idx": ["value_dependent"]},
        ),
    ),
    (
        "passthrough_output",
        "passthrough",
        _c(
            [("x", "float32", ("B", 2), None)],
            [("Add", ["x", "ten"], ["y"], {})],
            [("y", "float32", ("B", 2)), ("x", "float32", ("B", 2))],
            {},
            "run",
            [(3, 1, None)],
            inits=[("ten", "float32", [], [10.0])],
            tags={"x": ["passthrough"]},
        ),
    ),
    (
        "passthrough_beside_batch_reduction",
        "passthrough",
        _c(
            [("x", "float32", (1, "B"), None)],
            [("ReduceSum", ["x"], ["t1"], {"keepdims": 0})],
            [("t1", "float32", ()), ("x", "float32", (None, None))],
            {"batch_dim": ["x:1"], "max_batch": 8},
            "run_batch",
            [(3, 3, None)],
            bname=None,
            tags={"x": ["passthrough"]},
            seed=65536,
        ),
    ),
    (
        "pad_dim_lost_conv_kernel1",
        "pad_dim_lost",
        _c(
            [("x", "float32", ("B", 4, "T"), None)],
            [("Conv", ["x", "W"], ["y"], {"kernel_shape": [1]})],
            [("y", "float32", ("B", 3, "T"))],
            {"gears": {"T": [1, 6]}, "shape_policy": {"T": "pad"}},
            "run",
            [(3, 3, None)],
            inits=[("W", "float32", [3, 4, 1], ("randn", 0, 1.0))],
        ),
    ),
    (
        "pad_dim_lost_slice_to_end",
        "pad_dim_lost",
        _c(
            [("x", "float32", ("T", "B", 2), None)],
            [("Slice", ["x", "st", "en", "ax", "sp"], ["y"], {})],
            [("y", "float32", (None, None, None))],
            {"batch_dim": "N", "gears": {"T": [6]}, "shape_policy": {"T": "pad"}},
            "run",
            [(3, 4, None)],
            inits=[
                ("st", "int64", [1], [0]),
                ("en", "int64", [1], [2**62]),
                ("ax", "int64", [1], [0]),
                ("sp", "int64", [1], [1]),
            ],
        ),
    ),
    (
        "session_gather_index_out_of_range",
        "session_error_class",
        _c(
            [("x", "float32", ("B", 3), None), ("i1", "int64", (2,), 9)],
            [("Gather", ["x", "i1"], ["z"], {"axis": 1})],
            [("z", "float32", ("B", 2))],
            {},
            "session",
            [(2, 1, None)],
            seed=3,
        ),
    ),
]


@pytest.mark.parametrize(
    "klass,case",
    [
        pytest.param(
            k,
            c,
            id=name,
            marks=[pytest.mark.skip(reason=f"known class {k}: {KNOWN_CLASSES[k]}")] if k in KNOWN_CLASSES else [],
        )
        for name, k, c in REGRESSIONS
    ],
)
def test_regression(klass: str, case: Case) -> None:
    result = _run(case)
    assert not result.failed, _report(case, result)
