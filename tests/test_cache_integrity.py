"""Compile cache integrity (issue 29): a planted, swapped, truncated or edited entry is never served; a directory
others can write is refused.

GE takes a cache hit without comparing anything (ge-shapes-and-cache.md part B; tests/test_compile_cache.py shows
the host NPU's GE doing so). gert records each entry it saves ({key}.gert.json: SHA-256 of GE's files, the key's
inputs, the precision settings) and checks it before a compile that would hit (gert/core/cache_entry.py), and checks who
can write the directory and each file (gert/core/cache_trust.py). Ownership cases chown files to another uid: root only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
import threading
import warnings

import numpy as np
import pytest

import gert
from _helpers import RUNTIME
from gert import cache_entry
from gert.cache_trust import parse_mode
from gert.compile_cache import CompileCache
from models import mlp_model, scale_model

pytestmark = RUNTIME
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")

X = np.arange(8, dtype=np.float32).reshape(2, 4)
OTHER_UID = 4242  # a user that is neither this one nor root


def fill(cache, factor: float = 2.0, **kw) -> dict:
    """Load scale(factor) on one stream with one batch gear through ``cache``; its stats."""
    with gert.load(scale_model(factor), streams=1, gears={"batch": [2]}, cache_dir=cache, **kw) as m:
        m.warmup()
        np.testing.assert_array_equal(m.run({"x": X})["y"], X * factor)
        return dict(m.stats())


def serve(cache, factor: float = 2.0, **kw) -> tuple:
    """Load scale(factor) again, one stream: (result, cache hits, misses, CacheWarning messages)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gert.load(scale_model(factor), streams=1, gears={"batch": [2]}, cache_dir=cache, **kw) as m:
            m.warmup()
            y = m.run({"x": X})["y"]
            s = m.stats()
    msgs = [str(w.message) for w in caught if issubclass(w.category, gert.CacheWarning)]
    return y, s["cache_hits"], s["cache_misses"], msgs


def only(cache, suffix: str) -> str:
    names = [f for f in os.listdir(cache) if f.endswith(suffix) and not f.endswith(cache_entry.SUFFIX)]
    assert len(names) == 1, names
    return os.path.join(cache, names[0])


def _me() -> str:
    import pwd

    return f"{pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"


def key_of(cache) -> str:
    return os.path.basename(only(cache, ".idx"))[: -len(".idx")]


# ---- the entry: recorded at save, checked before a hit --------------------------------------------------------------


def test_an_entry_is_recorded_when_saved(tmp_path):
    cache = tmp_path / "c"
    assert fill(cache)["cache_misses"] == 1
    key = key_of(cache)
    with open(cache / cache_entry.record_name(key)) as f:
        rec = json.load(f)
    om = os.path.basename(only(cache, ".om"))
    assert rec["key"] == key and set(rec["files"]) == {key + ".idx", om}
    assert rec["files"][om] == cache_entry.sha256(str(cache / om))
    assert {"model", "session", "graph", "gert", "backend"} <= set(rec["inputs"])
    assert any(k == "ge.inputShape" for k, _ in rec["inputs"]["graph"])
    assert not [f for f in os.listdir(cache) if ".tmp" in f]
    y, hits, misses, msgs = serve(cache)
    assert (hits, misses, msgs) == (1, 0, [])
    (cache / (cache_entry.record_name(key) + ".tmp999-1")).write_text("{")  # a writer that crashed mid-record
    os.unlink(only(cache, ".om"))
    assert serve(cache)[2] == 1  # broken, recompiled, recorded again: the leftover is gone
    assert not [f for f in os.listdir(cache) if ".tmp" in f]


def test_swapped_om_is_never_served(tmp_path):
    """The issue's repro: A (y = 2x) and B (y = -7x), each with its own cache; B's .om copied over A's. GE would
    load B's model for A (a valid host NPU model: the checksum inside is B's own); gert serves 2x, warns, recompiles,
    and the next load hits the repaired entry."""
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a, 2.0)
    fill(b, -7.0)
    swapped = only(a, ".om")
    shutil.copyfile(only(b, ".om"), swapped)
    y, hits, misses, msgs = serve(a, 2.0)
    np.testing.assert_array_equal(y, X * 2)
    assert (hits, misses) == (0, 1)
    assert len(msgs) == 1 and f"{os.path.basename(swapped)} changed (SHA-256" in msgs[0], msgs
    assert serve(a, 2.0)[1:] == (1, 0, [])


