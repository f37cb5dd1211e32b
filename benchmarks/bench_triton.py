"""gert_triton under Triton vs two hand-written Python-backend model.py files, on one real tritonserver.

    python benchmarks/bench_triton.py [--model cls|det] [--duration 10] [--rounds 10] [--concurrency 16] [--warmup 2]
                                      [--variant NAME=KEY:VALUE,...] [--baseline TREE] [--json out.json]

One server (the tritonserver of the nvidia-pytriton wheel, started by gert_triton.server.TritonServer on free loopback
ports) serves a PP-OCR model (needs ``pip install --no-deps rapidocr-onnxruntime==1.4.4``; ``--model``: cls, requests
of 1x3x48x192 and max_batch_size 8, the default; det, requests of 1x3x640x640 and max_batch_size 4) four ways, each
with dynamic_batching max_queue_delay 2 ms and one CPU instance:

- ``gert``: the one-line model.py (``from gert_triton import TritonPythonModel``) as `gert repo init` writes it, no
  parameters: the default layout for a batching model, two streams sharing the device's cube cores by load (on
  the host NPU of a 2-core machine: two single-threaded ONNX Runtime runs when both run, one with every thread when
  one does), a batch split over them where that measured faster than whole (gert/core/split_choice.py).
- ``gert_1stream``: the same with parameter streams=1: one stream over all cores (ONNX Runtime with 2 intra-op
  threads, as the baselines).
- ``--variant NAME=KEY:VALUE,...``: the one-line model.py again as NAME with those config parameters (a layout to
  compare: ``gert_2full=streams:2``, two streams without core limits);
- ``ort_per_request`` (a): ONNX Runtime (intra-op 2 threads) run once per request of the batch Triton hands over.
- ``ort_batched`` (b): hand-written concatenate, one ONNX Runtime run (intra-op 2 threads), split.

Load: ``--concurrency`` client threads in this process (the server is another process), each with its own gRPC
client, sending batch-1 requests (one image) back to back for ``--duration`` seconds per variant after a warm-up,
split into ``--rounds`` windows that rotate through the variants (noise from other work on the machine hits all
alike). Reported per variant: requests/s, p50 and p99 latency, the average batch the server ran and the server's
compute time per execution (from its statistics), and the ratios of gert to (a) and (b). Targets (issue 5):
>= 1.8x (a) and >= 1.0x (b) in requests/s, p99 no worse than (b). Then the same with one client (``--low-load``
seconds per variant, interleaved too): the latency of a lone request (every core on the default layout).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import closed_loop, machine, parse_variants, ppocr_model, thread_scaling, thread_scaling_line

CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"
# --model: the PP-OCR file, a request's shape, max_batch_size, the output's dims in the hand-written config
MODELS = {
    "cls": (CLS, (1, 3, 48, 192), 8, "[ 2 ]"),
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640), 4, "[ 1, -1, -1 ]"),
}
MAX_BATCH = 8
QUEUE_DELAY_US = 2000
ORT_THREADS = 2
VARIANTS = ("ort_per_request", "ort_batched", "gert", "gert_1stream")

ORT_MODEL_PY = '''"""Hand-written Python-backend model: ONNX Runtime on the CPU, {what}."""
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

BATCHED = {batched}


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        so = ort.SessionOptions()
        so.intra_op_num_threads = {threads}
        so.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.inp = self.sess.get_inputs()[0].name
        self.out = self.sess.get_outputs()[0].name

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, self.inp).as_numpy() for r in requests]
        if not BATCHED:
            return [pb_utils.InferenceResponse(
                        [pb_utils.Tensor(self.out, self.sess.run([self.out], {{self.inp: x}})[0])]) for x in xs]
        responses = [None] * len(requests)
        groups = {{}}
        for i, x in enumerate(xs):
            groups.setdefault(x.shape[1:], []).append(i)
        for idx in groups.values():
            y = self.sess.run([self.out], {{self.inp: np.concatenate([xs[i] for i in idx])}})[0]
            offset = 0
            for i in idx:
                n = xs[i].shape[0]
                responses[i] = pb_utils.InferenceResponse([pb_utils.Tensor(self.out, y[offset:offset + n])])
                offset += n
        return responses
'''

ORT_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {max_batch}
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] }} ]
output [ {{ name: "{out}" data_type: TYPE_FP32 dims: {out_dims} }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay} }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""


BASELINE_MODEL_PY = """# gert_triton from another source tree (--baseline): the same model, the code before a change
import sys

