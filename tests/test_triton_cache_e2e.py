"""The compile cache's integrity against the REAL tritonserver (issue 29): two instances sharing one directory still
compile each graph once and leave one recorded entry per key; a swapped entry never changes what a model answers;
a directory others can write fails the model load with the fix in the message. One server for the module on free
ports (explicit model control: each test loads the models it needs), independent of the other Triton modules."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest

from gert import cache_entry
from gert_triton.repo import init_repo
from gert_triton.server import pytriton_root
from models import mlp_model, ort_run, scale_model
from triton_server import log_tail, start_server, stop_server

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

pytestmark = [pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')")]

CALL_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("triton-cache")


@pytest.fixture(scope="module")
def server(root):
    repo = root / "repo"
    repo.mkdir()
    with pytest.MonkeyPatch.context() as mp:  # the server's cache root: the absolute cache_dirs below are inside it
        mp.setenv("GERT_CACHE_DIR", str(root))  # (gert_triton.config.model_path); set for the server process only
        srv = start_server(str(repo), str(root / "server.log"))
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(
        server.url("http"), connection_timeout=CALL_TIMEOUT, network_timeout=CALL_TIMEOUT
    )
    yield c
    c.close()


def load(server, http, name: str) -> None:
    try:
        http.load_model(name)
    except InferenceServerException as e:
        pytest.fail(f"load {name}: {e}\n{log_tail(server.log, 30)}", pytrace=False)


def infer(http, model: str, x: np.ndarray, output: str) -> np.ndarray:
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return http.infer(model, [i], timeout=int(CALL_TIMEOUT * 1e6)).as_numpy(output)


def write_onnx(root, name: str, data: bytes) -> str:
    p = root / f"{name}.onnx"
    p.write_bytes(data)
    return str(p)


def cache_lines(server, model: str) -> list:
    """The "N from the compile cache" count of each load of ``model`` logged so far, in order."""
    with open(server.log, errors="replace") as f:
        text = f.read()
    return [int(n) for n in re.findall(rf"gert_triton '{model}': .*?\(([0-9]+) from the compile cache", text)]


def test_two_instances_sharing_a_directory_compile_each_key_once(server, http, root):
    """instance_group count 2, one stream each, three batch gears: the two stub processes load at once from one
    cache directory; each gear's graph is compiled once over both (gert's {key}.gert.lock around GE's {key}.lock)
    and recorded once; the other instance's compiles are verified hits."""
    cache = root / "shared-cache"
    model = mlp_model(3)
    init_repo(
        write_onnx(root, "mlp", model),
        server.repo,
        name="shared",
        instances=2,
        max_batch_size=4,
        parameters={"streams": "1", "gears": "batch:1,2,4", "cache_dir": str(cache)},
    )
    load(server, http, "shared")
    try:
        x = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)
        np.testing.assert_allclose(infer(http, "shared", x, "probs"), ort_run(model, [x])[1], rtol=1e-5, atol=1e-6)
        hits = cache_lines(server, "shared")
        assert len(hits) == 2 and sum(hits) == 3, hits  # 6 compiles over the two instances, 3 of them compiled
        keys = sorted(f[: -len(".idx")] for f in os.listdir(cache) if f.endswith(".idx"))
        oms = sorted(f for f in os.listdir(cache) if f.endswith(".om"))
        assert len(keys) == len(oms) == 3, os.listdir(cache)
        for key in keys:  # one entry per key, recorded, the record naming exactly GE's files
            with open(cache / f"{key}.idx") as f:
                listed = [e["cache_file_name"] for e in json.load(f)["cache_file_list"]]
            assert len(listed) == 1 and listed[0] in oms
            with open(cache / cache_entry.record_name(key)) as f:
                assert set(json.load(f)["files"]) == {f"{key}.idx", listed[0]}
        assert not [f for f in os.listdir(cache) if ".tmp" in f]
    finally:
        http.unload_model("shared")


def test_a_swapped_entry_never_changes_an_answer(server, http, root):
    """The issue's repro through Triton: A (y = 2x) and B (y = -7x) with their own caches; B's .om copied over A's;
    reloading A answers 2x, and the server log has gert's CacheWarning saying what changed."""
    for name, factor in (("scale_a", 2.0), ("scale_b", -7.0)):
        init_repo(
            write_onnx(root, name, scale_model(factor)),
            server.repo,
            name=name,
            max_batch_size=4,
            parameters={"streams": "1", "gears": "batch:1,2,4", "cache_dir": "gcache"},
        )
        load(server, http, name)
        http.unload_model(name)
    a, b = (os.path.join(server.repo, n, "gcache") for n in ("scale_a", "scale_b"))
    a_oms = sorted(f for f in os.listdir(a) if f.endswith(".om"))
    b_oms = sorted(f for f in os.listdir(b) if f.endswith(".om"))
    for dst, src in zip(a_oms, b_oms):
        shutil.copyfile(os.path.join(b, src), os.path.join(a, dst))
    load(server, http, "scale_a")
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(infer(http, "scale_a", x, "y"), 2 * x)
        assert cache_lines(server, "scale_a")[-1] == 0
        with open(server.log, errors="replace") as f:
            log = f.read()
        assert (
            len(
                re.findall(
                    r"CacheWarning: compile cache .*scale_a/gcache: entry gert_\w+ is broken: "
                    r"gert_\w+_\d{14}\.om changed \(SHA-256",
                    log,
                )
            )
            == 3
        ), log_tail(server.log)
    finally:
        http.unload_model("scale_a")


def test_a_directory_others_can_write_fails_the_load_with_the_fix(server, http, root):
    cache = root / "open-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    init_repo(
        write_onnx(root, "open", scale_model(2.0)),
        server.repo,
        name="open",
        max_batch_size=4,
        parameters={"streams": "1", "gears": "batch:1,2,4", "cache_dir": str(cache)},
    )
    with pytest.raises(InferenceServerException) as info:
        http.load_model("open")
    msg = str(info.value)
    assert str(cache) in msg and "mode 0o777" in msg and "world-writable" in msg and "chmod o-w" in msg, msg
    assert os.listdir(cache) == []
