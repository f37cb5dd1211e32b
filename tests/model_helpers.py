"""Helpers for the gert.Model tests (issue 4): small generated models whose outputs say which request they came
from, ONNX Runtime references at the static shapes gert compiles, and the many-callers property shared by the
in-process hypothesis test and the two-device subprocess.

The PP-OCR paths, ``make_model`` / ``vi`` and the plain ONNX Runtime reference come from tests/models.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import numpy as np
from onnx import helper, numpy_helper

from models import make_model, ort_session, vi

ECHO_FEATURES = 2


def echo_model() -> bytes:
    """x f32[batch, n, 2] -> y = x * 2 + 1 (f32[batch, n, 2]) and s = ReduceMax(x, axes=(1, 2)) (f32[batch]).

    Integer-valued inputs below 2**22 make both outputs exact, so a result says exactly which input it came from.
    ``y`` carries the input's symbolic names (sliced back after padding); ``s`` is transparent to zero padding
    (inputs are positive)."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Add", ["x2", "one"], ["y"]),
        helper.make_node("ReduceMax", ["x"], ["s"], axes=[1, 2], keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(np.array(2, np.float32), "two"),
        numpy_helper.from_array(np.array(1, np.float32), "one"),
    ]
    return make_model(
        nodes,
        [vi("x", np.float32, ["batch", "n", ECHO_FEATURES])],
        [vi("y", np.float32, ["batch", "n", ECHO_FEATURES]), vi("s", np.float32, ["batch"])],
        inits,
        name="echo",
    )


def echo_input(uid: int, batch: int, n: int) -> np.ndarray:
    """A request's input, unique to ``uid`` (values uid * 4096 + position; exact in float32 for uid < 1000)."""
    size = batch * n * ECHO_FEATURES
    assert size <= 4096 and uid < 1000
    return (uid * 4096 + np.arange(size)).astype(np.float32).reshape(batch, n, ECHO_FEATURES)


def echo_expected(x: np.ndarray) -> dict:
    return {"y": x * 2 + 1, "s": x.max(axis=(1, 2))}


def check_echo(out: dict, x: np.ndarray, what: str = "") -> None:
    exp = echo_expected(x)
    assert set(out) == {"y", "s"}, f"{what}: outputs {sorted(out)}"
    for k in ("y", "s"):
        assert out[k].dtype == np.float32 and out[k].shape == exp[k].shape, (
            f"{what}: {k} is {out[k].dtype}{out[k].shape}, expected {exp[k].shape}"
        )
        assert np.array_equal(out[k], exp[k]), f"{what}: {k} is not this request's result"


