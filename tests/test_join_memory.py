"""Joining the outputs of a batch's parts (issue 41, serving memory): gert.core.batching.join writes the joined
array part by part and drops each part once copied, so a request split over two streams holds its output about
1.5 times at the join, not twice (np.concatenate: the parts and the whole joined array at once).

The peaks are the resident memory (VmHWM, reset through /proc/self/clear_refs) of a fresh process with a gert_triton
stub's mmap threshold (gert_triton/stub_malloc.py): arrays of a MB and more are mapped of their own, their pages
resident once written and returned when freed."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from _helpers import RUNTIME
from gert.core.batching import join

pytestmark = [*RUNTIME, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH, REPEAT = 256, 2048  # each row: 256 floats in, 256 * 2048 floats (2 MB) out

MEASURE = """
import sys
import numpy as np

def status(key):
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith(key + ":"))

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    return status("VmRSS")
"""


def _peak_mb(body: str) -> float:
    """Run ``body`` (MEASURE's helpers in scope) in a fresh interpreter with the stub's mmap threshold; its last line
    printed is a float."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    out = subprocess.run(
        [sys.executable, "-c", MEASURE + body], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return float(out.stdout.split()[-1])


def _tile_model() -> bytes:
    """y = Tile(x, [1, REPEAT]): a small input, an output REPEAT times larger, rows independent (batch dim N)."""
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "r"], ["y"])],
        "tile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", WIDTH * REPEAT])],
        [helper.make_tensor("r", TensorProto.INT64, [2], [1, REPEAT])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_join_equals_concatenate_and_releases_the_parts():
    rng = np.random.default_rng(0)
    parts = [
        {"y": rng.random((n, 3, 5), dtype=np.float32), "z": rng.random((2, n), dtype=np.float32), "c": np.ones(2)}
        for n in (1, 4, 2)
    ]
    want_y = np.concatenate([p["y"] for p in parts], axis=0)
    want_z = np.concatenate([p["z"] for p in parts], axis=1)
    last_c = parts[-1]["c"]
    out = join(parts, {"y": 0, "z": 1, "c": None})
    np.testing.assert_array_equal(out["y"], want_y)
    np.testing.assert_array_equal(out["z"], want_z)
    assert out["c"] is last_c  # an output without the batch axis: the last part's, as it is
    assert out["y"].flags.c_contiguous and out["z"].flags.c_contiguous
    assert all(set(p) == {"c"} for p in parts)  # the joined outputs' parts were dropped


def test_join_of_parts_that_do_not_agree_is_numpys():
    """Other dtypes or other sizes off the batch axis: np.concatenate's promotion and its error, as before."""
    out = join([{"y": np.zeros((1, 2), np.float32)}, {"y": np.ones((2, 2), np.float64)}], {"y": 0})
    assert out["y"].dtype == np.float64 and out["y"].shape == (3, 2)
    with pytest.raises(ValueError):
        join([{"y": np.zeros((1, 2))}, {"y": np.zeros((1, 3))}], {"y": 0})


def test_join_peak_is_the_output_plus_one_part():
    """Two parts of 16 MB: the join adds at most one part's worth to what the parts hold (np.concatenate: 32 MB)."""
    peak = _peak_mb(
        """
from gert.core.batching import join
half = 16 << 20
parts = [{"y": np.full((half // 4,), float(k), np.float32)} for k in range(2)]
base = reset_peak()
out = join(parts, {"y": 0})
assert out["y"][0] == 0 and out["y"][-1] == 1 and out["y"].size == half // 2
print((status("VmHWM") - base) / 2**20)
"""
    )
    assert peak < 20, f"the join of two 16 MB parts held {peak:.1f} MB more at once (np.concatenate: 32)"


def test_request_split_over_two_streams_holds_its_output_less_than_twice(tmp_path):
    """Model.run of one request of 8 rows with split_batch over two idle streams: two parts of 4 rows (8 MB of
    output each) run and are joined. The run adds at most the output and one part (24 MB) to what the process held
    before it (np.concatenate's join: 32 MB)."""
    path = tmp_path / "tile.onnx"
    path.write_bytes(_tile_model())
    peak = _peak_mb(
        f"""
import gert
x = np.random.default_rng(1).random((8, {WIDTH}), dtype=np.float32)
want = np.tile(x, (1, {REPEAT}))
with gert.load({str(path)!r}, streams=2, split_batch=True, gears={{"N": [1, 2, 4, 8]}}) as model:
    for _ in range(2):  # compiled, buffers pooled, before the measured run
        np.testing.assert_array_equal(model.run({{"x": x}})["y"], want)
    assert model.engine._idle_parts({{"batch": 8}}) == 2, "the request must be split over the two streams"
    base = reset_peak()
    y = model.run({{"x": x}})["y"]
    peak = status("VmHWM") - base
np.testing.assert_array_equal(y, want)
print(peak / 2**20)
"""
    )
    assert peak < 28, f"a run with a 16 MB output held {peak:.1f} MB more at once (np.concatenate's join: ~32)"
