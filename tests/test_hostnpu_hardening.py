"""Host NPU hardening (issue 30): one regression test per defect found by review of cbindings/hostnpu/.

Each scenario runs in its own interpreter (``_helpers.run_python_result``): a crash fails one test, not the suite,
and a hang fails at the subprocess deadline. Inside, every wait that used to hang has its own deadline (a thread
joined with a timeout), so the child reports what stayed blocked instead of hanging. Nothing is synchronized by
sleeping: host functions block on threading.Event gates the test opens.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import gert
from _helpers import RUNTIME, acl_code, run_python_result

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]

# Graph builders shared by the child snippets (prepended to their code).
_MODELS = '''
from onnx import helper, TensorProto, numpy_helper

def model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()

def identity(shape, out_shape="same"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape if out_shape == "same" else out_shape)
    return model([helper.make_node("Identity", ["x"], ["y"])], [x], [y])

def loaded(onnx_bytes, stream, session=None, graph_id=1):
    s = session or gert.Session()
    s.add_graph(graph_id, gert.Graph.from_onnx(onnx_bytes))
    s.compile_graph(graph_id)
    s.load_graph(graph_id, stream)
    return s

def in_thread(fn, timeout):
    """Run fn in a daemon thread; (finished within timeout, what it returned or raised)."""
    box = {}
    def run():
        try:
            box["value"] = fn()
        except BaseException as e:
            box["value"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return (not t.is_alive()), box.get("value")

def err(v):
    return None if not isinstance(v, BaseException) else [type(v).__name__, getattr(v, "code", None), str(v)]
'''


def child(code: str, env: dict | None = None, timeout: float = 90):
    """Run a scenario in a fresh interpreter (with the model builders); the JSON it emitted."""
    return run_python_result(_MODELS + code, env=env, timeout=timeout)


# ---- 1: ranks above GE's 25 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [26, 27, 32, 40])
def test_input_rank_above_25_is_refused_by_the_parser(rank):
    out = child(f"""
d = gert.Device(0)
try:
    gert.Graph.from_onnx(identity([1] * {rank}, None))
    emit(None)
except gert.GeError as e:
    emit(str(e))
""")
    assert out is not None, f"a rank-{rank} input was accepted"
    assert f"rank {rank}" in out and "25" in out and "'x'" in out


def test_rank_25_still_compiles_and_runs():
    out = child("""
d = gert.Device(0)
shape = [1] * 24 + [3]
s = gert.Session(); s.add_graph(1, gert.Graph.from_onnx(identity(shape)))
y = s.run_graph(1, [np.arange(3, dtype=np.float32).reshape(shape)])[0]
emit([list(y.shape), y.ravel().tolist(), list(s.summary(1)._output_shapes[0])])
""")
    assert out == [[1] * 24 + [3], [0.0, 1.0, 2.0], [1] * 24 + [3]]


def test_provider_output_rank_above_25_fails_the_compile():
    # The input has rank 25 (allowed); Unsqueeze makes the output rank 26, known only from shape inference: the
    # compile trampoline used to write dims[25] past gertHostTensorRef::dims.
    out = child("""
d = gert.Device(0)
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1] * 25)
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
m = model([helper.make_node("Unsqueeze", ["x", "axes"], ["y"])], [x], [y], [axes])
s = gert.Session(); s.add_graph(1, gert.Graph.from_onnx(m))
try:
    s.compile_graph(1); emit(None)
except gert.GeError as e:
    emit(str(e))
""")
    assert out is not None and "rank 26" in out and "25" in out


# ---- 2: a launch racing aclrtDestroyStream -----------------------------------------------------------------


def test_launch_racing_destroy_stream_fails_or_runs_never_hangs():
    # A pageable H2D copy waits (CANN: a stream sync first) behind a host function; the stream is destroyed
    # meanwhile. The copy's launch came after the worker had drained and exited: it was queued forever.
    out = child(
        """
