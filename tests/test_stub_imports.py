"""What a Triton stub imports with gert_triton (issue 41 item 6, serving memory): no module it never uses.
asyncio (3-4 MB resident) is imported by Model.run_async when awaited, onnx.reference (12 MB) only for a fold of
an operator gert/core/folds.py does not compute itself."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_adapter_and_the_runtime_leaves_out_asyncio_and_onnx_reference():
    code = (
        "import json, sys; import gert, gert_triton.model; "
        "print(json.dumps([m for m in ('asyncio', 'onnx.reference') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_importing_the_adapter_and_the_runtime_leaves_out_onnx():
    """`import gert` imports no onnx (~9 MB resident): the ONNX reader, the skeleton and shape inference come with
    the first load or compile, not with the import (a process that imports gert and loads nothing, or, once the load
    needs no onnx, a stub)."""
    code = (
        "import json, sys; import gert, gert_triton.model; "
        "print(json.dumps(sorted(m for m in sys.modules if m == 'onnx' or m.startswith('onnx.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
