"""Triton's own load generator, perf_analyzer, against gert_triton and a hand-written ONNX Runtime model.py.

    python benchmarks/bench_perf_analyzer.py [--concurrency 1 4 16] [--rounds 3] [--interval-ms 2000] [--baseline TREE]
                                             [--json out.json]

Why: bench_triton.py measures with our own client; perf_analyzer is what Triton users measure with. One server (the
nvidia-pytriton wheel's tritonserver) serves the PP-OCR cls model (``pip install --no-deps
rapidocr-onnxruntime==1.4.4``) twice, as bench_triton.py builds them (max_batch_size 8, dynamic batching 2 ms,
one CPU instance):

- ``gert``: the one-line model.py of `gert repo init`;
- ``ort_batched``: hand-written ONNX Runtime (2 intra-op threads): concatenate the batch, one run, split.

perf_analyzer runs over gRPC at each concurrency, with and without ``--shared-memory system`` (inputs and outputs in
POSIX shared memory instead of the gRPC messages), in ``--rounds`` rounds whose order alternates (gert first in even
rounds, ort_batched first in odd ones), so load that changes over the run hits both. Every request carries the same
1x3x48x192 input; without shared memory perf_analyzer checks each answer against ONNX Runtime's, bit for bit
(``--input-data`` JSON with ``validation_data``; with shared memory it cannot: the answers are checked once before).
Reported per model, concurrency and transfer: inferences/s and p50 / p99 latency (medians over the rounds), and
gert's ratio to ort_batched (the median of the rounds' ratios, each of two runs back to back, with their range);
the load average before and after (the machine is shared).

perf_analyzer is not a pip package one can install here (``perf-analyzer`` 2.58+ needs glibc 2.38; the name
``perf-analyzer`` on PyPI otherwise resolves to an empty placeholder): docs/benchmarking-triton.md says how to take
the binary from the tritonclient 2.51 wheel. It is looked for in ``--perf-analyzer``, ``$PERF_ANALYZER``, beside this
Python and on PATH; the libcudart.so.12 it links is taken from the ``nvidia-cuda-runtime-cu12`` wheel when installed.
Without it the script says what to install and exits 0 (skipped), so run_all.py can list it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine, ppocr_model
from bench_triton import CLS, build_repo

MODELS = ("gert", "ort_batched")
SHAPE = (1, 3, 48, 192)
INSTALL = "docs/benchmarking-triton.md, 'Installing perf_analyzer'"


def find_perf_analyzer(asked: str | None) -> str | None:
    for cand in (
        asked,
        os.environ.get("PERF_ANALYZER"),
        os.path.join(os.path.dirname(sys.executable), "perf_analyzer"),
        shutil.which("perf_analyzer"),
    ):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def library_path() -> str:
    """LD_LIBRARY_PATH with the nvidia-cuda-runtime-cu12 wheel's lib directory (libcudart.so.12) first, if any."""
    dirs = []
    try:
        import nvidia.cuda_runtime as cudart  # the wheel's namespace package

        dirs = [os.path.join(p, "lib") for p in cudart.__path__]
    except ImportError:
        pass
    return os.pathsep.join(dirs + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])


def runs(binary: str) -> str | None:
    """None when perf_analyzer starts; else why not (a missing library, named by the loader)."""
    r = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": library_path()}
    )
    text = r.stdout + r.stderr
    return None if "error while loading shared libraries" not in text else text.strip()