d = gert.Device(0)
blocked, outcomes = 0, set()
for trial in range(12):
    st = gert.Stream(d); h = st.handle
    dptr = _cann.malloc(64); host = np.zeros(64, np.uint8)
    gate = threading.Event()
    st.launch_host_func(gate.wait)
    copier = threading.Thread(
        target=lambda: outcomes.add(catch(_cann.memcpy_async, dptr, 64, host.ctypes.data, 64, 1, h) and 107000 or 0),
        daemon=True)
    copier.start()
    destroyer = threading.Thread(target=st.destroy, daemon=True); destroyer.start()
    gate.set()
    destroyer.join(10); copier.join(10)
    if copier.is_alive() or destroyer.is_alive():
        blocked += 1
        break
    _cann.free(dptr)
emit([blocked, sorted(outcomes)])
""",
        env={"GERT_HOST_SPIN_US": "0"},
    )
    blocked, outcomes = out
    assert blocked == 0, "a copy launched while its stream was destroyed never completed"
    assert set(outcomes) <= {0, 107000}


# ---- 3: the Session's launch lock across a dynamic run's wait ------------------------------------------------


def test_dynamic_run_wait_does_not_hold_the_session_launch_lock():
    out = child("""
d = gert.Device(0); S = gert.Stream(d)
s = loaded(identity(["n"]), S)
s.add_graph(2, gert.Graph.from_onnx(identity(["n"])))
x = gert.DeviceTensor.from_numpy(np.arange(4, dtype=np.float32), S); S.synchronize()
launched = threading.Event(); removed = {}
def H():  # runs before the dynamic run, which waits for it; RemoveGraph takes the Session's launch lock
    launched.wait(10)
    removed["rc"] = catch(lambda: s.remove_graph(2))
S.launch_host_func(H)
def run():
    launched.set()
    return s.execute_async(1, S, [x])
finished, value = in_thread(run, 15)
emit([finished, err(value), "rc" in removed])
""")
    finished, error, removed = out
    assert finished, "a dynamic run deadlocked with a host function that removes a graph of its Session"
    assert error is None and removed


# ---- 4: aborts that end waits ----------------------------------------------------------------------------------

_HUNG_PAIR = """
d = gert.Device(0); A = gert.Stream(d); B = gert.Stream(d)
s = loaded(identity([4]), A)
x = gert.DeviceTensor.from_numpy(np.arange(4, dtype=np.float32), A); y = gert.DeviceTensor.empty((4,), np.float32)
A.synchronize()
gert.inject_fault("hang", duration_ms=0)      # until aborted
s.execute_async(1, A, [x], [y])               # hangs on A
ev = A.record_event()                          # queued behind the hang
reached = threading.Event()
B.launch_host_func(reached.set)
B.wait_event(ev)                               # B's worker then waits for ev
reached.wait(10)
"""


def test_stream_abort_ends_a_wait_for_an_event():
    out = child(
        _HUNG_PAIR
        + """
ok_b, v = in_thread(B.abort, 10)
ok_a, _ = in_thread(A.abort, 10)
emit([ok_b, err(v), ok_a])
"""
    )
    assert out[0], "aclrtStreamAbort did not end a task waiting for an event (blocked behind an unbounded hang)"
    assert out[1] is None and out[2]


def test_device_task_abort_ends_every_stream_before_waiting():
    out = child(
        _HUNG_PAIR
        + """
ok, v = in_thread(lambda: _cann.device_task_abort(0, 0), 10)   # 0: wait forever
emit([ok, err(v), roundtrip()])
"""
    )
    assert out[0], "aclrtDeviceTaskAbort(dev, 0) blocked: it aborted streams one by one"
    assert out[1] is None and out[2]


# ---- 5: copy ranges near 2^64 ----------------------------------------------------------------------------------


def test_copy_count_that_wraps_the_address_space_is_refused_with_107000():
    out = child("""
d = gert.Device(0); st = gert.Stream(d)
dptr = _cann.malloc(64); host = np.zeros(64, np.uint8)
wrap = (1 << 64) - dptr + 16                     # dptr + count wraps to 16
res = [catch(_cann.memcpy, host.ctypes.data, (1 << 64) - 1, dptr, wrap, 2),   # D2H
       catch(_cann.memcpy, dptr, (1 << 64) - 1, host.ctypes.data, wrap, 1),   # H2D
       catch(_cann.memcpy_async, host.ctypes.data, (1 << 64) - 1, dptr, wrap, 2, st.handle),
       catch(_cann.memset, dptr, (1 << 64) - 1, 0, wrap)]