def _plant_foreign_om(cache, tmp_path) -> None:
    """Add B's model to A's directory and point A's index at it (an edited .idx)."""
    other = tmp_path / "b"
    fill(other, -7.0)
    shutil.copyfile(only(other, ".om"), cache / "planted.om")
    idx = only(cache, ".idx")
    with open(idx) as f:
        data = json.load(f)
    data["cache_file_list"][0]["cache_file_name"] = "planted.om"
    with open(idx, "w") as f:
        json.dump(data, f)


def _symlink_to_own_copy(cache, tmp_path) -> None:
    """Replace A's .om by a symlink to an identical copy outside the directory: the hashes still match, the file
    is no longer one only the cache's writers control."""
    om = only(cache, ".om")
    outside = tmp_path / "outside.om"
    shutil.copyfile(om, outside)
    os.unlink(om)
    os.symlink(outside, om)


BREAKS = {
    "truncated": (lambda c, t: os.truncate(only(c, ".om"), os.path.getsize(only(c, ".om")) // 2), "changed (SHA-256"),
    "idx_edited": (_plant_foreign_om, "planted.om is listed but gert never recorded it"),
    "idx_absolute": (
        lambda c, t: (shutil.copyfile(only(c, ".om"), t / "abs.om"), _relist(c, str(t / "abs.om"))),
        "outside the cache directory",
    ),
    "symlink_out": (_symlink_to_own_copy, "a symlink out of the cache directory"),
    "record_removed": (lambda c, t: os.unlink(c / cache_entry.record_name(key_of(c))), "no gert record"),
    "record_inputs": (lambda c, t: _edit_record(c, lambda r: r["inputs"].update(gert="0.0.1")), "input gert is"),
    "precision": (
        lambda c, t: _edit_record(
            c, lambda r: r["precision"].update({"global.ge.exec.precision_mode": "allow_fp32_to_fp16"})
        ),
        "precision setting global.ge.exec.precision_mode",
    ),
}


def _relist(cache, name: str) -> None:
    idx = only(cache, ".idx")
    with open(idx) as f:
        data = json.load(f)
    data["cache_file_list"][0]["cache_file_name"] = name
    with open(idx, "w") as f:
        json.dump(data, f)


def _edit_record(cache, change) -> None:
    path = cache / cache_entry.record_name(key_of(cache))
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec))


@pytest.mark.parametrize("how", list(BREAKS))
def test_broken_entry_is_reported_removed_and_recompiled(tmp_path, how):
    cache = tmp_path / "a"
    fill(cache, 2.0)
    damage, said = BREAKS[how]
    damage(cache, tmp_path)
    y, hits, misses, msgs = serve(cache, 2.0)
    np.testing.assert_array_equal(y, X * 2)
    assert (hits, misses) == (0, 1)
    assert len(msgs) == 1 and said in msgs[0] and "compiling again" in msgs[0], msgs
    assert not os.path.lexists(cache / "planted.om")  # gone with the entry
    if how == "idx_absolute":
        assert os.path.exists(tmp_path / "abs.om")  # a file outside the directory is never deleted
    assert serve(cache, 2.0)[1:] == (1, 0, [])  # repaired


def test_foreign_entries_are_used_only_when_trusted(tmp_path):
    """An entry without gert's record (another tool's, an older gert's) is served as GE would serve it only with
    trust_foreign_entries=True; without it, it is rebuilt."""
    cache = tmp_path / "a"
    fill(cache, 2.0)
    os.unlink(cache / cache_entry.record_name(key_of(cache)))
    y, hits, misses, msgs = serve(cache, 2.0, trust_foreign_entries=True)
    assert (hits, misses, msgs) == (1, 0, [])
    assert not os.path.exists(cache / cache_entry.record_name(key_of(cache)))  # trusted, not adopted
    y, hits, misses, msgs = serve(cache, 2.0)
    assert (hits, misses) == (0, 1) and "no gert record" in msgs[0]


