"""GE's graph compile cache (issue 16): ge.graph_compiler_cache_dir + ge.graph_key.

- The host NPU's GE alone, with GE's semantics (ge-shapes-and-cache.md, part B): on only with both options; the key
  pattern; a missing directory is PARAM_INVALID with E13026; {key}.lock / {key}.idx / {key}_{time}.om; a hit takes
  the cached model without comparing graphs (a different graph under the same key gets the old model); a listed
  entry that is missing or corrupt fails the compile, and GE does not compile again.
- gert's safe layer (gert.compile_cache): derived keys (a changed model or option never hits a stale entry), a
  second process whose every graph is a cache hit with identical results, a broken entry recompiled with a warning,
  GERT_CACHE_DIR, two processes warming up at once compile each key once.
- gert_triton's cache_dir parameter (the real server: tests/test_triton_e2e.py).
Integrity (records, trust, swapped or planted entries): tests/test_cache_integrity.py, tests/test_triton_cache_e2e.py.
"""

from __future__ import annotations

import json
import os
import re
import warnings

import numpy as np
import pytest

import gert
from _helpers import RUNTIME, run_python_result
from gert.compile_cache import CacheWarning, CompileCache
from gert_triton.config import ConfigError, cache_path, parse_parameters
from models import load, mlp_model, scale_model

pytestmark = RUNTIME

PARAM_INVALID = 145000
X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _session(cache_dir=None, **extra) -> gert.Session:
    opts = dict(extra)
    if cache_dir is not None:
        opts["ge.graph_compiler_cache_dir"] = str(cache_dir)
    return gert.Session(opts)


def _run(session, gid, stream) -> np.ndarray:
    from models import execute

    return execute(session, gid, stream, [X])[0]


def _compile_scale(tmp, stream, factor: float, key: str = "k1", shape=(3, 4), session_key: bool = False):
    """A scale graph compiled through the cache; (session, graph id, outcome)."""
    s = _session(tmp, **({"ge.graph_key": key} if session_key else {}))
    gid = load(s, scale_model(factor, shape=shape), stream, options=None if session_key else {"ge.graph_key": key})
    return s, gid, gert.hostnpu.last_compile_cache()


# ---- the host NPU's GE -----------------------------------------------------------------------------------------------


def test_cache_is_on_only_with_both_options(tmp_path, stream):
    s = _session(tmp_path)  # a directory, no key
    load(s, scale_model(2.0, shape=(3, 4)), stream)
    assert gert.hostnpu.last_compile_cache() is None
    s = _session()  # a key, no directory
    load(s, scale_model(2.0, shape=(3, 4)), stream, options={"ge.graph_key": "k1"})
    assert gert.hostnpu.last_compile_cache() is None
    s = _session(tmp_path)  # an empty key: off, silently
    load(s, scale_model(2.0, shape=(3, 4)), stream, options={"ge.graph_key": ""})
    assert os.listdir(tmp_path) == []
    s, gid, outcome = _compile_scale(tmp_path, stream, 2.0)
    assert outcome == "miss"
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 3 and files[0] == "k1.idx" and files[1] == "k1.lock"
    assert re.fullmatch(r"k1_\d{14}\.om", files[2]), files
    with open(tmp_path / "k1.idx") as f:
        assert json.load(f) == {"cache_file_list": [{"graph_key": "k1", "cache_file_name": files[2]}]}
    np.testing.assert_array_equal(_run(s, gid, stream), X * 2)


@pytest.mark.parametrize("key", ["a b", "x" * 129, "a/b", "k.1", "ключ"])
def test_graph_key_must_match_ges_pattern(tmp_path, stream, key):
    with pytest.raises(gert.GeError) as info:
        _compile_scale(tmp_path, stream, 2.0, key=key)
    assert info.value.code == PARAM_INVALID and "graph_key" in str(info.value)
    assert not any(f.endswith((".om", ".idx")) for f in os.listdir(tmp_path))


def test_longest_key_and_session_level_key(tmp_path, stream):
    key = "K-_9" * 32  # 128 characters
    assert _compile_scale(tmp_path, stream, 2.0, key=key)[2] == "miss"
    assert os.path.exists(tmp_path / f"{key}.idx")
    # a key set on the Session is shared by every graph in it: the second graph loads the first one's model
    s, gid, outcome = _compile_scale(tmp_path, stream, 3.0, key="shared", session_key=True)
    assert outcome == "miss"
    gid2 = load(s, scale_model(7.0, shape=(3, 4)), stream)
    assert gert.hostnpu.last_compile_cache() == "hit"
    np.testing.assert_array_equal(_run(s, gid2, stream), X * 3)