sys.path.insert(0, {tree!r})
from gert_triton import TritonPythonModel  # noqa: E402,F401
"""


def build_repo(
    root: str,
    model_path: str,
    baseline: str | None = None,
    out_dims: str = MODELS["cls"][3],
    variants: dict | None = None,
) -> str:
    """gert (via `gert repo init`), ort_per_request and ort_batched, all with the same batching settings;
    ``baseline``: gert and gert_1stream again as ``*_base``, served by the gert_triton of that source tree;
    ``variants``: more gert models, name -> their config parameters (--variant)."""
    from gert_triton.model import onnx_io
    from gert_triton.repo import init_repo

    repo = os.path.join(root, "repo")
    init_repo(model_path, repo, name="gert", max_batch_size=MAX_BATCH)
    init_repo(model_path, repo, name="gert_1stream", max_batch_size=MAX_BATCH, parameters={"streams": "1"})
    for name, parameters in (variants or {}).items():
        init_repo(model_path, repo, name=name, max_batch_size=MAX_BATCH, parameters=parameters)
    if baseline:
        init_repo(model_path, repo, name="gert_base", max_batch_size=MAX_BATCH)
        init_repo(model_path, repo, name="gert_1stream_base", max_batch_size=MAX_BATCH, parameters={"streams": "1"})
        for name in ("gert_base", "gert_1stream_base"):
            with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
                f.write(BASELINE_MODEL_PY.format(tree=os.path.abspath(baseline)))
    with open(os.path.join(repo, "gert", "config.pbtxt")) as f:
        assert f"max_queue_delay_microseconds: {QUEUE_DELAY_US}" in f.read()
    out_name = onnx_io(model_path)["outputs"][0][0]
    for name, batched, what in (
        ("ort_per_request", False, "one run per request"),
        ("ort_batched", True, "concatenate, one run, split"),
    ):
        d = os.path.join(repo, name, "1")
        os.makedirs(d)
        shutil.copyfile(model_path, os.path.join(d, "model.onnx"))
        with open(os.path.join(d, "model.py"), "w") as f:
            f.write(ORT_MODEL_PY.format(what=what, batched=batched, threads=ORT_THREADS))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(
                ORT_CONFIG.format(name=name, max_batch=MAX_BATCH, out=out_name, out_dims=out_dims, delay=QUEUE_DELAY_US)
            )
    return repo


def server_stats(client, model: str) -> dict:
    s = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    infer = s.get("inference_stats", {}).get("compute_infer", {})  # per request: each gets its batch's duration
    return {
        "inferences": int(s.get("inference_count", 0)),
        "executions": int(s.get("execution_count", 0)),
        "compute_infer_ns": int(infer.get("ns", 0)),
        "compute_infer_count": int(infer.get("count", 0)),
    }


def gert_counts(metrics_port: int) -> dict:
    """{model: {"split": n, "whole": n, "asked": n, "skipped": n}}: gert_split_batches_total and
    gert_cancellation_checks_total of each gert variant, from the server's metrics endpoint (what the stubs chose)."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict = {}
    for _family, labels, value in re.findall(
        r"^(gert_split_batches_total|gert_cancellation_checks_total)\{([^}]*)\}\s+(\S+)$", text, re.M
    ):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = lab.get("way") or lab.get("check")
        counts = out.setdefault(lab["model"], {})
        counts[key] = counts.get(key, 0) + int(float(value))
    return out


def load(url: str, model: str, x: np.ndarray, out_name: str, threads: int, seconds: float) -> dict:
    """``threads`` clients, one gRPC client each, batch-1 requests back to back for ``seconds``."""
    import tritonclient.grpc as grpcclient

    def setup(t: int) -> tuple:
        client = grpcclient.InferenceServerClient(url)
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        outs = [grpcclient.InferRequestedOutput(out_name)]
        return (lambda: client.infer(model, [inp], outputs=outs, client_timeout=30)), client.close

    return closed_loop(threads, setup, seconds, model)


