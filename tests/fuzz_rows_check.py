"""Run one fuzz Case on gert through its front door, compare every request with ONNX Runtime run on that request
alone, and say what happened (issue 36, item 6). Used by tests/test_fuzz_rows.py and benchmarks/fuzz_rows.py.

Allowed outcomes per example: the same values as ONNX Runtime; a GertError at load (an option combination gert
refuses); a request refused with a GertError when it is bad (ONNX Runtime refuses it too) or when its size is one
the declared gears do not take. Anything else is a failure: a wrong value, shape, dtype or output set, an error on a
good request, a non-gert exception, an answer to a request ONNX Runtime refuses, a hang (every call has a deadline).
A failure is put in a class (``classify``) from the tags the generator gave the model's outputs; a failing example
prints a standalone repro script (``repro``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
import threading
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import gert
from fuzz_rows_models import Case, feeds_code, load_options, model_code, options_code

TIMEOUT = 60.0  # seconds for a whole front-door call (a hang fails the example, it never blocks the suite)
RTOL = ATOL = 1e-4  # float32 through a few ops, batched or alone


class Hang(Exception):
    """A call that did not return within its deadline."""


# ---- the front doors (their source goes into the repro scripts as it is) ------------------------------------------


def _in_threads(fn, items: list, timeout: float) -> list:
    """fn(item) from one thread per item, all released together; each result or exception, Hang past the deadline."""
    results: list = [Hang(f"no answer within {timeout} s")] * len(items)
    start = threading.Barrier(len(items))

    def work(i: int) -> None:
        try:
            start.wait(timeout)
            results[i] = fn(items[i])
        except BaseException as e:  # noqa: BLE001 - reported per request
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


def call_door(door: str, model, requests: list, timeout: float) -> list:
    """Each request's outputs (dict of name -> array) or exception, through ``door`` of ``model`` (a gert.Model, or a
    gert.InferenceSession for the "session" door)."""
    if door == "run":
        return [_in_threads(model.run, [r], timeout)[0] for r in requests]
    if door in ("run_list", "run_batch"):
        call = model.run if door == "run_list" else model.run_batch
        got = _in_threads(call, [requests], timeout)[0]
        return list(got) if isinstance(got, list) else [got] * len(requests)
    if door == "threads_run":
        return _in_threads(model.run, requests, timeout)
    if door == "submit":
        return _in_threads(lambda r: model.submit(r).result(timeout), requests, timeout)
    if door == "run_async":

        async def all_of():
            return await asyncio.gather(
                *[asyncio.wait_for(model.run_async(r), timeout) for r in requests], return_exceptions=True
            )

        got = _in_threads(lambda _: asyncio.run(all_of()), [None], timeout + 5)[0]
        return list(got) if isinstance(got, list) else [got] * len(requests)
    if door == "session":
        names = [o.name for o in model.get_outputs()]
        return _in_threads(lambda r: dict(zip(names, model.run(None, r))), requests, timeout)
    raise ValueError(door)


def open_model(door: str, model_bytes: bytes, options: dict, gear_costs: dict | None = None):
    """gert.load, or gert.InferenceSession for the "session" door (gert's options as keyword arguments);
    ``gear_costs``: run times per batch gear seeded as if measured (9 runs each, the first at a size left out)."""
    if door == "session":
        model = gert.InferenceSession(model_bytes, providers=["CANNExecutionProvider"], **options)
    else:
        model = gert.load(model_bytes, **options)
    for gear, seconds in (gear_costs or {}).items():
        for _ in range(10):
            (model.model if door == "session" else model).pool.run_times.add(gear, seconds)
    return model


# ---- one example ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Result:
    outcome: str  # ok | load_refused | refused (a request refused, allowed) | known:C | FAIL:C
    failures: list  # [(kind, request index, output, detail, class)]
    requests: list  # per request: ok | refused_gears | bad_refused | both_refused | failure kind
    load_error: str | None = None

    @property
    def failed(self) -> bool:
        return bool(self.failures)


def build(case: Case) -> tuple:
    """(model bytes, requests) from the case's own source code, the code its repro prints."""
    ns = {"np": np, "helper": helper, "numpy_helper": numpy_helper, "TensorProto": TensorProto}
    exec(model_code(case), ns)  # noqa: S102 - our own generated source
    exec(feeds_code(case), ns)  # noqa: S102
    return ns["model_bytes"], ns["requests"]


def ort_alone(model_bytes: bytes, requests: list) -> tuple:
    """ONNX Runtime's outputs (or exception) for each request run alone; and its output names in order."""
    so = ort.SessionOptions()
    so.log_severity_level = 4  # the requests it refuses are expected: no error lines on stderr
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    out = []
    for r in requests:
        try:
            out.append(dict(zip(names, sess.run(None, r))))
        except Exception as e:  # noqa: BLE001 - a request ONNX Runtime refuses
            out.append(e)
    return out, names


def _gear_refusal(case: Case, err: BaseException) -> bool:
    """A GertError refusing a size the declared gears do not take (exact, or pad above the largest gear off the
    batch): allowed, the user asked for exactly these sizes."""
    m = re.search(r"size (\d+) of dim '([^']+)' is (not one of its gears|larger than its largest gear)", str(err))
    return bool(m) and bool(case.options.get("gears"))


def _empty_refusal(case: Case, index: int, err: BaseException) -> bool:
    """A request with a 0-sized dim refused alone with a clear error (issue 36 item 5 allows it: "answered with 0
    rows or refused alone with a clear error")."""
    return _empty_request(case, index) and bool(re.search(r"input '[^']+'.*got 0", str(err)))


def _empty_request(case: Case, index: int) -> bool:
    rows, tsize, _ = case.requests[index]
    return 0 in (rows, tsize)


def _session_class_ok(want: BaseException, got: BaseException) -> bool:
    """gert.InferenceSession refuses with one of ONNX Runtime's exception classes (ValueError for missing inputs)."""
    return isinstance(got, ValueError) or any(c.__module__.startswith("onnxruntime") for c in type(got).__mro__)


def compare(case: Case, want, got, names: list, index: int, bad_in_call: bool) -> tuple:
    """(request outcome, [(kind, output, detail)]) of one request."""
    door = case.door
    if isinstance(want, BaseException):
        if isinstance(got, Hang):
            return "hang", [("hang", None, str(got))]
        if isinstance(got, BaseException):
            if door == "session" and not _session_class_ok(want, got):
                return "session_error_class", [
                    (
                        "session_error_class",
                        None,
                        f"ONNX Runtime raises {type(want).__name__}, gert {type(got).__name__}: {str(got)[:160]}",
                    )
                ]
            if door != "session" and not isinstance(got, gert.GertError):
                return "unclear_refusal", [("unclear_refusal", None, f"{type(got).__name__}: {str(got)[:200]}")]
            return ("bad_refused" if case.requests[index][2] else "both_refused"), []
        if (
            not case.requests[index][2]
            and _empty_request(case, index)
            and all(np.asarray(v).size == 0 for v in got.values())
        ):
            return "answered_empty", []  # 0 rows answered with 0 rows where ONNX Runtime's kernel refuses: allowed
        kind = "bad_accepted" if case.requests[index][2] else "answered_ort_refused"
        return kind, [
            (
                kind,
                None,
                f"ONNX Runtime refuses it ({str(want)[:160]}); gert answered "
                f"{ {k: np.asarray(v).shape for k, v in got.items()} }",
            )
        ]
    if isinstance(got, Hang):
        return "hang", [("hang", None, str(got))]
    if isinstance(got, BaseException):
        if isinstance(got, gert.GertError) and (_gear_refusal(case, got) or bad_in_call):
            return "refused_gears" if not bad_in_call else "refused_with_bad", []
        if isinstance(got, gert.GertError) and _empty_refusal(case, index, got):
            return "refused_empty", []
        kind = "error_on_good_request" if isinstance(got, gert.GertError) else "crash_on_good_request"
        return kind, [(kind, None, f"{type(got).__name__}: {str(got)[:300]}")]
    if door == "session" and list(got) != names:
        return "wrong_outputs", [("wrong_outputs", None, f"gert {list(got)}, ONNX Runtime {names}")]
    if sorted(got) != sorted(want):
        return "wrong_outputs", [("wrong_outputs", None, f"gert {sorted(got)}, ONNX Runtime {sorted(want)}")]
    fails = []
    for name, w in want.items():
        g = np.asarray(got[name])
        if g.shape != w.shape:
            fails.append(("wrong_shape", name, f"gert {g.shape}, ONNX Runtime {w.shape}"))
        elif g.dtype != w.dtype:
            fails.append(("wrong_dtype", name, f"gert {g.dtype}, ONNX Runtime {w.dtype}"))
        elif not np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True):
            d = np.abs(g.astype(np.float64) - w.astype(np.float64))
            fails.append(
                (
                    "wrong_value",
                    name,
                    f"max |d| {np.nanmax(d) if d.size else 0:.3g}{' (NaN in gert)' if np.isnan(g).any() else ''}",
                )
            )
    return ("ok" if not fails else fails[0][0]), fails


