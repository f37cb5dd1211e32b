"""RapidOCR, an unmodified ONNX Runtime application, on gert: render text images, read them, print JSON.

    python examples/rapidocr_on_gert.py gert [COUNT [ROUNDS]]    # every ONNX Runtime session RapidOCR makes is gert's
    python examples/rapidocr_on_gert.py ort  [COUNT [ROUNDS]]    # ONNX Runtime itself, for comparison

Needs RapidOCR and what it imports: `pip install --no-deps rapidocr-onnxruntime==1.4.4` plus the test extra
(opencv-python-headless, pyclipper, shapely, Pillow, PyYAML, six, tqdm). The one line that moves RapidOCR onto gert
is ``gert.patch_onnxruntime(when="always")``, before RapidOCR is imported. tests/test_rapidocr_on_gert.py and
benchmarks/bench_rapidocr.py run this script.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

TEXTS = [
    "Hello gert 123",
    "Ascend NPU runtime",
    "The quick brown fox",
    "GE graph compile",
    "stream core lock",
    "zero copy tensors",
    "Triton Python backend",
    "dynamic shapes 2026",
    "ONNX Runtime facade",
    "PP-OCR det cls rec",
    "host NPU on CPU",
    "batch gears and pads",
]
SIZES = [
    (120, 400),
    (100, 520),
    (160, 600),
    (96, 360),
    (140, 480),
    (110, 560),
    (128, 640),
    (90, 420),
    (150, 520),
    (120, 460),
    (100, 380),
    (130, 600),
]


def font(size: int = 28):
    from PIL import ImageFont

    for path in ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "DejaVuSans.ttf"):
        try:
            return ImageFont.truetype(path, size)
        except OSError:
            continue
    return ImageFont.load_default(size=size)  # Pillow >= 10.1 bundles a scalable font


def images(count: int = len(TEXTS)) -> list:
    """BGR uint8 images (as cv2 reads them): one line of text each, of different sizes."""
    from PIL import Image, ImageDraw

    f = font()
    out = []
    for i in range(count):
        text, (h, w) = TEXTS[i % len(TEXTS)], SIZES[i % len(SIZES)]
        im = Image.new("RGB", (w, h), "white")
        ImageDraw.Draw(im).text((16 + 4 * (i % 3), h // 3), text, fill="black", font=f)
        out.append(np.ascontiguousarray(np.array(im)[:, :, ::-1]))
    return out


def main(mode: str, count: int, rounds: int = 1) -> dict:
    if mode == "gert":
        import gert

        gert.patch_onnxruntime(when="always")
    elif mode != "ort":
        raise SystemExit(f"mode must be gert or ort, got {mode!r}")
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    imgs = images(count)
    results = []
    for im in imgs:  # the first round: results (and, for gert, the compiles)
        res, _ = engine(im)
        results.append([[np.asarray(box, float).tolist(), text, float(score)] for box, text, score in (res or [])])
    t = time.perf_counter()
    for _ in range(rounds - 1):
        for im in imgs:
            engine(im)
    took = time.perf_counter() - t
    sessions = {}
    for part, infer in (("text_det", "infer"), ("text_cls", "infer"), ("text_rec", "session")):
        sess = getattr(getattr(getattr(engine, part, None), infer, None), "session", None)
        sessions[part] = type(sess).__module__ + "." + type(sess).__name__
        stats = getattr(getattr(sess, "model", None), "stats", None)
        if stats:
            s = stats()
            sessions[part + "_stats"] = {
                k: s[k] for k in ("compiles", "request_path_compiles", "static_hits", "dynamic_hits")
            }
    return {
        "results": results,
        "sessions": sessions,
        "images_per_s": (count * (rounds - 1) / took) if rounds > 1 and took > 0 else None,
    }


if __name__ == "__main__":
    mode = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else len(TEXTS)
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    print("RESULT " + json.dumps(main(mode, count, rounds)))
