"""gert_triton's finalize (issue 43 item 3): bounded and complete whatever fails on the way, and timed in Triton's log,
because Triton gives every model's unload one exit timeout and a stop that overruns it exits 1. Triton's pb_utils
is the fake in fake_pb_utils.py; the model runs on gert (host NPU) in this process."""

from __future__ import annotations

import threading

import pytest

import fake_pb_utils
import gert
from _helpers import RUNTIME
from gert_triton import TritonPythonModel
from test_triton_unit import autocomplete, init_args, model_dir
from triton_models import seq_inputs, seq_model

pytestmark = RUNTIME


@pytest.fixture
def pb(monkeypatch):
    return fake_pb_utils.install(monkeypatch)


def loaded(pb, tmp_path) -> TritonPythonModel:
    mdir = model_dir(tmp_path, seq_model())
    m = TritonPythonModel()
    m.initialize(init_args(mdir, autocomplete(pb, mdir)))
    return m


def test_finalize_closes_the_model_even_when_an_earlier_step_fails_and_says_how_long_it_took(pb, tmp_path):
    m = loaded(pb, tmp_path)
    inner = m.model

    class Broken:
        def close(self, timeout=None):
            raise RuntimeError("metrics publisher broke")

    m.metrics = Broken()
    pb.Logger.messages.clear()
    with pytest.raises(RuntimeError, match="publisher broke"):
        m.finalize()
    with pytest.raises(gert.GertError, match="closed"):
        inner.run(seq_inputs(1, 2, 1))
    assert any("finalized in" in msg for _, msg in pb.Logger.messages), pb.Logger.messages
    assert not [t.name for t in threading.enumerate() if t.name == "gert-triton-metrics" and t.is_alive()]


def test_finalize_leaves_no_thread_of_the_model_behind(pb, tmp_path):
    before = {t.ident for t in threading.enumerate()}
    m = loaded(pb, tmp_path)
    m.execute([pb.InferenceRequest([pb.Tensor(k, v) for k, v in seq_inputs(1, 2, 1).items()], ["y"])])
    m.finalize()
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert not left, f"threads alive after finalize (the stub's interpreter would wait for or race them): {left}"