def check(case: Case, known: dict) -> Result:
    """Run ``case`` and judge it. ``known``: the defect classes whose failures are expected for now (class ->
    reason); their failures give outcome "known:<class>", any other "FAIL:<class>"."""
    model_bytes, requests = build(case)
    onnx.checker.check_model(onnx.load_from_string(model_bytes), full_check=True)  # the generator's own soundness
    want, names = ort_alone(model_bytes, requests)
    options = load_options(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = open_model(case.door, model_bytes, options, case.gear_costs)
        except gert.GertError as e:
            return Result("load_refused", [], [], load_error=f"{type(e).__name__}: {str(e)[:300]}")
        except Exception as e:  # noqa: BLE001 - a load that fails with anything else is a failure
            fail = ("load_crash", None, None, f"{type(e).__name__}: {str(e)[:300]}", "new:load_crash")
            return Result(_outcome([fail], known), [fail], [])
        try:
            plan = (model.model if case.door == "session" else model).plan
            got = call_door(case.door, model, requests, TIMEOUT)
        finally:
            inner = model.model if case.door == "session" else model
            inner.close(timeout=10)
    # a list call is one call: a bad or empty request in it may fail the whole call, with a clear GertError
    bad_in_call = case.door in ("run_list", "run_batch") and any(
        bad or 0 in (rows, t) for rows, t, bad in case.requests
    )
    per_request, failures = [], []
    for i, (w, g) in enumerate(zip(want, got)):
        outcome, fails = compare(case, w, g, names, i, bad_in_call)
        per_request.append(outcome)
        for kind, output, detail in fails:
            failures.append((kind, i, output, detail, classify(case, kind, output, plan, i)))
    if failures:
        return Result(_outcome(failures, known), failures, per_request)
    refused = any(o != "ok" for o in per_request)
    return Result("refused" if refused else "ok", [], per_request)


def _outcome(failures: list, known: dict) -> str:
    unknown = [f[4] for f in failures if f[4] not in known]
    return f"FAIL:{unknown[0]}" if unknown else f"known:{failures[0][4]}"


# ---- classes ---------------------------------------------------------------------------------------------------


def classify(case: Case, kind: str, output: str | None, plan, index: int) -> str:
    """The defect class a failure most likely belongs to, from the tags of the output (of every output for a
    request-level error) and the options: the known classes of issue 36 (../shared/repros/rows/README.md), else
    "new:<kind>"."""
    axis = plan.batch_axis("x")
    x_layout = case.inputs[0][2]
    gert_batch = x_layout[axis] if axis is not None else None
    outputs = [output] if output is not None else [o for o in case.tags if o != "*"]
    prefixes = set()
    for o in outputs:
        for tag in case.tags.get(o, []):
            if output is None and tag in ("passthrough",):  # a request-level error: not one output's doing
                continue
            p = tag.split(":")[0]
            if gert_batch == "T":  # gert took T for the batch: T's mixing is the batch's
                p = {"t_mixed": "rows_mixed", "tglob": "glob", "rows_mixed": "t_mixed", "glob": "tglob"}.get(p, p)
            prefixes.add(p)
    policy = case.options.get("shape_policy", {})
    if kind == "session_error_class":
        return "session_error_class"
    if "rows_mixed" in prefixes:
        return "rows_mixed"
    if "batch_two_axes" in prefixes:
        return "batch_two_axes"
    if "passthrough" in prefixes:
        return "passthrough"
    if "value_dependent" in prefixes and policy.get("batch") == "pad":
        return "pad_value_dependent"
    if kind == "wrong_shape" and "pad" in [v for k, v in policy.items() if k != "batch"]:
        return "pad_dim_lost"  # a padded non-batch dim kept its padded size in an output
    if case.options.get("output_dims") and "pad" in [v for k, v in policy.items() if k != "batch"]:
        return "output_dims"
    if gert_batch is not None and axis != 0:
        return "batch_axis_split"
    if kind == "answered_ort_refused" and case.requests[index][0] == 0:
        return "zero_rows_answered"
    return f"new:{kind}"


# ---- repro scripts -------------------------------------------------------------------------------------------------

_REPRO_CHECK = """
sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
names = [o.name for o in sess.get_outputs()]
want = []
for r in requests:
    try:
        want.append(dict(zip(names, sess.run(None, r))))
    except Exception as e:
        want.append(e)
model = open_model(DOOR, model_bytes, options, GEAR_COSTS)
got = call_door(DOOR, model, requests, 60.0)
(model.model if DOOR == "session" else model).close(timeout=10)
fails = []
for i, (w, g) in enumerate(zip(want, got)):
    if isinstance(w, Exception) or isinstance(g, BaseException):
        if isinstance(w, Exception) != isinstance(g, BaseException) or not isinstance(g, gert.GertError):
            fails.append(f"request {i}: ONNX Runtime {type(w).__name__}, gert {type(g).__name__}: {str(g)[:200]}")
        continue
    for k, v in w.items():
        a = np.asarray(g.get(k))
        if a.shape != v.shape or not np.allclose(a, v, rtol=1e-4, atol=1e-4, equal_nan=True):
            shapes = {n: x.shape for n, x in requests[i].items()}
            d = np.abs(a - v).max() if a.shape == v.shape and a.size else None
            fails.append(f"request {i} {shapes} output {k}: gert shape {a.shape}, ONNX Runtime {v.shape}, max|d| {d}")
print("FAIL:\\n  " + "\\n  ".join(fails) if fails else "OK")
sys.exit(1 if fails else 0)
"""


def repro(case: Case, result: Result | None = None) -> str:
    """A standalone script (onnx.helper, numpy, gert, onnxruntime) that shows the failure; exits 1 while it exists."""
    what = ""
    if result is not None:
        what = "\n".join(f"  request {i} output {o}: {k} {d} [{c}]" for k, i, o, d, c in result.failures[:8])
    return "\n".join(
        [
            '"""Differential fuzz repro (tests/test_fuzz_rows.py): gert against ONNX Runtime on each request alone.',
            f"Door: {case.door}; families: {case.families}; tags: {case.tags}",
            what + '"""',
            "import asyncio, sys, threading, warnings",
            "import numpy as np, onnxruntime as ort, gert",
            "from onnx import TensorProto, helper, numpy_helper",
            'warnings.simplefilter("ignore")',
            "",
            model_code(case),
            feeds_code(case),
            f"options = {options_code(case)}",
            f"DOOR = {case.door!r}",
            f"GEAR_COSTS = {case.gear_costs!r}",
            "",
            "class Hang(Exception):\n    pass\n",
            inspect.getsource(_in_threads),
            inspect.getsource(call_door),
            inspect.getsource(open_model),
            _REPRO_CHECK,
        ]
    )
