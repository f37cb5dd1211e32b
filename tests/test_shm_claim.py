"""The shared-memory regions of a gert serve killed outright are removed by the next gert serve to start, and only
those (gert_triton/shm_claim.py): a prefix whose lock a live process holds, names of other patterns, a prefix without
a lock file (a gert serve from before the lock) and symbolic links are left alone. The holder is a real other
process, killed with SIGKILL as the OOM killer would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gert_triton.shm_claim import LOCK, PrefixClaim, remove_orphans

PREFIX = "gert_4242_r0_abcdef_"
HOLDER = """
import sys, time
from gert_triton.shm_claim import PrefixClaim
claim = PrefixClaim(sys.argv[1], sys.argv[2])
print("held", flush=True)
time.sleep(600)
"""


def regions(d, prefix: str, n: int = 2) -> list:
    """Files as a server start's stubs leave them: PREFIX + generation + instance."""
    names = [f"{prefix}1_model_{i}" for i in range(n)]
    for name in names:
        (d / name).write_bytes(b"\0" * 64)
    return names


def hold(d, prefix: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, prefix, str(d)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_killed_holders_regions_go_a_live_holders_stay(tmp_path):
    dead, live = "gert_1111_r0_aaaaaa_", "gert_2222_r1_bbbbbb_"
    a, b = hold(tmp_path, dead), hold(tmp_path, live)
    try:
        regions(tmp_path, dead)
        kept = regions(tmp_path, live)
        assert remove_orphans(str(tmp_path)) == [], "a prefix whose holder lives was removed"
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        assert remove_orphans(str(tmp_path)) == [(dead, 3)]  # two regions and the lock
        assert sorted(os.listdir(tmp_path)) == sorted([*kept, live + LOCK])
    finally:
        for p in (a, b):
            p.kill()
            p.wait(10)


def test_other_names_old_prefixes_without_a_lock_and_links_are_left_alone(tmp_path):
    others = ["gert_x_r0_abcdef_1_m", "mine_1_m", "gert_1_r0_abcdef_lockx", "gert_5_r0_ABCDEF_lock"]
    for name in others:
        (tmp_path / name).write_bytes(b"x")
    old = regions(tmp_path, "gert_3333_r0_cccccc_")  # a gert serve from before the lock file: unknown, kept
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    os.symlink(target, tmp_path / f"{PREFIX}lock")  # a link where a lock file would be: not ours to judge
    assert remove_orphans(str(tmp_path)) == []
    assert set(os.listdir(tmp_path)) == {*others, *old, "target", f"{PREFIX}lock"}
    assert target.read_bytes() == b"keep"


def test_a_link_under_a_dead_prefix_is_not_followed_or_removed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "precious"
    precious.write_bytes(b"keep")
    shm = tmp_path / "shm"
    shm.mkdir()
    holder = hold(shm, PREFIX)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    os.symlink(precious, shm / f"{PREFIX}1_model_0")
    assert remove_orphans(str(shm)) == [(PREFIX, 1)]  # the lock only
    assert precious.read_bytes() == b"keep" and os.path.islink(shm / f"{PREFIX}1_model_0")


def test_release_removes_its_own_regions_and_lock_only(tmp_path):
    claim = PrefixClaim(PREFIX, str(tmp_path))
    assert os.listdir(tmp_path) == [PREFIX + LOCK]  # no temporary name left behind
    regions(tmp_path, PREFIX)
    other = regions(tmp_path, "gert_9_r0_dddddd_")
    claim.release()
    claim.release()  # twice: nothing more
    assert sorted(os.listdir(tmp_path)) == sorted(other)


def test_a_prefix_not_of_gert_serves_pattern_is_refused(tmp_path):
    for bad in ("mine_", "gert_1_r0_abcdef", "../gert_1_r0_abcdef_", "gert_1_r0_abcdeF_"):
        with pytest.raises(ValueError, match="not of gert serve's pattern"):
            PrefixClaim(bad, str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_claim_where_there_is_no_shm_directory_raises_oserror_for_gert_serve_to_report(tmp_path):
    """gert serve catches OSError from the claim and serves on without it (gert_triton/supervisor.py)."""
    with pytest.raises(OSError):
        PrefixClaim(PREFIX, str(tmp_path / "missing"))
    assert remove_orphans(str(tmp_path / "missing")) == []