st.synchronize()
emit([[r[0] if r else None for r in res], roundtrip()])
""")
    codes, works = out
    assert codes == [107000] * 4 and works


# ---- 6: shape-size overflow -------------------------------------------------------------------------------------


def test_shape_whose_byte_count_overflows_is_refused():
    out = child("""
d = gert.Device(0); st = gert.Stream(d)
idx = numpy_helper.from_array(np.array(1, np.int64), "i")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
s = loaded(model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], [x], [y], [idx]), st)
xp = _cann.malloc(16); yp = _cann.malloc(16); host = np.zeros(1, np.float32)
res = []
for n in (1 << 40, 1 << 61, (1 << 62) + 1):   # a 16-byte buffer claimed to hold n floats
    try:
        s.run_fused(1, st, [], [], [(xp, 16, 0, (n,))], [(yp, 16, 0, ())], [(host, yp)], -1)
        res.append(None)
    except gert.GeError as e:
        res.append([e.code, str(e)])
emit([res, roundtrip()])
""")
    res, works = out
    assert all(r is not None and r[0] == 145000 for r in res), res
    assert "more bytes than int64" in res[1][1] and works


# ---- 7: pinned memory freed with a copy queued -------------------------------------------------------------


def test_free_host_with_a_queued_copy_never_writes_into_a_later_allocation():
    # CANN: user error (the memory is freed at once). The host NPU keeps the buffer until the copy ran.
    out = child("""
import ctypes
d = gert.Device(0); st = gert.Stream(d)
N = 4096
dptr = _cann.malloc(N); _cann.memset(dptr, N, 0xAB, N)
gate = threading.Event()
st.launch_host_func(gate.wait)                          # the copy stays queued
pinned = _cann.malloc_host(N)
_cann.memcpy_async(pinned, N, dptr, N, 2, st.handle)    # D2H into pinned memory: really enqueued
_cann.free_host(pinned)
others = [_cann.malloc_host(N) for _ in range(4)]        # would reuse the freed block
for p in others:
    ctypes.memset(p, 0x11, N)
gate.set(); st.synchronize()
clean = all(bytes((ctypes.c_ubyte * N).from_address(p)) == b"\\x11" * N for p in others)
emit([clean, catch(_cann.free_host, pinned)])
""")
    clean, double_free = out
    assert clean, "the queued copy wrote the device's bytes into a later pinned allocation"
    assert double_free is not None  # the buffer is gone for the caller: a second free is refused


# ---- 8: C++ exceptions through extern "C" ---------------------------------------------------------------------


@pytest.mark.parametrize("index", ['{"x": "\\uzzzz"}', '{"cache_file_list": [{"graph_key": "\\u+zzz"}]}'])
def test_bad_unicode_escape_in_the_cache_index_is_an_error_not_an_abort(tmp_path, index):
    (tmp_path / "k1.idx").write_text(index)
    out = child(f"""
d = gert.Device(0)
s = gert.Session({{"ge.graph_compiler_cache_dir": {str(tmp_path)!r}, "ge.graph_key": "k1"}})
s.add_graph(1, gert.Graph.from_onnx(identity([2])))
try:
    s.compile_graph(1); emit(None)
except gert.GeError as e:
    emit(str(e))
""")
    assert out is not None and "cache index file" in out


def test_stream_worker_that_cannot_start_is_an_error_not_an_abort():
    # Under an address-space limit std::thread throws std::system_error: CANN's out-of-stream-resources code.
    out = child("""
import resource
d = gert.Device(0)
vm = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
made, error = [], None
resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), resource.RLIM_INFINITY))
try:
    for i in range(200):
        made.append(gert.Stream(d))
except gert.AclError as e:
    error = [e.code, e.message]
except MemoryError:
    error = "MemoryError"
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
for s in made:
    s.destroy()
