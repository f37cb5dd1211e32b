"""`gert.cann_check`: the CANN key check of a model, and with ``fix=`` its conversion down to an opset CANN maps.

Kept above both steps it joins (gert/preview/cann_ops.py checks, gert/preview/fix.py converts and compares), so
neither imports the other's caller.
"""

from __future__ import annotations

import os

from gert.errors import GertError
from gert.preview import fix as fixer
from gert.preview.cann_ops import DEFAULT_DOMAIN, CannReport, ModelLike, check_proto, load_proto


def cann_check(
    model: ModelLike, fix: str | os.PathLike | None = None, inputs: dict | None = None, shapes: dict | None = None
) -> CannReport:
    """Check a model (path, bytes or ModelProto) against CANN 8.x's registered ONNX keys; see CannReport.

    ``fix``: a path to write the model converted down to the highest opset where its ops map (as ``gert check
    --fix``), once ONNX Runtime found it computes what the original does on ``inputs`` (name -> array) and
    ``shapes`` (name -> dims, random values); other inputs are invented from the model (its metadata's
    ``gert.example_shapes``, its declared dims). The report (of the model given) then has ``fix``: a FixResult
    (``written``, ``path``, ``report`` of the written model, ``max_abs_diff``; or ``error`` and ``needs``, the
    invented inputs the model refused) and a note saying the same. Inputs that do not fit the model raise
    gert.preview.inputs.FeedError naming the input."""
    proto = load_proto(model)
    report = check_proto(proto)
    if fix is None:
        if inputs or shapes:
            raise GertError("cann_check: inputs= and shapes= feed the comparison of fix=OUT.onnx; pass fix=")
        return report
    result = fixer.fix(proto, inputs=inputs, shapes=shapes)
    report.fix = result
    if result.written:
        fixer.write(result, fix)
        diffs = ", ".join(f"{k} {v:.3g}" for k, v in result.max_abs_diff.items())
        report.notes.append(
            f"fix: converted opset {report.opsets.get(DEFAULT_DOMAIN)} -> {result.target} (max |d| "
            f"per output: {diffs}), wrote {result.path}: {result.report.summary()}"
        )
    else:
        report.notes.append(f"fix: nothing written: {result.error}")
    return report
