"""RapidOCR's PP-OCR pipeline (rapidocr-onnxruntime 1.4.4) cut into the steps a Triton ensemble or BLS model runs.

Every step is RapidOCR's own code, imported from rapidocr_onnxruntime; only the model calls are left out, so that
gert (in-process, or gert_triton models over Triton) runs them:

    det_pre   uint8 HWC BGR image -> "x" (normalized CHW, as RapidOCR's preprocess, letterbox and DetPreProcess
              make it) and "info" (what det_post needs to map boxes back to the image)
    det       the PP-OCR det model
    det_post  det's probability map + "info" -> "boxes" [n, 4, 2] in image coordinates (DBPostProcess,
              filter_tag_det_res, sorted_boxes, as RapidOCR(use_cls=False, use_rec=False) returns them)
    cls_pre, cls_post   a text-line crop -> cls's input; cls's output -> label and score (TextClassifier's steps)
    ocr       det_pre -> det -> crops -> cls -> rec -> (boxes, texts, scores), as RapidOCR()(image) returns them,
              with the model calls made through an ``infer(model_name, x)`` coroutine (BLS or in-process)

``det_pre`` and ``det_post`` are gert_triton step functions (gert_triton.steps): ``gert repo init det.onnx REPO
--pre ocr_pipeline:det_pre --post ocr_pipeline:det_post`` writes the ensemble around det that
examples/ensemble_repository holds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gert_triton.steps import step

MODEL_FILES = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
}
OUTPUTS = {"det": "sigmoid_0.tmp_0", "cls": "save_infer_model/scale_0.tmp_1", "rec": "softmax_11.tmp_0"}
INFO = ("raw_h", "raw_w", "ratio_h", "ratio_w", "pad_top", "pad_left", "img_h", "img_w")

Infer = Callable[[str, np.ndarray], Awaitable[np.ndarray]]


def model_path(name: str) -> str:
    """The PP-OCR model ``name`` ("det", "cls", "rec") as the installed rapidocr-onnxruntime wheel ships it."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "rapidocr_onnxruntime is not installed: pip install --no-deps rapidocr-onnxruntime==1.4.4"
        )
    path = os.path.join(os.path.dirname(spec.origin), "models", MODEL_FILES[name])
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing from the rapidocr-onnxruntime wheel")
    return path


@dataclass
class Steps:
    """RapidOCR's pre/post-processing objects, built from its config.yaml without its ONNX Runtime sessions."""

    config: dict
    ocr: object = field(init=False)
    det: object = field(init=False)
    cls: object = field(init=False)
    rec: object = field(init=False)

    def __post_init__(self) -> None:
        from rapidocr_onnxruntime.ch_ppocr_cls import TextClassifier
        from rapidocr_onnxruntime.ch_ppocr_cls.utils import ClsPostProcess
        from rapidocr_onnxruntime.ch_ppocr_det import TextDetector
        from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess
        from rapidocr_onnxruntime.ch_ppocr_rec import TextRecognizer
        from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode
        from rapidocr_onnxruntime.main import RapidOCR

        g, d, c, r = (self.config[k] for k in ("Global", "Det", "Cls", "Rec"))
        # The objects RapidOCR.__init__ builds, with the attributes their __init__ sets, minus the sessions
        # (TextDetector.infer, TextClassifier.infer, TextRecognizer.session): gert runs the models.
        self.ocr = RapidOCR.__new__(RapidOCR)
        for k in ("text_score", "min_height", "width_height_ratio", "max_side_len", "min_side_len"):
            setattr(self.ocr, k, g[k])
        self.det = TextDetector.__new__(TextDetector)
        self.det.limit_side_len, self.det.limit_type = d["limit_side_len"], d["limit_type"]
        self.det.mean, self.det.std = d["mean"], d["std"]
        self.det.postprocess_op = DBPostProcess(
            thresh=d["thresh"],
            box_thresh=d["box_thresh"],
            max_candidates=d["max_candidates"],
            unclip_ratio=d["unclip_ratio"],
            use_dilation=d["use_dilation"],
            score_mode=d["score_mode"],
        )
        self.cls = TextClassifier.__new__(TextClassifier)
        self.cls.cls_image_shape, self.cls.cls_batch_num = c["cls_image_shape"], c["cls_batch_num"]
        self.cls.cls_thresh, self.cls.postprocess_op = c["cls_thresh"], ClsPostProcess(c["label_list"])
        self.rec = TextRecognizer.__new__(TextRecognizer)
        self.rec.rec_batch_num, self.rec.rec_image_shape = r["rec_batch_num"], r["rec_img_shape"]
        self.rec.postprocess_op = CTCLabelDecode(character=_characters(model_path("rec")))


