"""CompileGraph seconds on the host NPU for the PP-OCR models, static shapes (issue 11).

    python benchmarks/bench_compile.py [--repeat N] [--baseline SRC] [--json out.json]

Per model: a fresh Session, AddGraph with input_shape fixed, CompileGraph (the provider's ONNX Runtime session and
the output shapes), N times, each at a shape not compiled before (the last dim stepped). ``--baseline SRC``: also
measure another source tree of gert, built in place (e.g.
``git archive main | tar -x -C /tmp/base && cd /tmp/base && python setup.py build_ext --inplace``), each tree in
its own process, rounds interleaved so that the machine's noise hits both alike. Needs
``pip install --no-deps rapidocr-onnxruntime==1.4.4``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import machine, ppocr_model

# (name, file, input shape of the first compile, step of its last dim per later compile): each compile is of a
# shape not compiled before in the process, so no cache of either tree answers it.
MODELS = [
    ("det", "ch_PP-OCRv4_det_infer.onnx", "x:1,3,640,640", -32),
    ("rec", "ch_PP-OCRv4_rec_infer.onnx", "x:1,3,48,320", -8),
    ("cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "x:8,3,48,192", -8),
]


def measure(repeat: int) -> dict:
    """Compile seconds per model in this process, every sample (the first compile, which imports and warms up,
    dropped)."""
    import gert

    out = {}
    for name, file, shape, step in MODELS:
        path = ppocr_model(file)
        if path is None:
            raise SystemExit(f"{file} not found: pip install --no-deps rapidocr-onnxruntime==1.4.4")
        with open(path, "rb") as f:
            data = f.read()
        samples = []
        for i in range(repeat + 1):
            with gert.Session() as s:
                head, last = shape.rsplit(",", 1)
                graph = gert.Graph.from_onnx(data, {"input_shape": f"{head},{int(last) + i * step}"})
                t = time.perf_counter()
                s.add_graph(1, graph)
                s.compile_graph(1)
                dt = time.perf_counter() - t
                assert s.summary(1).is_static
            if i:
                samples.append(dt)
        out[name] = samples
    return out


def run_tree(src: str, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=src)
    code = (
        f"import sys, json; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
        f"import bench_compile as b, gert; assert gert.__file__.startswith({src!r}), gert.__file__; "
        f"print(json.dumps(b.measure({repeat})))"
    )
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=src)
    if p.returncode:
        raise SystemExit(f"measuring {src} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="compiles per model per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds with --baseline")
    ap.add_argument("--baseline", help="another gert source tree, built in place")
    ap.add_argument("--json")
    a = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here}
    if a.baseline:
        trees = {"baseline": os.path.abspath(a.baseline), "this": here}
    rounds: dict = {k: [] for k in trees}
    for _ in range(a.rounds if a.baseline else 1):
        for k, src in trees.items():
            rounds[k].append(run_tree(src, a.repeat))
    samples = {k: {m: [x for r in v for x in r[m]] for m, _, _, _ in MODELS} for k, v in rounds.items()}
    result = {k: {m: (statistics.median(xs), min(xs)) for m, xs in v.items()} for k, v in samples.items()}
    print(machine() + f"; load average {os.getloadavg()[0]:.1f}")
    print(f"CompileGraph seconds, static input_shape: median (min) of {a.repeat} x {len(rounds['this'])} compiles")
    print(f"{'model':6}{'shape':>14}" + "".join(f"{k:>18}" for k in trees) + ("  ratio (of min)" if a.baseline else ""))
    for m, _, shape, _ in MODELS:
        row = f"{m:6}{shape[2:]:>14}" + "".join(f"{result[k][m][0]:>10.3f} ({result[k][m][1]:.3f})" for k in trees)
        if a.baseline:
            this, base = result["this"][m], result["baseline"][m]
            row += f"{this[0] / base[0]:>8.2f} ({this[1] / base[1]:.2f})"
        print(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