def run_windows(client, url: str, x: np.ndarray, out_name: str, clients: int, duration: float, rounds: int) -> list:
    """Every variant under ``clients`` clients for ``duration`` seconds in all, in ``rounds`` windows that rotate
    through the variants (background noise hits all alike); one row per variant."""
    windows: dict = {v: [] for v in VARIANTS}
    deltas: dict = {
        v: {"inferences": 0, "executions": 0, "compute_infer_ns": 0, "compute_infer_count": 0} for v in VARIANTS
    }
    for r in range(rounds):
        for v in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
            before = server_stats(client, v)
            windows[v].append(load(url, v, x, out_name, clients, duration / rounds))
            after = server_stats(client, v)
            for k in deltas[v]:
                deltas[v][k] += after[k] - before[k]
        print(
            f"  {clients} client(s), round {r + 1}/{rounds}: "
            + ", ".join(f"{v} {windows[v][-1]['latencies'].size / windows[v][-1]['seconds']:.0f}" for v in VARIANTS)
            + " req/s",
            file=sys.stderr,
        )
    rows = []
    for v in VARIANTS:
        lat = np.concatenate([w["latencies"] for w in windows[v]])
        seconds = sum(w["seconds"] for w in windows[v])
        d = deltas[v]
        rows.append(
            {
                "variant": v,
                "clients": clients,
                "requests": int(lat.size),
                "seconds": seconds,
                "rps": lat.size / seconds,
                "round_rps": [w["latencies"].size / w["seconds"] for w in windows[v]],
                "p50_ms": float(np.percentile(lat, 50)),
                "p99_ms": float(np.percentile(lat, 99)),
                "avg_batch": d["inferences"] / max(1, d["executions"]),
                "exec_ms": d["compute_infer_ns"] / max(1, d["compute_infer_count"]) / 1e6,
            }
        )
    return rows