def _characters(rec_path: str) -> list:
    """The rec model's character list, from its ONNX metadata (what RapidOCR's OrtInferSession reads)."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(rec_path, load_external_data=False).metadata_props}
    return meta["character"].splitlines()


_STEPS: Steps | None = None


def steps() -> Steps:
    """The process's Steps, built on first use from RapidOCR's default config."""
    global _STEPS
    if _STEPS is None:
        from rapidocr_onnxruntime.main import DEFAULT_CFG_PATH
        from rapidocr_onnxruntime.utils import read_yaml

        _STEPS = Steps(read_yaml(str(DEFAULT_CFG_PATH)))
    return _STEPS


def check_image(image: np.ndarray, name: str = "image") -> np.ndarray:
    """A uint8 HWC image with 3 channels (BGR) and at least one pixel, else ValueError naming what is wrong."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape:
        raise ValueError(
            f"input '{name}': expected a uint8 image [H, W, 3] (BGR) with H, W >= 1, got "
            f"{image.dtype} {list(image.shape)}"
        )
    return image


def prepare(image: np.ndarray) -> tuple:
    """(x [1, 3, H', W'] float32, info float64 [8], the letterboxed image the crops are cut from)."""
    s = steps()
    image = check_image(image)
    raw_h, raw_w = image.shape[:2]
    img, ratio_h, ratio_w = s.ocr.preprocess(image)
    record = {"preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w}}
    img, record = s.ocr.maybe_add_letterbox(img, record)
    x = s.det.get_preprocess(max(img.shape[0], img.shape[1]))(img)
    if x is None:
        raise ValueError(f"input 'image': {raw_h}x{raw_w} resizes to an empty image for det")
    pad = record["padding_1"]
    info = np.array([raw_h, raw_w, ratio_h, ratio_w, pad["top"], pad["left"], img.shape[0], img.shape[1]], np.float64)
    return x, info, img


def det_boxes(pred: np.ndarray, info: np.ndarray) -> list:
    """Boxes in the letterboxed image's coordinates, sorted as RapidOCR sorts them (an empty list: no text)."""
    s = steps()
    shape = (int(info[6]), int(info[7]))
    boxes, _ = s.det.postprocess_op(pred, shape)
    boxes = s.det.filter_tag_det_res(boxes, shape)
    return s.ocr.sorted_boxes(boxes) if len(boxes) else []


def origin_boxes(boxes: list, info: np.ndarray) -> np.ndarray:
    """Boxes in the client's image coordinates: undo the letterbox, then the resize, clip to the image (what
    RapidOCR's _get_origin_points does with its op record)."""
    if not len(boxes):
        return np.zeros((0, 4, 2), np.float32)
    raw_h, raw_w, ratio_h, ratio_w, top, left = (float(v) for v in info[:6])
    out = np.array(boxes).astype(np.float32)
    out[:, :, 0] -= left
    out[:, :, 1] -= top
    out[:, :, 0] *= ratio_w
    out[:, :, 1] *= ratio_h
    out = np.where(out < 0, 0, out)
    out[..., 0] = np.where(out[..., 0] > raw_w, raw_w, out[..., 0])
    out[..., 1] = np.where(out[..., 1] > raw_h, raw_h, out[..., 1])
    return out


@step(inputs={"image": (np.uint8, [-1, -1, 3])}, outputs={"info": (np.float64, [len(INFO)])})
def det_pre(inputs: dict) -> dict:
    """Ensemble step before det: {"image"} -> {"x" [3, H', W'], "info"} (one row, the batch axis removed)."""
    x, info, _ = prepare(inputs["image"])
    return {"x": x[0], "info": info}


@step(outputs={"boxes": (np.float32, [-1, 4, 2])})
def det_post(inputs: dict) -> dict:
    """Ensemble step after det: {det's map [1, H', W'], "info"} -> {"boxes" [n, 4, 2]} (one row)."""
    pred = inputs[OUTPUTS["det"]][np.newaxis]
    return {"boxes": origin_boxes(det_boxes(pred, inputs["info"]), inputs["info"])}


@step(inputs={"crop": (np.uint8, [-1, -1, 3])})
def cls_pre(inputs: dict) -> dict:
    """A text-line crop (uint8 HWC BGR) -> cls's "x" [3, 48, 192] (TextClassifier.resize_norm_img)."""
    return {"x": steps().cls.resize_norm_img(check_image(inputs["crop"], "crop"))}


@step(outputs={"label": (np.int32, [1]), "score": (np.float32, [1])})
def cls_post(inputs: dict) -> dict:
    """cls's probabilities [2] -> "label" (0: upright, 1: turned 180 degrees) and its "score" (ClsPostProcess)."""
    c = steps().cls
    label, score = c.postprocess_op(inputs[OUTPUTS["cls"]][np.newaxis])[0]
    return {
        "label": np.array([c.postprocess_op.label_list.index(label)], np.int32),
        "score": np.array([score], np.float32),
    }


@dataclass
class OcrResult:
    """What RapidOCR()(image) returns, as arrays: boxes [n, 4, 2], texts, scores (n = 0: nothing found)."""

    boxes: np.ndarray
    texts: list
    scores: list


async def _batches(items: list, size: int, run: Callable[[list], Awaitable[list]]) -> list:
    """``run`` on consecutive chunks of ``items`` (all chunks in flight at once), results in order."""
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    return [r for part in await asyncio.gather(*(run(c) for c in chunks)) for r in part]


async def classify(crops: list, infer: Infer) -> list:
    """TextClassifier.__call__ with its batches sent through ``infer``: crops sorted by aspect ratio, cls_batch_num
    per batch, a crop read as '180' above cls_thresh rotated."""
    import cv2

    c = steps().cls
    order = list(np.argsort(np.array([im.shape[1] / float(im.shape[0]) for im in crops])))

    async def run(idx: list) -> list:
        batch = np.concatenate([c.resize_norm_img(crops[i])[np.newaxis] for i in idx]).astype(np.float32)
        return list(zip(idx, c.postprocess_op(await infer("cls", batch))))

    out = list(crops)
    for i, (label, score) in await _batches(order, c.cls_batch_num, run):
        if "180" in label and score > c.cls_thresh:
            out[i] = cv2.rotate(out[i], 1)
    return out


async def recognize(crops: list, infer: Infer) -> list:
    """TextRecognizer.__call__ with its batches sent through ``infer``: (text, score) per crop."""
    r = steps().rec
    order = list(np.argsort(np.array([im.shape[1] / float(im.shape[0]) for im in crops])))
    _, img_h, img_w = r.rec_image_shape[:3]

    async def run(idx: list) -> list:
        ratios = [crops[i].shape[1] * 1.0 / crops[i].shape[0] for i in idx]
        top = max([img_w / img_h] + ratios)
        batch = np.concatenate([r.resize_norm_img(crops[i], top)[np.newaxis] for i in idx]).astype(np.float32)
        texts = r.postprocess_op(await infer("rec", batch), False, wh_ratio_list=ratios, max_wh_ratio=top)
        return list(zip(idx, texts))

    res = [("", 0.0)] * len(crops)
    for i, one in await _batches(order, r.rec_batch_num, run):
        res[i] = one
    return res


async def ocr(image: np.ndarray, infer: Infer) -> OcrResult:
    """RapidOCR()(image) (det, cls and rec on) with the three models run by ``infer``."""
    return await ocr_prepared(prepare(image), infer)


async def ocr_prepared(prepared: tuple, infer: Infer) -> OcrResult:
    """``ocr`` from what ``prepare`` made (so that a caller may prepare several images before any det call)."""
    s = steps()
    x, info, img = prepared
    boxes = det_boxes(await infer("det", x), info)
    if not len(boxes):
        return OcrResult(np.zeros((0, 4, 2), np.float32), [], [])
    crops = s.ocr.get_crop_img_list(img, boxes)
    texts = await recognize(await classify(crops, infer), infer)
    keep = [i for i, (_, score) in enumerate(texts) if float(score) >= s.ocr.text_score]
    found = origin_boxes(boxes, info)
    return OcrResult(found[keep].reshape(-1, 4, 2), [texts[i][0] for i in keep], [float(texts[i][1]) for i in keep])


def gert_infer(models: dict) -> Infer:
    """``infer`` over in-process gert models {"det": gert.Model, ...}."""

    async def infer(name: str, x: np.ndarray) -> np.ndarray:
        return (await models[name].run_async({"x": x}))[OUTPUTS[name]]

    return infer


def rapidocr_result(result) -> OcrResult:
    """RapidOCR's (list of [box, text, score] or None, elapsed) as an OcrResult."""
    found = result[0] or []
    return OcrResult(
        np.array([f[0] for f in found], np.float32).reshape(-1, 4, 2),
        [f[1] for f in found],
        [float(f[2]) for f in found],
    )


# ---- serving the PP-OCR models from the installed wheel (examples/ensemble_repository/{det,cls,rec}) ----------------
def link_model(model_dir: str, name: str, version: str = "1") -> str:
    """Point MODEL_DIR/VERSION/model.onnx at the PP-OCR model ``name`` of the installed wheel (a symlink, made or
    corrected atomically), so that the repository holds no copy of it: gert_triton reads a default model.onnx that
    is a symlink to anywhere, as Triton's own backends read theirs."""
    target = model_path(name)
    link = os.path.join(model_dir, version, "model.onnx")
    if os.path.islink(link) and os.readlink(link) == target:
        return link
    tmp = f"{link}.{os.getpid()}.tmp"
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return link


def gert_model(name: str) -> type:
    """A gert_triton model class serving the wheel's PP-OCR model ``name`` (linked at auto-complete and load)."""
    from gert_triton import TritonPythonModel as Base

    class PPOCRModel(Base):
        @staticmethod
        def auto_complete_config(auto_complete_model_config):
            import triton_python_backend_utils as pb_utils

            from gert_triton.config import served_version

            model_dir, version = served_version(
                pb_utils.get_model_dir(), auto_complete_model_config.as_dict().get("version_policy")
            )
            link_model(model_dir, name, version)
            return Base.auto_complete_config(auto_complete_model_config)

        def initialize(self, args: dict) -> None:
            link_model(args["model_repository"], name, args.get("model_version", "1") or "1")
            super().initialize(args)

    PPOCRModel.__name__ = PPOCRModel.__qualname__ = f"PPOCR_{name}"
    return PPOCRModel


if __name__ == "__main__":  # python examples/ocr_pipeline.py [REPO]: make the links ahead of a read-only deployment
    import sys

    repo = (
        sys.argv[1]
        if len(sys.argv) > 1
        else os.path.join(os.path.dirname(os.path.abspath(__file__)), "ensemble_repository")
    )
    for model in ("det", "cls", "rec"):
        print(link_model(os.path.join(repo, model), model), "->", model_path(model))
