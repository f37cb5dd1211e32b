"""The compile cache against another local user (issue 37): who may write the directory and the directories above it,
group sharing checked against the user database, entry files read with lstat, and GE's own writes in the cache (never
through a name someone else can plant). The other user is uid 65534 (nobody) in a forked child, as the repros in
../shared/repros/security/ do: root only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import warnings

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert.core import cache_entry, compile_cache
from gert.core.cache_trust import group_members
from models import load, scale_model

pytestmark = [*RUNTIME, pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")]

NOBODY = 65534
X = np.ones((2, 4), np.float32)


def as_nobody(action, gid: int = NOBODY) -> None:
    """Run ``action()`` in a forked child as uid 65534 (group ``gid``, no supplementary groups); fails if it fails."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(NOBODY)
            action()
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0, "the other user's action failed"


def serve(cache, factor: float = 2.0, **kw) -> tuple:
    """(first row of y, cache hits, misses, CacheWarning messages) of scale(factor) on one stream through ``cache``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gert.load(scale_model(factor), streams=1, gears={"batch": [2]}, cache_dir=cache, **kw) as m:
            m.warmup()
            y = m.run({"x": X})["y"]
            s = m.stats()
    msgs = [str(w.message) for w in caught if issubclass(w.category, gert.CacheWarning)]
    return y[0].tolist(), s["cache_hits"], s["cache_misses"], msgs


def key_of(cache) -> str:
    return [f[:-4] for f in os.listdir(cache) if f.endswith(".idx")][0]


def om_of(cache) -> str:
    return [f for f in os.listdir(cache) if f.endswith(".om")][0]


@pytest.fixture
def tmp_path():
    """A directory uid 65534 can reach (pytest's own tmp_path is under a 0700 directory of root's): under /tmp."""
    import pathlib
    import tempfile

    path = tempfile.mkdtemp(prefix="gert-hostile-")
    os.chmod(path, 0o755)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def private_dir(path) -> str:
    os.makedirs(path, mode=0o755)
    os.chmod(path, 0o755)  # others may enter (nobody reads its way to the directories below), not write
    return str(path)


# ---- the directory and the directories above it --------------------------------------------------------------------


def test_parent_others_can_write_is_refused_unless_sticky_and_ours(tmp_path):
    base = private_dir(tmp_path / "base")
    parent = os.path.join(base, "open")
    os.mkdir(parent)
    os.chmod(parent, 0o777)  # anyone may rename our cache directory away and put theirs in its place
    cache = os.path.join(parent, "cache")
    with pytest.raises(
        gert.GertError,
        match=rf"the directory '{parent}' on the way to it .*mode 0o777\): every user "
        rf"can write it .*chmod go-w {parent}",
    ):
        serve(cache)
    os.chmod(parent, 0o1777)  # sticky, as /tmp: only the owner of our cache directory may rename it
    assert serve(cache)[:3] == ([2.0] * 4, 0, 1)
    theirs = os.path.join(parent, "theirs")
    as_nobody(lambda: os.mkdir(theirs, 0o755))  # their directory in a sticky one: theirs to replace at will
    os.mkdir(os.path.join(theirs, "cache"), 0o700)  # root's cache inside (nobody can still rename `theirs`)
    with pytest.raises(gert.GertError, match=r"next step on the way is owned by nobody \(uid 65534\)"):
        serve(os.path.join(theirs, "cache"))


def test_symlinked_cache_dir_is_checked_along_the_link(tmp_path):
    base = private_dir(tmp_path / "base")
    real = os.path.join(base, "real")
    os.mkdir(real, 0o700)
    open_dir = os.path.join(base, "open")
    os.mkdir(open_dir)
    os.chmod(open_dir, 0o777)
    link = os.path.join(open_dir, "link")
    os.symlink(real, link)  # the link sits where anyone can replace it
    with pytest.raises(gert.GertError, match=rf"the directory '{open_dir}' on the way"):
        serve(link)
    os.chmod(open_dir, 0o755)
    assert serve(link)[:3] == ([2.0] * 4, 0, 1)


def test_sticky_world_writable_cache_is_refused_before_any_file_is_written(tmp_path):
    cache = os.path.join(private_dir(tmp_path / "base"), "shared")
    os.mkdir(cache)
    os.chmod(cache, 0o1777)
    with pytest.raises(gert.GertError) as info:
        serve(cache)
    msg = str(info.value)
    assert f"cache_dir {cache!r} (owner root (uid 0), group" in msg and "mode 0o1777" in msg
    assert "the sticky bit does not stop others adding entries" in msg and f"chmod o-w,-t {cache}" in msg
    assert os.listdir(cache) == []


# ---- group sharing: the owner must be a member, as the user database says -------------------------------------------


def _shared_group() -> int:
    """A group root may share a cache with and uid 65534 is not a member of (per pwd/grp)."""
    import grp

    for g in grp.getgrall():
        if g.gr_gid not in (0, NOBODY) and NOBODY not in group_members(g.gr_gid):
            return g.gr_gid
    pytest.skip("no group without uid 65534 in the group database")


def test_setgid_group_cache_does_not_trust_a_planted_entry_of_a_non_member(tmp_path):
    """uid 65534 runs with the group's gid (a setgid program, a stale login) but is no member of it: its complete,
    self-consistent entry (another model's .om, an index, a recomputed record) is removed, never served."""
    base = private_dir(tmp_path / "base")
    gid = _shared_group()
    a, b = os.path.join(base, "a"), os.path.join(base, "b")
    serve(a, 2.0)
    serve(b, 100.0)
    key, record = key_of(a), json.loads(open(os.path.join(a, key_of(a) + cache_entry.SUFFIX)).read())
    evil = open(os.path.join(b, om_of(b)), "rb").read()
    shared = os.path.join(base, "shared")
    os.mkdir(shared)
    os.chown(shared, 0, gid)
    os.chmod(shared, 0o2770)

    def plant():
        om = f"{key}_20000101000000.om"
        idx = json.dumps({"cache_file_list": [{"cache_file_name": om, "graph_key": key}]}).encode()
        record["files"] = {key + ".idx": hashlib.sha256(idx).hexdigest(), om: hashlib.sha256(evil).hexdigest()}
        record["stats"] = {}
        for name, data in ((om, evil), (key + ".idx", idx), (key + cache_entry.SUFFIX, json.dumps(record).encode())):
            fd = os.open(os.path.join(shared, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
            os.write(fd, data)
            os.close(fd)

    as_nobody(plant, gid)
    assert os.lstat(os.path.join(shared, key + ".idx")).st_gid == gid  # what the old check trusted
    y, hits, misses, msgs = serve(shared, 2.0, cache_mode=0o2770)
    assert (y, hits, misses) == ([2.0] * 4, 0, 1)
    assert len(msgs) == 1 and "owned by nobody (uid 65534)" in msgs[0] and "a member of group" in msgs[0], msgs


# ---- entry files: lstat ---------------------------------------------------------------------------------------------


def test_symlink_planted_by_another_user_is_not_served_even_to_a_trusted_file(tmp_path):
    """A symlink {keyA}.om -> B's .om (inside the directory, a file root owns) planted by uid 65534 while the
    directory was open; the directory is private again, and entries without a record are trusted."""
    base = private_dir(tmp_path / "base")
    a, shared = os.path.join(base, "a"), os.path.join(base, "shared")
    serve(a, 2.0)
    key = key_of(a)
    os.mkdir(shared)
    os.chmod(shared, 0o755)
    serve(shared, 100.0)
    b_om = om_of(shared)
    os.chmod(shared, 0o1777)
    as_nobody(lambda: os.symlink(b_om, os.path.join(shared, key + ".om")))
    os.chmod(shared, 0o755)
    y, hits, misses, msgs = serve(shared, 2.0, trust_foreign_entries=True)
    assert (y, hits, misses) == ([2.0] * 4, 0, 1)
    assert len(msgs) == 1 and f"{key}.om is a symlink owned by nobody (uid 65534)" in msgs[0], msgs
    os.symlink(b_om, os.path.join(shared, "own-link.om"))  # root's own symlink inside the directory: still fine
    trust = compile_cache.resolve_dir(shared)
    assert trust.file_problem(os.path.join(shared, "own-link.om"), "own-link.om") is None


# ---- GE's own writes in the cache -----------------------------------------------------------------------------------


def _ge_compile(cache: str, stream, key: str = "k1") -> None:
    """The host NPU's GE alone (no gert check before it): a graph compiled through its cache."""
    s = gert.Session({"ge.graph_compiler_cache_dir": cache})
    load(s, scale_model(2.0, shape=(2, 4)), stream, options={"ge.graph_key": key})


def test_ge_never_writes_through_a_planted_lock_or_temp_name(tmp_path, stream):
    """GE's lock is opened with O_NOFOLLOW and created under a fresh name; its index and .om are written to new
    files (O_EXCL, unpredictable names) renamed into place: the names GE used to open for writing ({key}.lock,
    {key}.idx.tmp<pid>), planted as symlinks to root's files, change nothing outside the cache."""
    cache = private_dir(tmp_path / "cache")
    precious = tmp_path / "precious.conf"
    precious.write_text("root's configuration\n")
    for name in ("k1.lock", f"k1.idx.tmp{os.getpid()}"):
        os.symlink(precious, os.path.join(cache, name))
    _ge_compile(cache, stream)
    assert precious.read_text() == "root's configuration\n"
    assert not os.path.islink(os.path.join(cache, "k1.lock")) and os.path.isfile(os.path.join(cache, "k1.lock"))
    assert os.path.isfile(os.path.join(cache, "k1.idx"))
    os.unlink(os.path.join(cache, "k1.lock"))
    os.symlink(tmp_path / "created-elsewhere", os.path.join(cache, "k1.lock"))
    _ge_compile(cache, stream)  # a hit, under a lock file of its own
    assert not os.path.lexists(tmp_path / "created-elsewhere")


def test_gert_lock_is_never_opened_through_a_symlink(tmp_path):
    cache = private_dir(tmp_path / "cache")
    serve(cache)
    key = key_of(cache)
    lock = os.path.join(cache, key + ".gert.lock")
    os.unlink(lock)
    os.symlink(tmp_path / "created-elsewhere", lock)
    assert serve(cache)[:3] == ([2.0] * 4, 1, 0)
    assert not os.path.lexists(tmp_path / "created-elsewhere") and os.path.isfile(lock) and not os.path.islink(lock)


# ---- what the key and the record cover ------------------------------------------------------------------------------


def test_toolkit_version_is_part_of_the_key(tmp_path):
    versions = {}
    for v in ("8.5.0", "9.0.0"):
        root = tmp_path / f"toolkit-{v}"
        (root / "compiler").mkdir(parents=True)
        (root / "compiler" / "version.info").write_text(f"Version={v}\n")
        versions[v] = compile_cache.toolkit_version((str(root),))
    assert versions["8.5.0"] != versions["9.0.0"]
    cache = compile_cache.CompileCache.open(private_dir(tmp_path / "c"), b"model")
    assert "toolkit" in cache.key_inputs({}, {})


def test_external_weight_files_are_recorded_and_checked(tmp_path):
    """With ge.externalWeight=1 GE writes weights to the cache's weight/ directory: the record covers them, so a
    changed weight file, or one another user owns, makes the entry broken."""
    cache = private_dir(tmp_path / "cache")
    weight = os.path.join(cache, "weight")
    os.mkdir(weight, 0o700)
    with open(os.path.join(weight, "w0.bin"), "wb") as f:  # as GE would have written it at the save
        f.write(b"\0" * 64)
    opts = {"options": {"ge.externalWeight": "1"}}
    assert serve(cache, **opts)[1:3] == (0, 1)
    rec = json.loads(open(os.path.join(cache, key_of(cache) + cache_entry.SUFFIX)).read())
    assert "weight/w0.bin" in rec["files"]
    assert serve(cache, **opts)[1:] == (1, 0, [])
    with open(os.path.join(weight, "w0.bin"), "r+b") as f:
        f.write(b"\1")
    y, hits, misses, msgs = serve(cache, **opts)
    assert (hits, misses) == (0, 1) and "weight/w0.bin changed (SHA-256" in msgs[0], msgs
    os.chown(os.path.join(weight, "w0.bin"), NOBODY, NOBODY)
    y, hits, misses, msgs = serve(cache, **opts)
    assert (hits, misses) == (0, 1) and "weight/w0.bin is owned by nobody (uid 65534)" in msgs[0], msgs
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(weight)
