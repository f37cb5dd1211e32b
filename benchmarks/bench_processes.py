"""Several processes on one host NPU device: the device's cores shared by every process's runs, or each process
counting only its own (GERT_HOST_SHARED_CORES=0).

    python benchmarks/bench_processes.py [--processes 2] [--seconds 10] [--rounds 3] [--model det|cls] [--json out.json]

Why: a real NPU's AI cores serve every process that opened the device; Triton's model instances and the models of one
server are processes of their own (one Python stub each), as are two notebooks. ``--processes`` processes each load
the PP-OCR model (``pip install --no-deps rapidocr-onnxruntime==1.4.4``; det at 640x640 by default) with
``gert.load``'s defaults (one stream over all cores), warm up, then run one image at a time for ``--seconds`` from a
common start. A round runs both settings, their order alternating from round to round. Reported per setting: the
images per second of all processes together (median over rounds) and each round's; each result is checked against
ONNX Runtime's once per process. The load average before and after is printed (the machine must be quiet).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine, ppocr_model

MODELS = {
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 640, 640)),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
}
SETTINGS = {"shared": "/dev/shm", "own": "0"}  # GERT_HOST_SHARED_CORES


def child(model: str, seconds: float) -> None:
    """One process: load, check one result against ONNX Runtime, say "ready", wait for the common start time read
    from stdin, run for ``seconds``; prints the images per second."""
    import onnxruntime as ort

    import gert

    filename, shape = MODELS[model]
    path = ppocr_model(filename)
    x = np.random.default_rng(os.getpid()).random(shape, dtype=np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with gert.load(path) as m:
        got = next(iter(m.run({"x": x}).values()))
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
        print("ready", flush=True)
        start = float(sys.stdin.readline())
        while time.time() < start:
            time.sleep(0.002)
        n, t = 0, time.monotonic()
        while time.monotonic() - t < seconds:
            m.run({"x": x})
            n += 1
        print(json.dumps({"rate": n / (time.monotonic() - t)}), flush=True)


def one_round(setting: str, args) -> list:
    """The rates of ``args.processes`` processes under ``setting``, started together once every one is loaded and
    warm (each says "ready"; then all get the same start time, a moment later)."""
    env = dict(os.environ, GERT_HOST_SHARED_CORES=SETTINGS[setting])
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", args.model, str(args.seconds)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.processes)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise SystemExit(f"a process exited with {p.wait(timeout=60)} before it was ready")
        start = time.time() + 0.2
        rates = []
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{start}\n")
            p.stdin.flush()
        for p in procs:
            out, _ = p.communicate(timeout=120 + args.seconds)
            if p.returncode != 0:
                raise SystemExit(f"a process exited with {p.returncode}")
            rates.append(json.loads(out.strip().splitlines()[-1])["rate"])
        return rates
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main(argv: list | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", choices=sorted(MODELS), default="det")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], float(args.child[1]))
        return {}
    if ppocr_model(MODELS[args.model][0]) is None:
        raise SystemExit("PP-OCR models not found: pip install --no-deps rapidocr-onnxruntime==1.4.4")
    load_before = os.getloadavg()[0]
    rounds: dict = {s: [] for s in SETTINGS}
    for r in range(args.rounds):
        for setting in list(SETTINGS)[:: 1 if r % 2 == 0 else -1]:
            rates = one_round(setting, args)
            rounds[setting].append(rates)
            print(f"round {r + 1}: {setting}: {sum(rates):.1f} images/s ({', '.join(f'{x:.1f}' for x in rates)})")
    totals = {s: statistics.median(sum(r) for r in v) for s, v in rounds.items()}
    print(
        f"{args.processes} processes, PP-OCR {args.model}, {args.seconds:.0f} s per round, {machine()}; load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    for s, v in totals.items():
        print(f"{s:7s} {v:8.1f} images/s together (median of {args.rounds} rounds)")
    print(f"shared / own: {totals['shared'] / totals['own']:.2f}x")
    out = {"rounds": rounds, "totals": totals, "machine": machine(), "args": vars(args)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