def test_symlinked_ge_lock_is_removed(tmp_path):
    """GE opens {key}.lock with O_CREAT through symlinks: a planted one could create a file anywhere gert can."""
    cache = tmp_path / "a"
    fill(cache, 2.0)
    lock = cache / (key_of(cache) + ".lock")
    os.unlink(lock)
    os.symlink(tmp_path / "victim", lock)
    y, hits, misses, msgs = serve(cache, 2.0)
    np.testing.assert_array_equal(y, X * 2)
    assert not os.path.exists(tmp_path / "victim") and not os.path.islink(lock)
    assert len(msgs) == 1 and "lock file" in msgs[0] and "a symlink out of the cache directory" in msgs[0], msgs
    assert (hits, misses) == (1, 0)  # the entry itself is intact


@root_only
def test_entry_planted_by_another_user_is_not_served(tmp_path):
    """A complete, self-consistent entry (record with the right hashes and inputs) for A's key whose files belong
    to another user: only the owner check stands between it and A's results."""
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a, 2.0)
    fill(b, -7.0)
    key = key_of(a)
    shutil.copyfile(only(b, ".om"), only(a, ".om"))
    rec = cache_entry.new_record(str(a), key, json.loads((a / cache_entry.record_name(key)).read_text())["inputs"], {})
    (a / cache_entry.record_name(key)).write_bytes(rec.to_bytes())
    for f in os.listdir(a):
        if not f.endswith(".lock"):  # the lock files are checked too; here the entry's own files are
            os.chown(a / f, OTHER_UID, OTHER_UID)
    y, hits, misses, msgs = serve(a, 2.0)
    np.testing.assert_array_equal(y, X * 2)
    assert len(msgs) == 1 and f"owned by uid {OTHER_UID}" in msgs[0], msgs


# ---- the directory ---------------------------------------------------------------------------------------------------


def test_missing_directory_is_created_private(tmp_path):
    old = os.umask(0o022)
    try:
        fill(tmp_path / "new" / "cache")
        assert stat.S_IMODE(os.stat(tmp_path / "new" / "cache").st_mode) == 0o700
        fill(tmp_path / "grp", cache_mode=0o2770)  # exactly cache_mode, whatever the umask
        assert stat.S_IMODE(os.stat(tmp_path / "grp").st_mode) == 0o2770
    finally:
        os.umask(old)


def test_world_writable_directory_is_refused(tmp_path):
    cache = tmp_path / "c"
    cache.mkdir()
    os.chmod(cache, 0o777)
    with pytest.raises(gert.GertError) as info:
        gert.load(scale_model(2.0), cache_dir=cache)
    msg = str(info.value)
    assert str(cache) in msg and "mode 0o777" in msg and f"owner {_me()}" in msg
    assert "world-writable without the sticky bit" in msg and f"chmod o-w {cache}" in msg
    with pytest.raises(gert.GertError, match="world-writable"):  # whatever cache_mode says
        gert.load(scale_model(2.0), cache_dir=cache, cache_mode=0o770)
    os.chmod(cache, 0o1777)  # sticky (as /tmp): others may still add entries, so it is refused too
    with pytest.raises(gert.GertError, match=r"mode 0o1777\): every user can write it .*the sticky bit does not"):
        gert.load(scale_model(2.0), cache_dir=cache)
    os.chmod(cache, 0o755)
    assert fill(cache)["cache_misses"] == 1


def test_group_shared_directory_needs_cache_mode(tmp_path, monkeypatch):
    cache = tmp_path / "c"
    cache.mkdir()
    os.chmod(cache, 0o770)
    with pytest.raises(gert.GertError, match=r"can write it, which cache_mode 0o700 does not trust.*cache_mode=0o770"):
        gert.load(scale_model(2.0), cache_dir=cache)
    assert fill(cache, cache_mode=0o770)["cache_misses"] == 1
    monkeypatch.setenv("GERT_CACHE_MODE", "0770")
    assert serve(cache)[1:] == (1, 0, [])


def _group_member() -> tuple:
    """(uid, gid) of a user other than root whose primary group has no other member but root (from pwd / grp),
    e.g. daemon: the member a group-shared cache trusts."""
    import grp
    import pwd

    from gert.core.cache_trust import group_members

    for u in pwd.getpwall():
        if u.pw_uid not in (0, os.geteuid()) and u.pw_gid != 0 and group_members(u.pw_gid) <= {u.pw_uid, 0}:
            with contextlib.suppress(KeyError):
                grp.getgrgid(u.pw_gid)
                return u.pw_uid, u.pw_gid
    pytest.skip("no user with a group of its own in the user database")