def print_rows(rows: list) -> None:
    print(f"{'variant':<16} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'avg batch':>9} {'exec ms':>8} {'requests':>9}")
    for r in rows:
        print(
            f"{r['variant']:<16} {r['rps']:>8.0f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['avg_batch']:>9.2f} "
            f"{r['exec_ms']:>8.2f} {r['requests']:>9}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of load per variant (default 10)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up load per variant (default 2)")
    ap.add_argument("--concurrency", type=int, default=16, help="client threads (default 16)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="split each variant's --duration into this many windows, interleaved (default 10)",
    )
    ap.add_argument(
        "--low-load",
        type=float,
        default=4.0,
        help="seconds per variant with one client, for the latency of a lone request (default 4; 0: skip)",
    )
    ap.add_argument("--json", help="write the rows as JSON to this file")
    ap.add_argument("--model", choices=sorted(MODELS), default="cls", help="the PP-OCR model served (default cls)")
    ap.add_argument(
        "--baseline",
        metavar="TREE",
        help="also serve gert and gert_1stream from the gert / gert_triton of this source tree (built in place), "
        "as gert_base and gert_1stream_base, in the same rounds: before / after a change side by side",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=KEY:VALUE,...",
        help="also serve the one-line model.py as NAME with these config parameters (repeatable), e.g. "
        "gert_2full=streams:2 (two streams without core limits: the device shares its cores among the runs)",
    )
    args = ap.parse_args()
    global VARIANTS, MAX_BATCH
    extra = parse_variants(args.variant, VARIANTS)
    VARIANTS = VARIANTS + tuple(extra)
    if args.baseline:
        VARIANTS = VARIANTS + ("gert_base", "gert_1stream_base")
    filename, shape, MAX_BATCH, out_dims = MODELS[args.model]
    model_path = ppocr_model(filename)
    if model_path is None:
        sys.exit(f"PP-OCR {args.model} not found: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    import tritonclient.grpc as grpcclient

    import gert
    from gert_triton.server import TritonServer

    load_before = f"{os.getloadavg()[0]:.1f}"
    scaling_before = thread_scaling()
    root = tempfile.mkdtemp(prefix="gert-bench-triton-")
    log = os.path.join(root, "server.log")
    server = TritonServer(
        build_repo(root, model_path, args.baseline, out_dims, extra),
        log_path=log,
        extra_args=["--exit-timeout-secs=5"],
    )
    rows: list = []
    low: list = []
    counts: dict = {}
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out_name = None
    try:
        server.start()
        server.wait_ready(120)
        client = grpcclient.InferenceServerClient(server.url("grpc"))
        out_name = client.get_model_metadata("gert", as_json=True)["outputs"][0]["name"]
        reference = None
        for v in VARIANTS:  # the same answer from every variant
            inp = grpcclient.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            y = client.infer(v, [inp], client_timeout=60).as_numpy(out_name)
            reference = y if reference is None else reference
            np.testing.assert_allclose(y, reference, rtol=1e-4, atol=1e-5, err_msg=v)
        for v in VARIANTS:
            load(server.url("grpc"), v, x, out_name, args.concurrency, args.warmup)
        rows = run_windows(client, server.url("grpc"), x, out_name, args.concurrency, args.duration, args.rounds)
        low = (
            run_windows(client, server.url("grpc"), x, out_name, 1, args.low_load, max(1, args.rounds // 2))
            if args.low_load > 0
            else []
        )
        client.close()
        time.sleep(0.5)  # the stubs publish their metrics within an interval (0.1 s)
        counts = gert_counts(server.metrics_port)
    except Exception:
        print(f"server log tail ({log}):", file=sys.stderr)
        with open(log, errors="replace") as f:
            print("".join(f.readlines()[-30:]), file=sys.stderr)
        raise
    finally:
        code = server.stop(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    by = {r["variant"]: r for r in rows}
    g, a, b = by["gert"], by["ort_per_request"], by["ort_batched"]
    print(
        f"backend={gert.backend()} ({machine()}; load average before {load_before}, after "
        f"{os.getloadavg()[0]:.1f}); PP-OCR {args.model} {'x'.join(map(str, shape))}, {args.concurrency} gRPC "
        f"clients, {args.duration:.0f} s per variant in {args.rounds} interleaved windows, max_batch_size "
        f"{MAX_BATCH}, max_queue_delay {QUEUE_DELAY_US} us, server exit code {code}"
    )
    print(thread_scaling_line(scaling_before, thread_scaling()))
    print_rows(rows)
    print(
        "(exec ms: the server's compute_infer time of an execution, averaged over requests: the IPC round trip "
        "plus the model's execute)"
    )
    ratios = {}
    for name, row in [(v, by[v]) for v in ("gert", "gert_1stream", *extra)]:

        def round_median(other, row=row):  # the same windows' ratios: robust to load that changes between rounds
            return float(np.median(np.array(row["round_rps"]) / np.array(other["round_rps"])))

        r = {
            "rps_vs_a": row["rps"] / a["rps"],
            "rps_vs_b": row["rps"] / b["rps"],
            "rps_vs_a_round_median": round_median(a),
            "rps_vs_b_round_median": round_median(b),
            "p99_vs_b": row["p99_ms"] / b["p99_ms"],
        }
        ratios[name] = r
        print(
            f"{name} / (a) ort_per_request: {r['rps_vs_a']:.2f}x req/s (median of per-round ratios "
            f"{r['rps_vs_a_round_median']:.2f}x; target >= 1.8)"
        )
        print(
            f"{name} / (b) ort_batched:     {r['rps_vs_b']:.2f}x req/s (median of per-round ratios "
            f"{r['rps_vs_b_round_median']:.2f}x; target >= 1.0); p99 {row['p99_ms']:.1f} vs {b['p99_ms']:.1f} ms "
            "(target: no worse)"
        )
        base = by.get(f"{name}_base")
        if base is not None:  # --baseline: this tree against the other one, in the same rounds
            r["rps_vs_base"] = row["rps"] / base["rps"]
            r["rps_vs_base_round_median"] = round_median(base)
            print(
                f"{name} / {name}_base:  {r['rps_vs_base']:.2f}x req/s (median of per-round ratios "
                f"{r['rps_vs_base_round_median']:.2f}x); p50 {row['p50_ms']:.1f} vs {base['p50_ms']:.1f} ms, "
                f"p99 {row['p99_ms']:.1f} vs {base['p99_ms']:.1f} ms"
            )
    # This VM has quiet windows and windows where ONNX Runtime's intra-op threads stall (both baselines drop to
    # about half): the ratios per kind of window, telling (b)'s windows apart by their own throughput.
    b_rounds = np.array(b["round_rps"])
    quiet = b_rounds >= 0.75 * b_rounds.max()
    for label, sel in (("quiet windows", quiet), ("slow windows", ~quiet)):
        if sel.any():
            ga, gb = (float(np.median((np.array(g["round_rps"]) / np.array(o["round_rps"]))[sel])) for o in (a, b))
            print(
                f"{label} ((b) at {'>=' if label.startswith('quiet') else '<'} 75% of its best window; "
                f"{int(sel.sum())} of {sel.size}): gert / (a) {ga:.2f}x, gert / (b) {gb:.2f}x (medians)"
            )
            ratios.setdefault("windows", {})[label] = {"count": int(sel.sum()), "rps_vs_a": ga, "rps_vs_b": gb}
    for name, c in sorted(counts.items()):  # what each gert variant's stub chose, from its metrics
        print(
            f"{name}: merged batches run split {c.get('split', 0)}, whole {c.get('whole', 0)}; "
            f"is_cancelled() asks {c.get('asked', 0)}, requests run unasked {c.get('skipped', 0)}"
        )
    if low:
        print(f"one client ({args.low_load:.0f} s per variant, interleaved): the latency of a lone request")
        print_rows(low)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"rows": rows, "low_load_rows": low, "ratios": ratios, "gert_counts": counts, "machine": machine()},
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
