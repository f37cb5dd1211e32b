"""The host NPU's device is shared by the processes that use it, as a real device's AI cores are shared by every
process's streams (cbindings/hostnpu/host_cores.h): a graph run's share of the cores counts the runs in progress in
other processes of the same user too. So two Triton stubs (two processes) running at once take a core each instead
of two ONNX Runtime pools of all the cores each on the same CPUs. The table they count in is the user's own: one
planted by anyone else (another owner, a loose mode, a symlink) is never used or written through, and a slot of a
process that is gone does not count."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import pytest

from _helpers import REPO, RUNTIME, run_python_result

pytestmark = RUNTIME + [pytest.mark.hostnpu_only]

# A model of 30 chained 256x256 MatMuls: a run long enough to overlap another process's.
_MODEL = """
import numpy as np, onnx
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 256])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 256])
w = onnx.numpy_helper.from_array(np.full((256, 256), 1 / 256, np.float32), "w")
nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"])]
nodes += [helper.make_node("MatMul", [f"h{i}", "w"], [f"h{i + 1}"]) for i in range(30)]
nodes.append(helper.make_node("Identity", ["h30"], ["y"]))
m = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
MODEL = m.SerializeToString()
"""

# Runs the model now and then for ``seconds`` (a stream without core limits, GERT_HOST_CUBE_CORES=2): the thread
# counts its runs got (the host NPU's sessions: a run alone takes 2 threads, a run beside another 1), and each run's
# values (x @ w^31 keeps x's row means).
_PROBE = (
    _MODEL
    + """
import time, gert
with gert.load(MODEL) as model:
    a = np.random.default_rng(0).random((64, 256), dtype=np.float32)
    model.run({"x": a})
    t = time.monotonic()
    while time.monotonic() - t < SECONDS:
        y = model.run({"x": a})["y"]
        assert np.allclose(y, a.mean(axis=1, keepdims=True), rtol=1e-3), "wrong values"
        time.sleep(0.05)
    threads = sorted({s[2] for s in gert.hostnpu.host_provider().sessions()})
emit({"threads": threads, "pid": os.getpid()})
"""
)

_BUSY = (
    _MODEL
    + """
import sys, time, gert
with gert.load(MODEL) as model:
    a = np.ones((64, 256), np.float32)
    model.run({"x": a})
    print("busy", flush=True)
    t = time.monotonic()
    while time.monotonic() - t < 30 and not os.path.exists(sys.argv[1]):
        model.run({"x": a})
"""
)


def _env(table_dir: str) -> dict:
    return {"GERT_HOST_SHARED_CORES": table_dir, "GERT_HOST_CUBE_CORES": "2"}


def _probe(table_dir: str, seconds: float = 1.0) -> dict:
    return run_python_result(f"import os\nSECONDS = {seconds}\n" + _PROBE, _env(table_dir), timeout=120)


def _table(table_dir) -> str:
    return os.path.join(str(table_dir), f"gert-hostnpu-{os.geteuid()}-dev0")


def test_runs_in_another_process_share_the_device_cores(tmp_path):
    alone = _probe(str(tmp_path))
    assert alone["threads"] == [2], "a run alone on the device takes all its cores"
    stop = tmp_path / "stop"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GERT_")}
    env.update(_env(str(tmp_path)), PYTHONPATH=REPO)
    busy = subprocess.Popen(
        [sys.executable, "-c", "import os\n" + textwrap.dedent(_BUSY), str(stop)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert busy.stdout.readline().strip() == "busy"
        beside = _probe(str(tmp_path), 1.5)
    finally:
        stop.touch()
        busy.wait(60)
    assert busy.returncode == 0
    assert 1 in beside["threads"], "runs beside another process's took all the cores"
    # the table: each process's slot (pid, runs in progress); both processes are gone, their runs ended
    with open(_table(tmp_path), "rb") as f:
        slots = [struct.unpack_from("<iI", f.read(8)) for _ in range(4)]
    assert beside["pid"] in [pid for pid, _ in slots] and all(running == 0 for _, running in slots)
    assert oct(os.stat(_table(tmp_path)).st_mode & 0o777) == "0o600"


def test_a_slot_of_a_process_that_is_gone_does_not_count(tmp_path):
    """A process killed inside a run leaves its count in its slot; its pid is gone, so nobody shares with it (and its
    slot is taken over). A count no process could have is not trusted either."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    table = _table(tmp_path)
    fd = os.open(table, os.O_CREAT | os.O_WRONLY, 0o600)
    # slot 0 free (the probe claims it), 1 the dead process's, 2 a live process's with a count nobody could have
    os.write(fd, struct.pack("<iI", 0, 0) + struct.pack("<iI", int(dead.stdout), 5))
    os.write(fd, struct.pack("<iI", os.getpid(), 0xFFFFFFF0))
    os.ftruncate(fd, 16 * 128)
    os.close(fd)
    assert _probe(str(tmp_path))["threads"] == [2]


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "loose_mode", "wrong_size"])
def test_a_table_that_is_not_the_users_own_is_never_used(tmp_path, plant):
    """What another user could plant at the table's path: a symlink or a hard link to a file of the victim's, a file
    others may write, a file of another size. The host NPU runs as before (each process counts its own runs) and
    writes nothing there."""
    target = tmp_path / "victim"
    target.write_bytes(b"precious" * 256)
    table = _table(tmp_path)
    if plant == "symlink":
        os.symlink(target, table)
        watched = str(target)
    elif plant == "hardlink":  # a file of the table's size and mode, linked at its path
        target.write_bytes(b"precious" * 256)
        os.chmod(target, 0o600)
        os.link(target, table)
        watched = str(target)
    else:
        with open(table, "wb") as f:
            f.write(b"\0" * (100 if plant == "wrong_size" else 16 * 128))
        os.chmod(table, 0o666 if plant == "loose_mode" else 0o600)
        watched = table
    before = open(watched, "rb").read()
    assert _probe(str(tmp_path), 0.3)["threads"] == [2]
    assert open(watched, "rb").read() == before, "the planted file was written"
    if plant == "symlink":
        assert os.path.islink(table)
