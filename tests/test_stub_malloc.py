"""A gert_triton stub's threads share glibc's malloc arenas (issue 41, serving memory): memory one arena frees is not
reused by another, so the memory a model's load freed stayed in the main thread's arena while the workers grew
their own."""

import sys

import pytest

from _helpers import RUNTIME, run_python_result

pytestmark = RUNTIME + [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")]

_CHILD = """
    import ctypes, json, os, sys, tempfile, threading
    sys.path.insert(0, "tests")
    import fake_pb_utils
    sys.modules["triton_python_backend_utils"] = fake_pb_utils
    import onnx, onnx.helper as oh
    from gert_triton import TritonPythonModel

    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])
    m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                      opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    mdir = os.path.join(tempfile.mkdtemp(), "m")
    os.makedirs(os.path.join(mdir, "1"))
    with open(os.path.join(mdir, "1", "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    fake_pb_utils.set_model_dir(mdir)
    cfg = fake_pb_utils.ModelConfig(fake_pb_utils.default_config("m", max_batch_size=4))
    cfg = TritonPythonModel.auto_complete_config(cfg).as_dict()
    model = TritonPythonModel()
    model.initialize({"model_config": json.dumps(cfg), "model_instance_kind": "CPU", "model_instance_name": "m_0_0",
                      "model_instance_device_id": "0", "model_repository": mdir, "model_version": "1",
                      "model_name": "m"})
    req = fake_pb_utils.InferenceRequest([fake_pb_utils.Tensor("x", np.ones((2, 4), np.float32))], ["y"])
    out = model.execute([req])[0].output_tensors()[0].as_numpy()
    assert (out == 1).all(), out

    start = threading.Barrier(6)
    done = threading.Barrier(6)

    def allocate():  # every thread allocates while all six are alive: glibc gives each an arena, up to its limit
        start.wait()
        keep = [bytearray(4000) for _ in range(100)]
        done.wait()
        del keep

    threads = [threading.Thread(target=allocate) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
    fp = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    with open(path) as f:
        emit({"arenas": f.read().count("<heap nr=")})
    model.finalize()
"""


def test_the_stub_threads_share_one_malloc_arena():
    """After initialize, threads that allocate at once share the main arena (GERT_TRITON_MALLOC_ARENAS default 1);
    GERT_TRITON_MALLOC_ARENAS=0 leaves glibc's default, an arena per thread."""
    probe = run_python_result("import ctypes; ctypes.CDLL(None).malloc_info; emit({'glibc': True})")
    assert probe == {"glibc": True}
    assert run_python_result(_CHILD)["arenas"] == 1
    assert run_python_result(_CHILD, env={"GERT_TRITON_MALLOC_ARENAS": "0"})["arenas"] > 1


def test_a_bad_arena_count_is_refused_naming_the_variable(monkeypatch):
    """A value that is not a whole number fails the load, naming the variable, the expected and the actual value."""
    from gert_triton.config import ConfigError
    from gert_triton.stub_malloc import limit_arenas

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setenv("GERT_TRITON_MALLOC_ARENAS", "two")
    with pytest.raises(ConfigError, match=r"GERT_TRITON_MALLOC_ARENAS: expected a whole number .* got 'two'"):
        limit_arenas()


_MMAP_PROBE = (
    _CHILD.split("    start = threading.Barrier")[0]
    + """
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallinfo2.restype = Info
    libc.free(libc.malloc(4 << 20))  # a block mapped and freed: glibc's own threshold would move up to its size
    before = libc.mallinfo2().hblks
    p = libc.malloc(2 << 20)
    mapped = libc.mallinfo2().hblks - before
    libc.free(p)
    emit({"mapped": mapped})
    model.finalize()
"""
)


def test_the_stub_maps_blocks_from_one_mib_of_their_own():
    """After initialize, a 2 MiB block is mapped of its own (returned to the system when freed) even after a larger
    block was freed, which moves glibc's own threshold up past it (GERT_TRITON_MALLOC_MMAP_THRESHOLD, default 1 MiB);
    =0 leaves glibc's moving threshold, under which it comes from the heap."""
    assert run_python_result(_MMAP_PROBE)["mapped"] == 1
    assert run_python_result(_MMAP_PROBE, env={"GERT_TRITON_MALLOC_MMAP_THRESHOLD": "0"})["mapped"] == 0


def test_a_bad_mmap_threshold_is_refused_naming_the_variable(monkeypatch):
    """A value that is not a whole number fails the load, naming the variable, the expected and the actual value."""
    from gert_triton.config import ConfigError
    from gert_triton.stub_malloc import fix_mmap_threshold

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setenv("GERT_TRITON_MALLOC_MMAP_THRESHOLD", "1M")
    with pytest.raises(ConfigError, match=r"GERT_TRITON_MALLOC_MMAP_THRESHOLD: expected a whole number .* got '1M'"):
        fix_mmap_threshold()