def input_data(path: str, x: np.ndarray, out_name: str | None = None, y: np.ndarray | None = None) -> str:
    """perf_analyzer's --input-data JSON: the one input, and (given ``y``) the output every answer must equal."""
    doc: dict = {"data": [{"x": {"content": x.ravel().tolist(), "shape": list(x.shape[1:])}}]}
    if y is not None:
        doc["validation_data"] = [{out_name: {"content": y.ravel().tolist()}}]
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def perf(
    binary: str, url: str, model: str, concurrency: int, shm: bool, data: str, interval_ms: int, out_csv: str
) -> dict[str, float]:
    """One perf_analyzer run: inferences/s, p50 and p99 latency in ms (three measurement windows, no stability
    requirement: on a shared machine it might never call a window stable). With shared memory the outputs are in
    the region, not in the answer perf_analyzer validates (2.51 then reports every answer's size wrong): ``data``
    must carry no validation_data there."""
    cmd = [
        binary,
        "-m",
        model,
        "-u",
        url,
        "-i",
        "grpc",
        "-b",
        "1",
        f"--concurrency-range={concurrency}",
        f"--input-data={data}",
        f"--measurement-interval={interval_ms}",
        "--max-trials=3",
        "--stability-percentage=1000",
        "-f",
        out_csv,
    ]
    if shm:
        cmd += ["--shared-memory=system"]
    r = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=interval_ms / 1000 * 10 + 120,
        env={**os.environ, "LD_LIBRARY_PATH": library_path()},
    )
    if r.returncode != 0:
        raise RuntimeError(
            f"perf_analyzer {' '.join(cmd[1:])} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        )
    with open(out_csv) as f:
        row = next(csv.DictReader(f))
    return {
        "rps": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--rounds", type=int, default=3, help="alternated A/B rounds (default 3)")
    ap.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer's measurement window (default 2000)")
    ap.add_argument("--perf-analyzer", help="the perf_analyzer binary (else $PERF_ANALYZER, beside python, PATH)")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument(
        "--baseline",
        metavar="TREE",
        help="also serve gert from the gert / gert_triton of this source tree (built in place) as gert_base, in "
        "the same rounds: before / after a change side by side (bench_triton.py's --baseline)",
    )
    args = ap.parse_args()
    models = MODELS + (("gert_base",) if args.baseline else ())
    binary = find_perf_analyzer(args.perf_analyzer)
    if binary is None:
        print(f"bench_perf_analyzer: skipped: no perf_analyzer binary (see {INSTALL})")
        return
    broken = runs(binary)
    if broken:
        print(f"bench_perf_analyzer: skipped: {binary} does not start ({broken}; see {INSTALL})")
        return
    model_path = ppocr_model(CLS)
    if model_path is None:
        sys.exit("PP-OCR cls not found: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    import onnxruntime as ort
    import tritonclient.grpc as grpcclient

    import gert
    from gert_triton.server import TritonServer

    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="gert-bench-pa-")
    log = os.path.join(root, "server.log")
    server = TritonServer(
        build_repo(root, model_path, args.baseline), log_path=log, extra_args=["--exit-timeout-secs=5"]
    )
    results: dict[tuple, list[dict[str, float]]] = {}
    try:
        server.start()
        server.wait_ready(120)
        x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        out_name = sess.get_outputs()[0].name
        y = sess.run([out_name], {sess.get_inputs()[0].name: x})[0]
        client = grpcclient.InferenceServerClient(server.url("grpc"))
        for m in models:  # each answers what ONNX Runtime answers (perf_analyzer checks it too, exactly)
            i = grpcclient.InferInput("x", list(x.shape), "FP32")
            i.set_data_from_numpy(x)
            np.testing.assert_allclose(
                client.infer(m, [i], client_timeout=60).as_numpy(out_name), y, rtol=1e-4, atol=1e-5, err_msg=m
            )
        client.close()
        checked = input_data(os.path.join(root, "checked.json"), x, out_name, y)
        plain = input_data(os.path.join(root, "plain.json"), x)
        url = server.url("grpc").replace("grpc://", "")
        for r in range(args.rounds):
            order = models if r % 2 == 0 else models[::-1]
            for c in args.concurrency:
                for shm in (False, True):
                    for m in order:
                        res = perf(
                            binary,
                            url,
                            m,
                            c,
                            shm,
                            plain if shm else checked,
                            args.interval_ms,
                            os.path.join(root, "pa.csv"),
                        )
                        results.setdefault((m, c, shm), []).append(res)
                        print(
                            f"  round {r + 1}/{args.rounds} {m:<11} c={c:<2} shm={'system' if shm else 'none  '} "
                            f"{res['rps']:7.1f} infer/s p50 {res['p50_ms']:6.1f} ms p99 {res['p99_ms']:6.1f} ms",
                            file=sys.stderr,
                        )
    except Exception:
        print(f"server log tail ({log}):", file=sys.stderr)
        with open(log, errors="replace") as f:
            print("".join(f.readlines()[-30:]), file=sys.stderr)
        raise
    finally:
        code = server.stop(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    rows = []
    for (m, c, shm), rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_ms", "p99_ms")}
        rows.append(
            {
                "model": m,
                "concurrency": c,
                "shared_memory": "system" if shm else "none",
                **med,
                "rounds": [r["rps"] for r in rs],
            }
        )
    by = {(r["model"], r["concurrency"], r["shared_memory"]): r for r in rows}
    print(
        f"backend={gert.backend()} ({machine()}); loadavg (1/5/15 min) before "
        f"{'/'.join(f'{v:.1f}' for v in load_before)}, after {'/'.join(f'{v:.1f}' for v in load_after)}; "
        f"perf_analyzer gRPC, PP-OCR cls 1x3x48x192 batch 1 (answers validated without shm), "
        f"{args.rounds} alternated rounds of {args.interval_ms} ms x 3 windows, medians; server exit code {code}"
    )
    print(
        "| concurrency | shared memory | gert infer/s | ort_batched infer/s | gert / ort (per-round ratios: median "
        "[min, max]) | gert p50 / p99 ms | ort_batched p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for c in args.concurrency:
        for shm in ("none", "system"):
            g, o = by[("gert", c, shm)], by[("ort_batched", c, shm)]
            ratios = [a / b for a, b in zip(g["rounds"], o["rounds"])]  # one round's A and B ran back to back
            print(
                f"| {c} | {shm} | {g['rps']:.0f} | {o['rps']:.0f} | {statistics.median(ratios):.2f}x "
                f"[{min(ratios):.2f}, {max(ratios):.2f}] | {g['p50_ms']:.1f} / {g['p99_ms']:.1f} "
                f"| {o['p50_ms']:.1f} / {o['p99_ms']:.1f} |"
            )
    if args.baseline:
        print(f"\ngert / gert_base ({args.baseline}), per-round ratios:")
        for c in args.concurrency:
            for shm in ("none", "system"):
                g, b = by[("gert", c, shm)], by[("gert_base", c, shm)]
                ratios = [a / z for a, z in zip(g["rounds"], b["rounds"])]
                print(
                    f"| {c} | {shm} | {g['rps']:.0f} | {b['rps']:.0f} | {statistics.median(ratios):.2f}x "
                    f"[{min(ratios):.2f}, {max(ratios):.2f}] |"
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"rows": rows, "machine": machine(), "loadavg_before": load_before, "loadavg_after": load_after},
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
