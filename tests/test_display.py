"""How a Model and its stats() show (gert.display), and progress output (gert.progress): off unless asked, tqdm
when it is installed, plain lines otherwise."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from IPython.lib.pretty import pretty

import gert
from _helpers import REPO, RUNTIME
from gert import bench
from gert.display import Stats

pytestmark = RUNTIME
MODEL = os.path.join(REPO, "examples", "model_repository", "tiny_classifier", "1", "model.onnx")


@pytest.fixture
def model():
    with gert.load(MODEL, streams=2, cube_cores=1, gears={"batch": [1, 4, 8]}) as m:
        yield m


def _run_five_rows(m):
    m.run({"features": np.zeros((5, 16), np.float32)})  # padded to the 8 gear: 3 of 8 rows are padding


def test_model_repr_html_shows_io_dims_streams_cores_and_gears(model):
    _run_five_rows(model)
    h = model._repr_html_()
    for needle in [
        "<table>",
        "features",
        "probs",
        "float32",
        "[batch, 16]",
        "[batch, 4]",
        "1,4,8",
        "pad",
        "cube cores",
        "batch=8",
        "37.5%",
        "2 stream(s)",
    ]:
        assert needle in h, needle
    # each stream is a row with its device and core limits (1 cube core each)
    streams = h.split("<i>streams</i>")[1].split("</table>")[0]
    assert streams.count("<tr><td>") == 2
    assert "<tr><td>0</td><td>0</td><td>1</td>" in streams and "<tr><td>1</td><td>0</td><td>1</td>" in streams


def test_model_pretty_and_repr(model):
    _run_five_rows(model)
    text = pretty(model)  # what IPython prints
    lines = text.splitlines()
    assert lines[0] == f"gert.Model on {gert.backend()}: 2 stream(s)"
    assert any(ln.split()[:4] == ["input", "features", "float32", "[batch,"] for ln in lines), text
    assert any(ln.split()[:4] == ["batch", "features:0", "pad", "1,4,8"] for ln in lines), text
    gear = next(ln for ln in lines if ln.strip().startswith("batch=8"))
    cost = model.stats()["gears"]["batch=8"]["padding_seconds"]  # 3 of 8 rows: 37.5% of the run's seconds
    assert cost > 0 and gear.split() == ["batch=8", "1", "37.5%", f"{1000 * cost:.1f}", "ms"]
    assert repr(model) == "<gert.Model (features[batch, 16]) on 2 stream(s)>"


def test_closed_model_still_displays(model):
    model.close()
    assert "closed" in repr(model) and "the model is closed" in pretty(model)
    assert "features" in model._repr_html_()


def test_stats_is_still_a_plain_dict_and_renders(model):
    _run_five_rows(model)
    st = model.stats()
    assert isinstance(st, dict) and isinstance(st, Stats)
    assert st["gears"]["batch=8"]["hits"] == 1 and st["compiles"] >= 1
    json.dumps(st)  # serializes like the dict it is
    assert dict(st) == st and repr(st) == repr(dict(st))
    text = pretty(st)
    assert text.startswith("gert.Model stats") and "37.5%" in text and "cube cores" in text
    assert str(st) == text
    assert "<td>batch=8</td><td>1</td><td>37.5%</td>" in st._repr_html_()


def test_stats_without_requests_says_so(model):
    assert "no requests yet" in pretty(model.stats())


def test_warmup_prints_nothing_unless_asked(model, capfd):
    assert model.warmup() == 6
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_warmup_progress_with_tqdm(model, capsys):
    pytest.importorskip("tqdm")
    assert model.warmup(progress=True) == 6
    out, err = capsys.readouterr()
    assert out == ""
    assert "gert warmup" in err and "6/6" in err and "100%" in err


def test_warmup_progress_without_tqdm(model, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` raises ImportError
    assert model.warmup(progress=True) == 6
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 6
    assert lines[0] == "gert warmup: [1/6] stream 0: batch=1"
    assert lines[-1] == "gert warmup: [6/6] stream 1: batch=8"


SWEEP = dict(streams=[1, 2], batch=[4], concurrency=2, iterations=20, warmup=1)


def test_bench_sweep_is_quiet_by_default(capfd):
    results = bench.sweep(MODEL, **SWEEP)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert [(r.streams, r.batch, r.requests) for r in results] == [(1, 4, 20), (2, 4, 20)]


def test_bench_sweep_progress_with_and_without_tqdm(capsys, monkeypatch):
    pytest.importorskip("tqdm")
    bench.sweep(MODEL, **SWEEP, progress=True)
    err = capsys.readouterr().err
    assert "gert bench" in err and "2/2" in err and "samples/s" in err
    monkeypatch.setitem(sys.modules, "tqdm", None)
    bench.sweep(MODEL, **SWEEP, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" streams=")[0] for ln in lines] == ["gert bench: [1/2]", "gert bench: [2/2]"]
    assert "streams=2 cube=- vector=- batch=4" in lines[1]


def test_bench_figure_without_pyplot(tmp_path):
    pytest.importorskip("matplotlib")
    results = bench.sweep(MODEL, **SWEEP)
    fig = bench.figure(results)
    assert len(fig.axes[0].collections) == 2  # one point per configuration
    bench.plot(str(tmp_path / "s.png"), results)
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stats_tables_show_graph_kinds_cache_and_faults(model):
    """The counters issues 12, 13 and 16 added show in the tables too, not only in the dict."""
    _run_five_rows(model)
    st = model.stats()
    h = st._repr_html_()
    for needle in ["static / dynamic", "cache hit / miss", "<i>faults and recovery</i>", "recoveries"]:
        assert needle in h, needle
    s0 = st["streams"][0]
    row = (
        f"<td>{s0['static_hits']} / {s0['dynamic_hits']}</td><td>{s0.get('cache_hits', 0)} / "
        f"{s0.get('cache_misses', 0)}</td>"
    )
    assert row in h, h
    faults = h.split("<i>faults and recovery</i>")[1].split("</table>")[0]
    assert f"<tr><td>{st['failed_tasks']}</td><td>{st['timeouts']}</td>" in faults, faults
