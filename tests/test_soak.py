"""The soak benchmark's short mode (issue 13, item 5): a few seconds through gert_triton on the real server and in
process on gert.Model, with injected execute faults and bad requests mixed in; only those fail, every other answer
is correct, and the stub's / the process's RSS, threads and fds stay flat. The long run's figures are in
benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _helpers import REPO
from gert_triton.server import pytriton_root

pytestmark = [
    pytest.mark.hostnpu_only,
    pytest.mark.skipif(pytriton_root() is None, reason="needs nvidia-pytriton (pip install -e '.[triton]')"),
]


def test_soak_short(tmp_path):
    out = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GERT_")}
    p = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "soak.py"), "--short", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(out.read_text())
    for part in ("triton", "model"):
        assert r[part]["passed"] and not r[part]["problems"], r[part]
        assert r[part]["faulted"] > 0 and r[part]["bad_rejected"] > 0 and r[part]["ok"] > 10 * r[part]["faulted"]
    assert r["model"]["faults_fired"] == r["model"]["faulted"]
