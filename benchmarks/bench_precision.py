"""NPU preview (issue 24): would a stock CANN 8.x parse PP-OCR and ONNX's node test cases, and what do GE's
precision modes do to PP-OCR's outputs?

Not a timing benchmark. Part 1: ``gert.cann_check`` on PP-OCRv4 det / rec and the mobile v2 cls, and on every model
of ONNX's backend node test cases (``onnx.backend.test.case.node.collect_testcases``): how many a stock CANN 8.x
ONNX parser maps as they are, how many would map after re-export at the highest opset <= 18 where their ops map
(the table's answer; ``gert check --fix`` does the conversion), and the reasons for the rest. Part 2:
``gert.compare_precision`` per model under force_fp16, allow_mix_precision and allow_fp32_to_fp16 against fp32
(must_keep_origin_dtype) on rendered text images (examples/rapidocr_on_gert.py, preprocessed as RapidOCR does), and
``gert.find_keep_fp32`` where force_fp16 misses cosine 0.999. The numbers come from gert's emulation model (fp16
rounding at node boundaries, fp32 compute: gert/preview/precision.py), not from a device.
Needs ``pip install --no-deps rapidocr-onnxruntime==1.4.4`` for part 2.

python benchmarks/bench_precision.py
"""

from __future__ import annotations

import collections
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from _common import CLS, DET, REC, machine, ppocr_model  # noqa: E402

MODES = ("force_fp16", "allow_mix_precision", "allow_fp32_to_fp16")


def node_cases() -> None:
    from gert.preview import cann_ops

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases(None)
    t = cann_ops.table()
    as_is = refit = 0
    reasons: collections.Counter = collections.Counter()
    ops: collections.Counter = collections.Counter()
    opsets: collections.Counter = collections.Counter()
    for c in cases:
        r = cann_ops.check_proto(c.model)
        v = r.opsets.get("ai.onnx", 0)
        opsets["<= 18" if v <= 18 else ">= 19"] += 1
        if r.ok:
            as_is += 1
            refit += 1
            continue
        walked = [(n.domain or "ai.onnx", n.op_type) for n, _ in cann_ops.walk_nodes(c.model.graph, "main")]
        if all(d == "ai.onnx" for d, _ in walked) and cann_ops.best_opset(walked, t) is not None:
            refit += 1
            continue
        for u in r.unsupported:
            if u.reason != cann_ops.OPSET_NOT_MAPPED or not t.opsets("ai.onnx", u.op_type):
                reasons[u.reason] += 1
                ops[u.op_type] += 1
    n = len(cases)
    print(
        f"ONNX node test cases (onnx backend, {n} models; model opset {opsets['>= 19']} at 19+, "
        f"{opsets['<= 18']} at <= 18), CANN 8.x table of {t.date}:"
    )
    print(f"  parsed as they are:                      {as_is:5d} ({as_is / n:.1%})")
    print(f"  parsed after re-export at opset <= 18:   {refit:5d} ({refit / n:.1%})")
    print(
        f"  refused even then:                       {n - refit:5d} ({(n - refit) / n:.1%}); nodes by reason: "
        + ", ".join(f"{k} {v}" for k, v in reasons.most_common())
    )
    print("  most common refused op types: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(15)))


def ppocr_inputs() -> dict:
    import cv2
    from rapidocr_on_gert import images

    img = images(1)[0]  # BGR uint8, one rendered text line
    h, w = img.shape[:2]
    H, W = max(32, (h + 31) // 32 * 32), max(32, (w + 31) // 32 * 32)
    det = cv2.resize(img, (W, H)).astype(np.float32) / 255.0
    det = (det - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)

    def line(width: int) -> np.ndarray:
        r = cv2.resize(img, (width, 48)).astype(np.float32) / 255.0
        return ((r - 0.5) / 0.5).transpose(2, 0, 1)[None]

    return {DET: det.transpose(2, 0, 1)[None].astype(np.float32), REC: line(320), CLS: line(192)}


def ppocr_precision() -> None:
    import gert

    paths = {name: ppocr_model(name) for name in (DET, REC, CLS)}
    if not all(paths.values()):
        print("PP-OCR: skipped (pip install --no-deps rapidocr-onnxruntime==1.4.4)", file=sys.stderr)
        return
    inputs = ppocr_inputs()
    for name, path in paths.items():
        r = gert.cann_check(path)
        print(f"{name}: {r.summary()}; opsets {r.opsets}")
    print()
    for name, path in paths.items():
        import onnx

        feed_name = onnx.load(path, load_external_data=False).graph.input[0].name
        x = inputs[name]
        table = gert.compare_precision(path, {feed_name: x}, modes=MODES + ("must_keep_origin_dtype",))
        print(f"{name} ({feed_name} {'x'.join(map(str, x.shape))}):")
        print("\n".join("  " + line for line in str(table).splitlines()))
        if not table.worst_cosine("force_fp16") >= 0.999:
            print("  " + str(gert.find_keep_fp32(path, {feed_name: x}, "force_fp16", 0.999)))
        print()


def main() -> int:
    print(machine())
    node_cases()
    print()
    ppocr_precision()
    return 0


if __name__ == "__main__":
    sys.exit(main())
