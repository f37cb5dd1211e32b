"""The README's example scripts run and say what they check (the served example and examples/client.py are in
test_triton_e2e.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _helpers import RUNTIME

pytestmark = RUNTIME
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize(
    "script, says",
    [
        ("quickstart.py", ["futures agree: True", "batch of 20 (split over the 8 gear): (20, 4)"]),
        ("runtime_quickstart.py", ["host function: copies done", "round trip of 262144 bytes"]),
    ],
)
def test_example_script(script, says):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    for line in says:
        assert line in r.stdout, r.stdout


def _outputs(cell) -> tuple:
    """(stdout+stderr text, {mime type: data} of the displayed results) of one executed notebook cell."""
    text, data = "", {}
    for o in cell.outputs:
        if o.output_type == "stream":
            text += o.text
        elif o.output_type in ("execute_result", "display_data"):
            data.update(o.data)
        elif o.output_type == "error":
            raise AssertionError(f"{o.ename}: {o.evalue}")
    return text, data


def test_quickstart_notebook_runs_and_shows_what_it_says():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(os.path.join(EXAMPLES, "quickstart.ipynb"), as_version=4)
    for cell in nb.cells:  # the stored outputs must not be what is checked
        if cell.cell_type == "code":
            cell.outputs = []
    nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": EXAMPLES}}
    ).execute()
    cells = {c.source.splitlines()[0]: _outputs(c) for c in nb.cells if c.cell_type == "code"}

    def cell(first_line: str) -> tuple:
        return next(v for k, v in cells.items() if k.startswith(first_line))

    _, shown = cell("model = gert.load(")
    html = shown["text/html"]
    for needle in ["features", "[batch, 16]", "[batch, 4]", "1,2,4,8", "cube cores", "2 stream(s)"]:
        assert needle in html, needle
    text, _ = cell("compiled = model.warmup(progress=True)")
    assert "gert warmup" in text and "8/8" in text and "graphs compiled: 8" in text
    text, _ = cell("x = np.random")
    assert "shape: (5, 4)" in text and float(text.rsplit(":", 1)[1]) < 1e-5
    text, _ = cell("requests = [")
    assert "list of 5 requests agrees: True" in text and "(20, 4)" in text and "futures agree: True" in text
    text, shown = cell("stats = model.stats()")
    # the batch-8 runs are the notebook's own batches; its 5 concurrent submits may be merged by the in-process
    # batcher (gert.load's dynamic_batching) in any grouping the scheduler makes: 1 + 4 (batch=4, padded) + ... ,
    # so only their gears are checked, and that the rows they carried add up to the 5 requests
    import ast

    hits = ast.literal_eval(text.split("gears hit: ", 1)[1].splitlines()[0])
    assert hits.pop("batch=8") == 4, text
    assert set(hits) <= {"batch=1", "batch=2", "batch=4"} and sum(hits.values()) >= 2, text
    # 5 + 5 + 8 + 8 real rows in four runs of the 8 gear: 18.75% padding
    assert "<td>batch=8</td><td>4</td><td>18.8%</td>" in shown["text/html"]
    text, shown = cell("%matplotlib inline")
    table = [ln.split() for ln in text.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert sorted((r[0], r[1], r[3]) for r in table) == [
        ("1", "1", "8"),
        ("1", "2", "8"),
        ("2", "1", "8"),
        ("2", "2", "8"),
    ]
    assert "gert bench" in text and "4/4" in text
    assert shown["image/png"], "the sweep's plot is shown inline"
    _, shown = cell("from gert.tools import timeline")
    assert shown["image/png"], "the streams' timeline is shown inline"
    with open(os.path.join(EXAMPLES, "sweep-trace.json")) as f:
        assert '"displayTimeUnit": "ms"' in f.read()
    os.remove(os.path.join(EXAMPLES, "sweep-trace.json"))