def test_missing_directory_is_param_invalid_E13026(tmp_path, stream):
    with pytest.raises(gert.GeError) as info:
        _compile_scale(tmp_path / "nope", stream, 2.0)
    assert info.value.code == PARAM_INVALID and "E13026" in str(info.value)
    assert not (tmp_path / "nope").exists()  # GE never creates it


def test_hit_takes_the_cached_model_without_comparing_graphs(tmp_path, stream):
    _compile_scale(tmp_path, stream, 2.0)
    oms = [f for f in os.listdir(tmp_path) if f.endswith(".om")]
    # another graph (other weights, and other input dims) under the same key gets the old model, as in GE
    s, gid, outcome = _compile_scale(tmp_path, stream, 5.0, shape=("n", 4))
    assert outcome == "hit"
    summary = s.summary(gid)
    assert summary.is_static and summary.output_shapes == [(3, 4)]
    np.testing.assert_array_equal(_run(s, gid, stream), X * 2)
    assert [f for f in os.listdir(tmp_path) if f.endswith(".om")] == oms  # nothing compiled or written


def test_om_without_an_index_is_used(tmp_path, stream):
    _compile_scale(tmp_path, stream, 2.0)
    om = next(f for f in os.listdir(tmp_path) if f.endswith(".om"))
    os.rename(tmp_path / om, tmp_path / "k1.om")
    os.unlink(tmp_path / "k1.idx")
    s, gid, outcome = _compile_scale(tmp_path, stream, 5.0)
    assert outcome == "hit"
    np.testing.assert_array_equal(_run(s, gid, stream), X * 2)