emit([len(made), error, roundtrip()])
""")
    made, error, works = out
    assert works
    assert error is None or error == "MemoryError" or error[0] == 207008, error


# ---- 9: reset vs set-device ---------------------------------------------------------------------------------

_RACE_C = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
typedef int (*dev_fn)(int);
typedef int (*create_fn)(void **);
typedef int (*destroy_fn)(void *);
static dev_fn set_dev, reset_dev;
static create_fn create;
static destroy_fn destroy;
static atomic_long failures;
static long rounds;
static double deadline;  /* CLOCK_MONOTONIC seconds: a loaded machine runs fewer rounds, not for minutes */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void *loop(void *arg) {
  for (long i = 0; i < rounds && now() < deadline; i++) {
    set_dev(0);  /* this thread's own reference: its streams must work until its reset */
    void *s = 0;
    if (create(&s) != 0 || destroy(s) != 0) atomic_fetch_add(&failures, 1);
    reset_dev(0);
  }
  return 0;
}
long race(void *a, void *b, void *c, void *d, long n, double seconds) {
  set_dev = (dev_fn)a; reset_dev = (dev_fn)b; create = (create_fn)c; destroy = (destroy_fn)d; rounds = n;
  deadline = now() + seconds;
  pthread_t t[2];
  for (int k = 0; k < 2; k++) pthread_create(&t[k], 0, loop, 0);
  for (int k = 0; k < 2; k++) pthread_join(t[k], 0);
  return failures;
}
"""


def test_reset_device_never_takes_another_threads_new_context(tmp_path):
    # Two threads set the device, create and destroy a stream, reset. A reset that dropped the last reference used
    # to erase, after unlocking, the context and streams the other thread's aclrtSetDevice had just made (107002 /
    # 107000 while that thread held its reference). C threads (no GIL) make the window wide enough to hit.
    # 50,000 rounds take ~5 s on a quiet 2-core machine and 80x longer beside CPU hogs (every stream is a worker thread
    # started and joined): the rounds stop at 30 s, so a loaded run tries fewer of them instead of timing out.
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    (tmp_path / "race.c").write_text(_RACE_C)
    lib = tmp_path / "librace.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "race.c"), "-lpthread"], check=True, timeout=60
    )
    out = child(
        f"""
import ctypes
_cann.init()
acl = ctypes.CDLL(_cann.__file__)
race = ctypes.CDLL({str(lib)!r})
race.race.restype = ctypes.c_long
race.race.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long, ctypes.c_double]
fn = lambda name: ctypes.cast(getattr(acl, name), ctypes.c_void_p)
emit(race.race(fn("aclrtSetDevice"), fn("aclrtResetDevice"), fn("aclrtCreateStream"), fn("aclrtDestroyStream"),
               50000, 30.0))
""",
        timeout=120,
    )
    assert out == 0, f"{out} create/destroy calls failed while their thread held its own aclrtSetDevice reference"


# ---- 10: run_fused's timeout ----------------------------------------------------------------------------------


def test_run_fused_times_out_while_the_stream_is_busy():
    out = child("""
d = gert.Device(0); st = gert.Stream(d)
s = loaded(identity([4]), st)
x = gert.DeviceTensor.from_numpy(np.arange(4, dtype=np.float32), st); y = gert.DeviceTensor.empty((4,), np.float32)
st.synchronize()
gert.inject_fault("hang", duration_ms=0)        # until aborted
s.execute_async(1, st, [x], [y])
host = np.zeros(4, np.float32)
finished, v = in_thread(lambda: s.run_fused(1, st, [], [], [(x.buffer.ptr, 16, 0, (4,))],
                                            [(y.buffer.ptr, 16, 0, (4,))], [(host, y.buffer.ptr)], 200), 15)
emit([finished, err(v), roundtrip()])
""")
    finished, error, works = out
    assert finished, "run_fused(timeout_ms=200) waited for an unbounded hang"
    assert error is not None and error[1] == acl_code("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT") and works


# ---- 11: host functions dropped by an abort -------------------------------------------------------------------


