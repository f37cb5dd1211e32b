"""`gert check --fix`: convert a model above CANN's highest opset down to the highest opset where its ops map.

ONNX's version_converter does the conversion; the converted model is checked against the original on ONNX Runtime
(max |d| per output) before it is written, then checked against the CANN table again. What no opset can fix (an op
CANN never maps) stays flagged. The comparison runs on the inputs the user gives (arrays, or shapes filled with
random values), else on inputs gert invents from the model (its example shapes, its declared dims); when the
original model refuses an invented input, the result names that input and how to give it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from gert.preview import cann_ops
from gert.preview.inputs import Feeds, Invented, make_feeds, ort_session, run_session, upstream_inputs

Hint = Callable[[Invented], str]  # how a front door tells the user to give an input


@dataclass
class FixResult:
    """What --fix did: the target opset (None: nothing to convert to), the converted model's report and the largest
    |difference| of its outputs against the original's, or why it could not (``error``; ``needs``: the invented
    inputs the original model refused). ``path``: where the model was written (gert.cann_check)."""

    target: int | None
    report: cann_ops.CannReport | None = None
    max_abs_diff: dict = field(default_factory=dict)
    model: bytes | None = None
    error: str = ""
    needs: list = field(default_factory=list)
    inputs: list = field(default_factory=list)  # the names of the inputs the comparison ran on
    invented: list = field(default_factory=list)  # those gert made up (Invented)
    path: str | None = None

    @property
    def written(self) -> bool:
        return self.model is not None

    def to_dict(self) -> dict:
        return {
            "target_opset": self.target,
            "written": self.path,
            "max_abs_diff": self.max_abs_diff,
            "error": self.error,
            "needs": [i.name for i in self.needs],
            "inputs": list(self.inputs),
            "invented": [i.name for i in self.invented],
            "report": self.report.to_dict() if self.written and self.report is not None else None,
        }


def python_hint(i: Invented) -> str:
    return i.python_hint()


def fix(
    proto,
    tolerance: float = 1e-4,
    inputs: Mapping[str, np.ndarray] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    hint: Hint = python_hint,
) -> FixResult:
    """Convert ``proto`` (a ModelProto) down to the highest opset <= 18 where every op CANN maps at all maps, and
    compare it with the original on ``inputs`` / ``shapes`` (see gert.preview.inputs.make_feeds; a FeedError when
    they do not fit the model). ``hint`` words how to give an input the original refused when invented."""
    import onnx
    from onnx import version_converter

    feeds = make_feeds(proto, inputs, shapes)  # bad inputs are refused before anything else
    before = cann_ops.check_proto(proto)
    version = before.opsets.get(cann_ops.DEFAULT_DOMAIN)
    t = cann_ops.table()
    ops = [(n.domain or cann_ops.DEFAULT_DOMAIN, n.op_type) for n, _ in cann_ops.walk_nodes(proto.graph, "main")]
    target = cann_ops.best_opset(
        [o for o in ops if t.opsets(*o) or o[1] == "Constant"], t, min(version or 0, cann_ops.MAX_STANDARD_OPSET)
    )
    if version is None or target is None:
        return FixResult(None, before, error="no ai.onnx opset at which the model's mapped ops all map")
    if target == version:
        return FixResult(
            target,
            before,
            error=f"the model is at opset {version} already, where every op CANN maps "
            "at all maps: no conversion can help the ops left",
        )
    try:
        converted = version_converter.convert_version(proto, target)
        onnx.checker.check_model(converted)
    except Exception as e:  # noqa: BLE001 - version_converter raises plain RuntimeErrors
        return FixResult(
            target,
            before,
            error=f"ONNX's version_converter could not convert opset {version} -> {target}: {_first_line(e)}",
        )
    data = converted.SerializeToString()
    a = _run_original(proto, feeds, target, before, hint)
    if isinstance(a, FixResult):
        return a
    try:
        b = run_session(ort_session(data), feeds.arrays)
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's exceptions
        return FixResult(
            target,
            before,
            error=f"ONNX Runtime could not run the converted model (opset {target}) on "
            f"inputs the original runs: {_first_line(e)}",
            invented=feeds.invented,
        )
    diffs = {}
    for name, x in a.items():
        y = b.get(name)
        if y is None or np.shape(x) != np.shape(y):
            return FixResult(
                target, before, error=f"output '{name}' differs in shape after conversion", invented=feeds.invented
            )
        diffs[name] = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if np.size(x) else 0.0
    worst = max(diffs.values(), default=0.0)
    scale = max((float(np.max(np.abs(x))) for x in a.values() if np.size(x) and x.dtype.kind in "fiu"), default=1.0)
    if not worst <= tolerance * max(1.0, scale):
        return FixResult(
            target,
            before,
            diffs,
            error=f"the converted model's outputs differ by up to {worst:g}",
            invented=feeds.invented,
        )
    return FixResult(
        target, cann_ops.check_proto(converted), diffs, data, inputs=list(feeds.arrays), invented=feeds.invented
    )


def _run_original(proto, feeds: Feeds, target: int, before, hint: Hint):
    """The original model's outputs on ``feeds``, or the FixResult saying why it would not run: which input it
    refused, when gert invented it, and how to give it."""
    try:
        sess = ort_session(proto.SerializeToString())
    except Exception as e:  # noqa: BLE001
        return FixResult(target, before, error=f"ONNX Runtime could not load the original model: {_first_line(e)}")
    try:
        return run_session(sess, feeds.arrays)
    except Exception as e:  # noqa: BLE001 - the run refused its inputs (or failed for another reason)
        node, reason = _failure(_first_line(e, limit=None))
        upstream = upstream_inputs(proto, node[0]) if node else None
        reached = feeds.invented if upstream is None else feeds.invented_named(upstream)
        suspects = sorted((i for i in reached if i.origin != "shape"), key=lambda i: not i.guessed_dims)
        at = f"at node '{node[0]}' ({node[1]}): " if node else ""
        if not suspects:  # only what the user gave (arrays, shapes) reaches the failing node
            made = {i.name: i for i in feeds.invented}
            given = [
                n if n not in made else f"{n} random {made[n].shape}"
                for n in feeds.arrays
                if (upstream is None or n in upstream) and (n not in made or made[n].origin == "shape")
            ]
            return FixResult(
                target,
                before,
                error=f"ONNX Runtime could not run the original model on the input(s) "
                f"given ({', '.join(given)}): {at}{reason}",
            )
        what = "; ".join(i.describe() for i in suspects)
        how = "; ".join(hint(i) for i in suspects)
        return FixResult(
            target,
            before,
            needs=suspects,
            invented=feeds.invented,
            error=f"ONNX Runtime could not run the original model on the inputs gert invented: {at}"
            f"{reason}. gert could not invent a valid {what}; give it: {how}",
        )


_NODE = re.compile(r"running (\S+) node\. Name:'([^']*)'")


def _failure(message: str) -> tuple:
    """((node name, op type) or None, the reason) from ONNX Runtime's failure of a run ("[ONNXRuntimeError] : 2 :
    INVALID_ARGUMENT : Non-zero status code returned while running Pad node. Name:'pad' Status Message: ...")."""
    m = _NODE.search(message)
    reason = message.rsplit("Status Message: ", 1)[1] if "Status Message: " in message else message  # innermost
    return ((m.group(2), m.group(1)) if m and m.group(2) else None), reason.strip()[:400]


def _first_line(e: BaseException, limit: int | None = 400) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:limit]


def write(result: FixResult, path) -> None:
    """Write the converted model of ``result`` to ``path`` (a file of its own, replaced whole)."""
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(result.model)
    os.replace(tmp, path)
    result.path = path