def _break(tmp_path, how: str) -> None:
    om = tmp_path / next(f for f in os.listdir(tmp_path) if f.endswith(".om"))
    data = bytearray(om.read_bytes())
    if how == "missing":
        om.unlink()
    elif how == "truncated":
        om.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "flipped":
        data[len(data) // 2] ^= 0xFF
        om.write_bytes(bytes(data))
    elif how == "index":
        (tmp_path / "k1.idx").write_text('{"cache_file_list": [')


@pytest.mark.parametrize("how", ["missing", "truncated", "flipped", "index"])
def test_broken_entry_fails_the_compile_and_ge_does_not_recompile(tmp_path, stream, how):
    _compile_scale(tmp_path, stream, 2.0)
    _break(tmp_path, how)
    before = sorted(os.listdir(tmp_path))
    for _ in range(2):  # and again: GE never repairs the entry
        with pytest.raises(gert.GeError) as info:
            _compile_scale(tmp_path, stream, 2.0)
        assert {
            "missing": "does not exist",
            "truncated": "not a complete",
            "flipped": "checksum",
            "index": "cache index",
        }[how] in str(info.value)
    assert sorted(os.listdir(tmp_path)) == before


# ---- gert's safe layer ---------------------------------------------------------------------------------------------


def test_keys_follow_model_shape_options_and_version(tmp_path):
    a = CompileCache.open(tmp_path, mlp_model(1))
    b = CompileCache.open(tmp_path, mlp_model(2))
    sess, graph = {"ge.aicoreNum": "1|"}, {"ge.inputShape": "x:4,16"}
    key = a.graph_key(sess, graph)
    assert re.fullmatch(r"[A-Za-z0-9_\-]{1,128}", key)
    assert key == CompileCache.open(tmp_path, mlp_model(1)).graph_key(sess, graph)
    # where it runs and where the cache is do not change the key: every stream and device shares an entry
    assert key == a.graph_key({**sess, "ge.session_device_id": "3", "ge.graph_compiler_cache_dir": "/x"}, graph)
    assert key != b.graph_key(sess, graph)
    assert key != a.graph_key(sess, {"ge.inputShape": "x:8,16"})
    assert key != a.graph_key({"ge.aicoreNum": "2|"}, graph)
    assert key != a.graph_key(sess, {**graph, "ge.oo.level": "O1"})
    assert key != CompileCache.open(tmp_path, mlp_model(1), {"ge.exec.precision_mode": "force_fp32"}).graph_key(
        sess, graph
    )
    import gert.compile_cache as cc

    old = gert.core.__version__  # gert.__version__, kept by the core (gert/core/__init__.py)
    try:
        gert.core.__version__ = "0.0.0-other"
        assert key != a.graph_key(sess, graph)
    finally:
        gert.core.__version__ = old
    assert cc.resolve_dir("") is None


def test_changed_model_never_hits_a_stale_entry(tmp_path):
    x = np.ones((2, 4), np.float32)
    for factor in (2.0, 5.0):
        with gert.load(scale_model(factor), streams=1, gears={"batch": [2]}, cache_dir=tmp_path) as m:
            m.warmup()
            assert m.stats()["cache_misses"] == 1
            np.testing.assert_array_equal(m.run({"x": x})["y"], x * factor)


_SECOND_PROCESS = """
import numpy as np, gert, sys
sys.path.insert(0, "tests")
from models import mlp_model
with gert.load(mlp_model(7), streams=2, cube_cores=1, gears={"batch": [1, 2, 4]}, cache_dir=CACHE) as m:
    m.warmup()
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    out = m.run({"x": x})
    s = m.stats()
    emit({"streams": [[t["cache_hits"], t["cache_misses"], t["compiles"]] for t in s["streams"]],
          "probs": out["probs"].tolist(), "logits": out["logits"].tobytes().hex()})
"""


def test_second_process_hits_every_graph_with_identical_results(tmp_path):
    code = _SECOND_PROCESS.replace("CACHE", repr(str(tmp_path / "cache")))
    first = run_python_result(code)
    # 3 gears x 2 streams: stream 0 compiles each key, stream 1 (same options) loads it
    assert first["streams"] == [[0, 3, 3], [3, 0, 3]]
    second = run_python_result(code)
    assert second["streams"] == [[3, 0, 3], [3, 0, 3]]  # every graph a hit, none compiled afresh
    assert second["logits"] == first["logits"]
    assert len([f for f in os.listdir(tmp_path / "cache") if f.endswith(".om")]) == 3


def test_cache_dir_from_the_environment(tmp_path):
    code = _SECOND_PROCESS.replace("CACHE", "None")
    env = {"GERT_CACHE_DIR": str(tmp_path / "env" / "cache")}
    assert run_python_result(code, env)["streams"][0] == [0, 3, 3]
    assert run_python_result(code, env)["streams"][0] == [3, 0, 3]
    assert os.path.isdir(tmp_path / "env" / "cache")


_RACE = """
import os, time, numpy as np, gert, sys
sys.path.insert(0, "tests")
from models import mlp_model
while time.time() < START:
    time.sleep(0.001)
with gert.load(mlp_model(8, features=64, hidden=512), streams=2, cube_cores=1, gears={"batch": [1, 2, 3, 4, 5, 6]},
               cache_dir=CACHE) as m:
    m.warmup()
    out = m.run({"x": np.ones((5, 64), np.float32)})
    s = m.stats()
    emit({"hits": s["cache_hits"], "misses": s["cache_misses"], "probs": out["probs"].tobytes().hex()})
"""


def test_two_processes_warming_up_at_once_compile_each_key_once(tmp_path):
    import concurrent.futures
    import time

    cache = tmp_path / "cache"
    code = _RACE.replace("CACHE", repr(str(cache))).replace("START", repr(time.time() + 3.0))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda _: run_python_result(code, timeout=120), range(2))
    keys = 6  # one per gear; 2 streams x 2 processes compile each
    assert a["hits"] + a["misses"] == b["hits"] + b["misses"] == 2 * keys
    assert a["misses"] + b["misses"] == keys, (a, b)  # the lock: each key compiled once over both processes
    assert a["probs"] == b["probs"]
    oms = [f for f in os.listdir(cache) if f.endswith(".om")]
    idx = [f for f in os.listdir(cache) if f.endswith(".idx")]
    assert len(oms) == len(idx) == keys
    for name in idx:  # never corrupt: one entry per key, naming its .om, recorded by gert
        with open(cache / name) as f:
            entries = json.load(f)["cache_file_list"]
        assert len(entries) == 1 and entries[0]["cache_file_name"] in oms
        with open(cache / (name[: -len(".idx")] + ".gert.json")) as f:
            assert set(json.load(f)["files"]) == {name, entries[0]["cache_file_name"]}
    assert not [f for f in os.listdir(cache) if ".tmp" in f]