def test_host_function_dropped_by_abort_releases_its_callable():
    out = child("""
import weakref
d = gert.Device(0); S = gert.Stream(d)
class Fn:
    def __call__(self): pass
gate = threading.Event(); running = threading.Event()
S.launch_host_func(lambda: (running.set(), gate.wait(10)))   # running when the abort comes
running.wait(10)
f = Fn(); ref = weakref.ref(f)
S.launch_host_func(f); del f                                  # queued: the abort drops it
aborter = threading.Thread(target=S.abort, daemon=True); aborter.start()
deadline = time.monotonic() + 10
while ref() is not None and time.monotonic() < deadline:     # released by the abort, before the running one ends
    gc.collect(); time.sleep(0.01)
released = ref() is None
gate.set(); aborter.join(10)
S.synchronize()
emit([released, aborter.is_alive()])
""")
    assert out == [True, False], "a host function dropped by aclrtStreamAbort kept its callable alive"


# ---- 13: compile cache files ---------------------------------------------------------------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path):
    dead = tmp_path / f"k1.idx.tmp{_dead_pid()}"
    dead.write_text("half an index")
    live = tmp_path / f"k1.idx.tmp{os.getpid()}"  # this (live) process: another writer mid-write
    live.write_text("in progress")
    out = child(f"""
d = gert.Device(0)
s = gert.Session({{"ge.graph_compiler_cache_dir": {str(tmp_path)!r}, "ge.graph_key": "k1"}})
s.add_graph(1, gert.Graph.from_onnx(identity([2])))
s.compile_graph(1)
emit(sorted(os.listdir({str(tmp_path)!r})))
""")
    assert dead.name not in out and live.name in out
    assert "k1.idx" in out and any(n.startswith("k1_") and n.endswith(".om") for n in out)


@pytest.mark.parametrize("name", ["sub/k1.om", "../k1.om", "/etc/passwd", ".."])
def test_cache_file_name_outside_the_cache_directory_is_refused(tmp_path, name):
    (tmp_path / "k1.idx").write_text(f'{{"cache_file_list": [{{"graph_key": "k1", "cache_file_name": "{name}"}}]}}')
    out = child(f"""
d = gert.Device(0)
s = gert.Session({{"ge.graph_compiler_cache_dir": {str(tmp_path)!r}, "ge.graph_key": "k1"}})
s.add_graph(1, gert.Graph.from_onnx(identity([2])))
try:
    s.compile_graph(1); emit(None)
except gert.GeError as e:
    emit(str(e))
""")
    assert out is not None and "not a file name in the cache directory" in out and name in out


def test_cache_writes_are_fsynced_before_and_after_the_rename(tmp_path):
    # strace shows the order of the calls: fsync(tmp fd) < rename(tmp, final) < fsync(dir fd), for the .om and the
    # .idx. Skipped where strace is missing.
    import shutil

    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    script = tmp_path / "compile.py"
    script.write_text(
        _MODELS.replace("gert.", "gert.")
        + f"""
import gert, threading
d = gert.Device(0)
s = gert.Session({{"ge.graph_compiler_cache_dir": {str(tmp_path)!r}, "ge.graph_key": "k1"}})
s.add_graph(1, gert.Graph.from_onnx(identity([2])))
s.compile_graph(1)
"""
    )
    log = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GERT_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(gert.__file__)))  # the gert under test
    subprocess.run(
        ["strace", "-f", "-e", "trace=openat,fsync,rename,close", "-o", str(log), sys.executable, str(script)],
        check=True,
        timeout=90,
        capture_output=True,
        env=env,
    )
    lines = [ln for ln in log.read_text().splitlines() if str(tmp_path) in ln or "fsync(" in ln]
    renames = [i for i, ln in enumerate(lines) if "rename(" in ln and ".tmp" in ln]
    assert len(renames) == 2, lines
    for r in renames:
        assert any("fsync(" in ln for ln in lines[max(0, r - 3) : r]), lines[max(0, r - 3) : r + 3]
        assert any("fsync(" in ln for ln in lines[r + 1 : r + 4]), lines[r : r + 4]
