"""The host NPU's compute provider: ONNX Runtime sessions shared per GE Session, and fused requests that run inline
on the waiting thread while other threads queue work on the same stream."""
import threading

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import gert
from _helpers import RUNTIME

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]  # inspects the host NPU's compute provider


def _double(batch_dim):
    """y = 2x, x: [batch_dim, 4] float32 (batch_dim None: an unnamed dynamic dim, as PP-OCR cls has)."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch_dim, 4])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch_dim, 4])
    two = onnx.numpy_helper.from_array(np.array(2, np.float32), "two")
    m = oh.make_model(oh.make_graph([oh.make_node("Mul", ["x", "two"], ["y"])], "double", [x], [y], [two]),
                      opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _sessions_of(group, threads):
    """The ONNX Runtime sessions the provider keeps for one GE Session at one thread count (compiling also makes a
    1-thread session per model and overrides, to validate the model and find static output shapes)."""
    provider = gert.hostnpu.host_provider()
    return {id(s) for k, s in list(provider._shared.items()) if k[0] == group and k[2] == threads}


def test_gears_of_one_stream_share_one_onnxruntime_session():
    with gert.load(_double(None), streams=2, gears={"batch": [1, 2, 4, 8]}) as model:
        assert model.warmup() == 8  # 4 gears x 2 streams
        groups = [w.session.session_id for w in model._workers]
        threads = model._workers[0].stream.cube_cores
        per_stream = [_sessions_of(g, threads) for g in groups]
        # one thread count (the device's cube cores) and no named dims to override: one session per stream
        assert [len(s) for s in per_stream] == [1, 1]
        assert per_stream[0].isdisjoint(per_stream[1]), "streams must not share a session (or its thread pool)"
        x = np.arange(20, dtype=np.float32).reshape(5, 4)
        np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)


def test_named_batch_dims_keep_a_session_per_override():
    """A named batch dim gets free-dimension overrides per gear (static graphs), so those sessions differ."""
    with gert.load(_double("N"), streams=1, gears={"batch": [1, 2]}) as model:
        model.warmup()
        w = model._workers[0]
        assert len(_sessions_of(w.session.session_id, w.stream.cube_cores)) == 2


def test_fused_runs_inline_while_other_threads_queue_on_the_same_stream():
    """A fused request runs on the waiting thread once the stream is idle; host functions that another thread
    queues meanwhile run after it, in order, and nothing is lost or run twice."""
    with gert.load(_double(None), streams=1, gears={"batch": [4]}) as model:
        model.warmup()
        stream = model._workers[0].stream
        log = []
        stop = threading.Event()

        def flood():
            i = 0
            while not stop.is_set() and i < 400:
                stream.launch_host_func(lambda i=i: log.append(i))
                i += 1
            return i

        sent = []
        t = threading.Thread(target=lambda: sent.append(flood()))
        t.start()
        rng = np.random.default_rng(0)
        for _ in range(200):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            np.testing.assert_array_equal(model.run({"x": x})["y"], 2 * x)
        stop.set()
        t.join(30)
        stream.synchronize(timeout=30)
        assert log == list(range(sent[0])), "host functions ran out of order, twice, or not at all"
