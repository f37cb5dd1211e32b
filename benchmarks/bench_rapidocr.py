"""RapidOCR (det -> cls -> rec) on gert through gert.patch_onnxruntime, against RapidOCR on ONNX Runtime.

    python benchmarks/bench_rapidocr.py [--images 12] [--rounds 4] [--pairs 3]

The application is unchanged (examples/rapidocr_on_gert.py: rendered text images of a dozen sizes); each side runs
in its own process (the patch must precede RapidOCR's import), at the same thread count (both default to all
cores), and the pairs of processes alternate so that this machine's slow and quiet windows hit both alike. Each
process reads the images once (gert compiles its graphs then: reported), then times ``rounds - 1`` more passes.
Reported: images/s of each (median over pairs), the ratio, and for gert the graphs compiled per model and the share
of requests that ran on static graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "examples", "rapidocr_on_gert.py")


def run(mode: str, images: int, rounds: int) -> dict:
    r = subprocess.run(
        [sys.executable, SCRIPT, mode, str(images), str(rounds)], capture_output=True, text=True, timeout=1800
    )
    if r.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{r.stderr[-3000:]}")
    return json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=4, help="passes over the images per process (the first untimed)")
    ap.add_argument("--pairs", type=int, default=3, help="alternating ort/gert process pairs")
    args = ap.parse_args()
    ips = {"ort": [], "gert": []}
    last = {}
    for _ in range(args.pairs):
        for mode in ("ort", "gert"):
            last[mode] = run(mode, args.images, args.rounds)
            ips[mode].append(last[mode]["images_per_s"])
    same = last["ort"]["results"] == last["gert"]["results"] or all(
        [t for _, t, _ in a] == [t for _, t, _ in b] for a, b in zip(last["ort"]["results"], last["gert"]["results"])
    )
    o, g = statistics.median(ips["ort"]), statistics.median(ips["gert"])
    print(f"RapidOCR, {args.images} images x {args.rounds - 1} timed passes, {args.pairs} process pairs")
    print(f"{'':18}{'images/s':>10}   per pair")
    print(f"{'ONNX Runtime':18}{o:10.2f}   " + " ".join(f"{v:.2f}" for v in ips["ort"]))
    print(f"{'gert (patched)':18}{g:10.2f}   " + " ".join(f"{v:.2f}" for v in ips["gert"]))
    print(f"ratio gert / ONNX Runtime: {g / o:.3f}   same texts: {same}")
    for part in ("text_det", "text_cls", "text_rec"):
        s = last["gert"]["sessions"].get(part + "_stats", {})
        print(f"  {part}: " + ", ".join(f"{k} {v}" for k, v in s.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