@root_only
def test_directory_of_another_user_is_refused_unless_group_shared(tmp_path):
    member, gid = _group_member()
    cache = tmp_path / "c"
    cache.mkdir()
    os.chown(cache, OTHER_UID, gid)
    os.chmod(cache, 0o700)
    with pytest.raises(gert.GertError, match=f"owner uid {OTHER_UID}.*owned by another user.*chown"):
        gert.load(scale_model(2.0), cache_dir=cache)
    os.chmod(cache, 0o2770)  # owned by a user who is not a member of the group either
    with pytest.raises(gert.GertError, match=f"owner uid {OTHER_UID}.*owned by another user"):
        gert.load(scale_model(2.0), cache_dir=cache, cache_mode=0o770)
    os.chown(cache, member, gid)  # a member's directory, writable by the group: a shared cache with cache_mode 0o770
    fill(cache, cache_mode=0o770)
    for f in os.listdir(cache):  # entries another member of the group wrote are served
        os.chown(cache / f, member, gid)
    assert serve(cache, cache_mode=0o770)[1:] == (1, 0, [])
    os.chown(cache, os.geteuid(), os.getegid())
    os.chmod(cache, 0o700)  # but not by a private cache
    y, hits, misses, msgs = serve(cache)
    assert (hits, misses) == (0, 1) and f"(uid {member})" in msgs[0] and "may not write" in msgs[0]


@pytest.mark.parametrize(
    "value, said",
    [
        (0o777, "every user"),
        ("0o660", "owner needs rwx"),
        ("abc", "octal"),
        (True, "octal"),
        (0o4700, "owner needs rwx"),
    ],
)
def test_cache_mode_is_validated(tmp_path, value, said):
    with pytest.raises(gert.GertError, match=f"cache_mode: .*{said}"):
        gert.load(scale_model(2.0), cache_dir=tmp_path / "c", cache_mode=value)
    assert not (tmp_path / "c").exists()


def test_cache_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv("GERT_CACHE_MODE", "0777")
    with pytest.raises(gert.GertError, match="GERT_CACHE_MODE: 0o777"):
        parse_mode(None)
    monkeypatch.setenv("GERT_CACHE_MODE", "2770")
    assert parse_mode(None) == 0o2770 and parse_mode("0o750") == 0o750


# ---- concurrency: nobody checks an entry whose record is not written yet ---------------------------------------------


