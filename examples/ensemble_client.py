"""Read text with the PP-OCR pipeline served by `gert serve examples/ensemble_repository`, over HTTP and gRPC.

    gert serve examples/ensemble_repository &          # HTTP 8000, gRPC 8001, metrics 8002
    python examples/ensemble_client.py [IMAGE ...] [--count N] [--http 127.0.0.1:8000] [--grpc 127.0.0.1:8001]

Without IMAGE it draws a few lines of text. Each image goes to the ensemble ``det_ensemble`` (boxes) over HTTP and
to the BLS model ``ocr`` (boxes and text) over gRPC; the script prints both and checks they agree on the boxes.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rapidocr_on_gert import images  # (examples/rapidocr_on_gert.py: text drawn with Pillow)


def read_image(path: str) -> np.ndarray:
    """A BGR uint8 image, as cv2.imread reads it (what RapidOCR takes)."""
    import cv2

    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        sys.exit(f"cannot read image {path!r}")
    return image


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("images", nargs="*", help="image files (default: drawn text)")
    ap.add_argument("--http", default="127.0.0.1:8000", help="the server's HTTP address")
    ap.add_argument("--grpc", default="127.0.0.1:8001", help="the server's gRPC address")
    ap.add_argument("--count", type=int, default=3, help="how many drawn images without IMAGE (default 3)")
    args = ap.parse_args()
    http = httpclient.InferenceServerClient(args.http)
    grpc = grpcclient.InferenceServerClient(args.grpc)
    for model in ("det_ensemble", "ocr"):
        if not http.is_model_ready(model):
            sys.exit(f"{model} is not ready: start `gert serve examples/ensemble_repository` first")
    pictures = [read_image(p) for p in args.images] or images(args.count)
    for picture in pictures:
        batch = picture[np.newaxis]  # one image per request: [1, H, W, 3]
        inp = httpclient.InferInput("image", list(batch.shape), "UINT8")
        inp.set_data_from_numpy(batch)
        ensemble_boxes = http.infer("det_ensemble", [inp]).as_numpy("boxes")[0]
        inp = grpcclient.InferInput("image", list(batch.shape), "UINT8")
        inp.set_data_from_numpy(batch)
        r = grpc.infer("ocr", [inp])
        texts = [t.decode("utf-8") for t in r.as_numpy("text")[0]]
        scores, boxes = r.as_numpy("scores")[0], r.as_numpy("boxes")[0]
        print(f"{picture.shape[1]}x{picture.shape[0]}: ensemble found {len(ensemble_boxes)} box(es); BLS read:")
        for text, score, box in zip(texts, scores, boxes):
            print(f"  {text!r}  score {score:.3f}  box {box.astype(int).tolist()}")
        # BLS drops boxes whose text scores below RapidOCR's text_score: each of its boxes is one of the ensemble's
        if not all(any(np.array_equal(b, e) for e in ensemble_boxes) for b in boxes):
            sys.exit("the BLS model's boxes are not the ensemble's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