@pytest.mark.parametrize("how", ["missing", "flipped"])
def test_broken_entry_is_removed_and_recompiled_with_a_warning(tmp_path, how):
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    with gert.load(mlp_model(3), streams=1, gears={"batch": [2]}, cache_dir=tmp_path) as m:
        m.warmup()
        expected = m.run({"x": x})
    om = tmp_path / next(f for f in os.listdir(tmp_path) if f.endswith(".om"))
    if how == "missing":
        om.unlink()
    else:
        data = bytearray(om.read_bytes())
        data[len(data) // 3] ^= 0x5A
        om.write_bytes(bytes(data))
    with gert.load(mlp_model(3), streams=1, gears={"batch": [2]}, cache_dir=tmp_path) as m:
        with pytest.warns(CacheWarning, match="compiling again"):
            m.warmup()
        s = m.stats()
        assert (s["cache_hits"], s["cache_misses"]) == (0, 1)
        np.testing.assert_array_equal(m.run({"x": x})["probs"], expected["probs"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with gert.load(mlp_model(3), streams=1, gears={"batch": [2]}, cache_dir=tmp_path) as m:  # repaired: a hit again
            m.warmup()
            assert m.stats()["cache_hits"] == 1


def test_unusable_cache_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(gert.GertError, match="cannot create the compile cache directory"):
        gert.load(scale_model(2.0), cache_dir=blocker / "sub")


# ---- gert_triton ----------------------------------------------------------------------------------------------------


def test_triton_cache_dir_parameter(tmp_path, monkeypatch):
    mdir = str(tmp_path / "m")
    assert cache_path(parse_parameters({"cache_dir": {"string_value": "cache"}}), mdir) == os.path.join(mdir, "cache")
    # an absolute cache_dir only inside the root the server's environment allows (GERT_CACHE_DIR)
    monkeypatch.delenv("GERT_CACHE_DIR", raising=False)
    with pytest.raises(ConfigError, match="'cache_dir'.*GERT_CACHE_DIR"):
        cache_path(parse_parameters({"cache_dir": "/var/cache/gert"}), mdir)
    monkeypatch.setenv("GERT_CACHE_DIR", "/var/cache")
    assert cache_path(parse_parameters({"cache_dir": "/var/cache/gert"}), mdir) == "/var/cache/gert"
    assert cache_path(parse_parameters({}), mdir) is None
    with pytest.raises(ConfigError, match="'cache_dir'"):
        parse_parameters({"cache_dir": " "})


def test_triton_model_fills_and_reuses_its_cache(tmp_path, monkeypatch):
    import fake_pb_utils
    from gert_triton import TritonPythonModel
    from test_triton_unit import autocomplete, init_args, model_dir

    pb = fake_pb_utils.install(monkeypatch)
    mdir = model_dir(tmp_path, mlp_model(5))
    counts = []
    for _ in range(2):
        cfg = autocomplete(
            pb,
            mdir,
            parameters={
                "cache_dir": {"string_value": "gcache"},
                "streams": {"string_value": "1"},
                "gears": {"string_value": "batch:1,2"},
            },
            max_batch_size=2,
        )
        m = TritonPythonModel()
        m.initialize(init_args(mdir, cfg))
        try:
            s = m.model.stats()
            counts.append((s["cache_hits"], s["cache_misses"]))
        finally:
            m.finalize()
    assert counts == [(0, 2), (2, 0)]
    assert len([f for f in os.listdir(os.path.join(mdir, "gcache")) if f.endswith(".om")]) == 2
    assert any("2 from the compile cache" in msg for _, msg in pb.Logger.messages)


def test_triton_cache_mode_and_trust_parameters():
    p = parse_parameters({"cache_mode": {"string_value": "0770"}, "trust_foreign_entries": "true"})
    assert p.get("cache_mode") == 0o770 and p.get("trust_foreign_entries") is True
    assert "cache_mode" not in parse_parameters({}).load
    for bad, said in (("0777", "every user"), ("rwx", "octal"), ("0600", "owner needs rwx")):
        with pytest.raises(ConfigError, match=f"parameter 'cache_mode': .*{said}"):
            parse_parameters({"cache_mode": bad})
    with pytest.raises(ConfigError, match="parameter 'trust_foreign_entries': expected true or false"):
        parse_parameters({"trust_foreign_entries": "maybe"})


def test_triton_model_passes_cache_mode(tmp_path, monkeypatch):
    """A group-shared cache directory (0770) is refused by default and served with cache_mode "0770"."""
    import fake_pb_utils
    from gert_triton import TritonPythonModel
    from test_triton_unit import autocomplete, init_args, model_dir

    pb = fake_pb_utils.install(monkeypatch)
    mdir = model_dir(tmp_path, mlp_model(5))
    os.mkdir(os.path.join(mdir, "shared"), 0o770)
    os.chmod(os.path.join(mdir, "shared"), 0o770)
    params = {
        "cache_dir": {"string_value": "shared"},
        "streams": {"string_value": "1"},
        "gears": {"string_value": "batch:1"},
    }
    for extra in ({}, {"cache_mode": {"string_value": "0770"}}):
        cfg = autocomplete(pb, mdir, parameters={**params, **extra}, max_batch_size=1)
        m = TritonPythonModel()
        if not extra:
            with pytest.raises(gert.GertError, match="cache_mode=0o770"):
                m.initialize(init_args(mdir, cfg))
            continue
        m.initialize(init_args(mdir, cfg))
        try:
            assert m.model.stats()["cache_misses"] == 1
        finally:
            m.finalize()