def _waiters(path: str) -> int:
    """Blocked flock requests on ``path`` (lines "N: -> FLOCK ..." of /proc/locks naming its inode)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks") as f:
        return sum(1 for line in f if "->" in line and "FLOCK" in line and f" {dev} " in line)


def test_a_reader_waits_for_the_record_of_an_entry_being_saved(tmp_path):
    """A writer between GE's save and gert's record holds {key}.gert.lock: a second load of the model waits for it
    instead of checking an unrecorded entry (which it would take for broken, remove and compile again)."""
    cache = tmp_path / "c"
    fill(cache, 2.0)
    key = key_of(cache)
    record = cache / cache_entry.record_name(key)
    saved = record.read_bytes()
    record.unlink()  # the entry as GE left it, before the writer records it
    lock = str(cache / (key + ".gert.lock"))
    fd = os.open(lock, os.O_RDONLY)
    result: dict = {}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        reader = threading.Thread(target=lambda: result.update(out=serve(cache, 2.0)), daemon=True)
        reader.start()
        deadline = 30.0
        step = 0.01
        while _waiters(lock) == 0 and reader.is_alive() and deadline > 0:
            threading.Event().wait(step)
            deadline -= step
        assert reader.is_alive() and _waiters(lock) == 1, f"the reader did not wait for the lock: {result}"
        record.write_bytes(saved)  # the writer finishes
    finally:
        os.close(fd)
    reader.join(60)
    assert not reader.is_alive()
    y, hits, misses, msgs = result["out"]
    assert (hits, misses, msgs) == (1, 0, [])
    np.testing.assert_array_equal(y, X * 2)


# ---- the record's contents ---------------------------------------------------------------------------------------


def test_precision_settings_are_recorded_generically(tmp_path):
    cache = CompileCache.open(tmp_path, mlp_model(1), {"ge.exec.precision_mode": "force_fp32"})
    got = cache.precision_settings(
        {"ge.exec.precision_mode_v2": "origin", "ge.aicoreNum": "1|"},
        {"ge.exec.precision_mode_x": "y", "ge.inputShape": "x:1,16"},
    )
    assert got == {
        "global.ge.exec.precision_mode": "force_fp32",
        "session.ge.exec.precision_mode_v2": "origin",
        "graph.ge.exec.precision_mode_x": "y",
    }


# ---- unchanged files are not hashed again (their identity and ctime are recorded) ---------------------------------


def _tick_past(cache) -> None:
    """Wait until the file clock has moved past the ctime of every file in ``cache`` (a probe file's ctime), so that
    no file is "racy" (changed within the tick its record was written in) and a later write gets a later ctime."""
    newest = max(os.stat(os.path.join(cache, f)).st_ctime_ns for f in os.listdir(cache))
    probe = os.path.join(os.path.dirname(cache), "probe")
    for _ in range(100000):
        with open(probe, "w"):
            pass
        if os.stat(probe).st_ctime_ns > newest:
            return
    raise AssertionError("the file clock did not move")


@pytest.fixture
def hashed(monkeypatch) -> list:
    """The files gert hashes (gert.cache_entry.sha256 calls)."""
    calls: list = []
    real = cache_entry.sha256
    monkeypatch.setattr(cache_entry, "sha256", lambda path: calls.append(os.path.basename(path)) or real(path))
    return calls


def test_unchanged_entry_is_not_hashed_again(tmp_path, hashed):
    cache = tmp_path / "c"
    fill(cache)
    _tick_past(cache)
    assert serve(cache)[1:] == (1, 0, [])  # hashes what was racy at save (if anything), and records it again
    _tick_past(cache)
    hashed.clear()
    assert serve(cache)[1:] == (1, 0, [])
    assert hashed == []


def test_same_size_swap_with_its_mtime_restored_is_detected(tmp_path, hashed):
    """The shortcut trusts the ctime, which a write always moves and no one but root can set back."""
    a, b = tmp_path / "a", tmp_path / "b"
    fill(a, 2.0)
    fill(b, 3.0)
    serve(a, 2.0)  # a record with every file's signature
    om = only(a, ".om")
    assert os.path.getsize(om) == os.path.getsize(only(b, ".om"))
    _tick_past(a)
    st = os.stat(om)
    with open(only(b, ".om"), "rb") as src, open(om, "r+b") as dst:  # in place: same inode, same size
        dst.write(src.read())
    os.utime(om, ns=(st.st_atime_ns, st.st_mtime_ns))
    hashed.clear()
    y, hits, misses, msgs = serve(a, 2.0)
    np.testing.assert_array_equal(y, X * 2)
    assert (hits, misses) == (0, 1) and "changed (SHA-256" in msgs[0]
    assert os.path.basename(om) in hashed


def test_copied_cache_is_hashed_once_then_trusted_by_signature(tmp_path, hashed):
    """A copied directory (new inodes, a restore, another volume): every file is hashed and verified once, the record
    is written again with the new signatures, and later loads hash nothing."""
    fill(tmp_path / "c")
    shutil.copytree(tmp_path / "c", tmp_path / "copy")
    copy = tmp_path / "copy"
    hashed.clear()
    assert serve(copy)[1:] == (1, 0, [])
    assert sorted(hashed) == sorted(f for f in os.listdir(copy) if f.endswith((".idx", ".om")))
    _tick_past(copy)
    hashed.clear()
    assert serve(copy)[1:] == (1, 0, []) and hashed == []


def test_racy_file_is_hashed_again(tmp_path, hashed):
    """A file whose ctime is not before the record's mtime may have changed within the clock tick it was hashed in
    (as git's racily clean index entries): it is hashed again, whatever its signature says."""
    cache = tmp_path / "c"
    fill(cache)
    _tick_past(cache)
    serve(cache)
    om = only(cache, ".om")
    record = cache / cache_entry.record_name(key_of(cache))
    ctime = os.stat(om).st_ctime_ns
    os.utime(record, ns=(ctime, ctime))  # the record "written" in the .om's last tick
    hashed.clear()
    assert serve(cache)[1:] == (1, 0, [])
    assert os.path.basename(om) in hashed