def matmul_chain_model(width: int = 384, depth: int = 8, seed: int = 0) -> bytes:
    """x f32[batch, width] -> depth x (MatMul, Tanh): a few milliseconds of compute per request at batch 32."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        out = "y" if i == depth - 1 else f"t{i}"
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [out]))
        prev = out
    return make_model(
        nodes,
        [vi("x", np.float32, ["batch", width])],
        [vi("y", np.float32, ["batch", width])],
        inits,
        name="matmul_chain",
    )


def ort_static(model, feeds: dict, threads: int, overrides: dict) -> list:
    """ONNX Runtime as the host NPU computes a static graph: the reference it must match bitwise at the same thread
    count. On the model's one session at the feeds' sizes (issue 28), or with every symbolic dim fixed
    (free-dimension overrides) where each size has a session of its own (GERT_HOST_ORT_SESSION_PER_SIZE=1)."""
    from models import session_per_size

    sess = ort_session(model, threads, overrides if session_per_size() else None)
    return sess.run(None, feeds)


def pad_to(x: np.ndarray, shape: tuple, value) -> np.ndarray:
    """``x`` in the top-left corner of an array of ``shape`` filled with ``value``."""
    out = np.full(shape, value, x.dtype)
    out[tuple(slice(0, s) for s in x.shape)] = x
    return out


# ---- many callers, one model ---------------------------------------------------------------------------------------

MODES = ("run", "call", "submit", "async", "list")


def run_callers(model, plans: list, timeout: float = 120.0) -> int:
    """Every thread ``t`` makes the calls ``plans[t]`` (a list of (mode, [(batch, n), ...])) on ``model`` at once,
    and checks that each call returned exactly its own result(s), in order. Returns how many requests were made.

    Modes: run (dict), call (model(**inputs)), submit (Futures, resolved in submission order after the thread made
    them all), async (run_async gathered in one event loop), list (run([...]) with mixed shapes)."""
    uid = iter(range(1, 1000))
    work = []  # per thread: [(mode, [x, ...])]
    for plan in plans:
        calls = []
        for mode, shapes in plan:
            calls.append((mode, [echo_input(next(uid), b, n) for b, n in shapes]))
        work.append(calls)
    errors: list = []
    barrier = threading.Barrier(len(work))

    def caller(t: int) -> None:
        try:
            barrier.wait(timeout)
            futures = []  # (future, x, label) in submission order
            for c, (mode, xs) in enumerate(work[t]):
                label = f"thread {t} call {c} ({mode})"
                if mode == "run":
                    check_echo(model.run({"x": xs[0]}), xs[0], label)
                elif mode == "call":
                    check_echo(model(x=xs[0]), xs[0], label)
                elif mode == "submit":
                    futures += [(model.submit({"x": x}), x, f"{label} #{i}") for i, x in enumerate(xs)]
                elif mode == "async":

                    async def gather(xs=xs):
                        return await asyncio.gather(*(model.run_async({"x": x}) for x in xs))

                    for i, (out, x) in enumerate(zip(asyncio.run(gather()), xs)):
                        check_echo(out, x, f"{label} #{i}")
                elif mode == "list":
                    outs = model.run([{"x": x} for x in xs])
                    assert isinstance(outs, list) and len(outs) == len(xs), label
                    for i, (out, x) in enumerate(zip(outs, xs)):
                        check_echo(out, x, f"{label} #{i}")
                else:
                    raise AssertionError(mode)
            for fut, x, label in futures:
                check_echo(fut.result(timeout), x, label)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append((t, e))

    threads = [threading.Thread(target=caller, args=(t,), name=f"caller-{t}") for t in range(len(work))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not any(th.is_alive() for th in threads), "a caller hung"
    if errors:
        t, e = errors[0]
        raise AssertionError(f"{len(errors)} caller(s) failed; thread {t}: {e!r}") from e
    return sum(len(xs) for calls in work for _, xs in calls)


def callers_strategy(max_threads: int = 6, max_calls: int = 4, max_batch: int = 20, max_n: int = 10):
    """Hypothesis strategy: a list (one per thread) of call plans for run_callers."""
    from hypothesis import strategies as st

    shape = st.tuples(st.integers(1, max_batch), st.integers(1, max_n))
    call = st.tuples(st.sampled_from(MODES), st.lists(shape, min_size=1, max_size=4)).map(
        lambda c: (c[0], c[1][:1]) if c[0] in ("run", "call") else c
    )
    return st.lists(st.lists(call, min_size=1, max_size=max_calls), min_size=2, max_size=max_threads)


def model_config_strategy():
    """Hypothesis strategy: keyword arguments of gert.load for the echo model (streams, policy of n, gears)."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries(
        {
            "streams": st.integers(1, 3),
            "policy": st.sampled_from(["exact", "dynamic", "pad"]),
            "batch_gears": st.sampled_from([(1, 2, 4, 8), (1, 4, 8, 16), (2, 16)]),
            "max_exact_graphs": st.sampled_from([2, 16]),
        }
    )


def load_echo(gert, config: dict, devices=(0,)):
    policy = config["policy"]
    gears = {"batch": list(config["batch_gears"])}
    if policy == "pad":
        gears["n"] = [4, 10]
    return gert.load(
        echo_model(),
        devices=devices,
        streams=config["streams"],
        gears=gears,
        shape_policy={"n": policy},
        max_exact_graphs=config["max_exact_graphs"],
    )


def expected_dispatches(requests: list, top_gear: int) -> int:
    """How many executor requests a list of batch sizes makes when batches above the top gear are split."""
    return sum(-(-b // top_gear) for b in requests)


def wait_all(futures, timeout: float):
    done, pending = concurrent.futures.wait(futures, timeout)
    assert not pending, f"{len(pending)} future(s) did not finish within {timeout}s"
    return done
