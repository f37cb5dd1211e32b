"""The README's example scripts run and say what they check (the served example and examples/client.py are in
test_triton_e2e.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _helpers import RUNTIME

pytestmark = RUNTIME
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("script, says", [
    ("quickstart.py", ["futures agree: True", "batch of 20 (split over the 8 gear): (20, 4)"]),
    ("runtime_quickstart.py", ["host function: copies done", "round trip of 262144 bytes"]),
])
def test_example_script(script, says):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    for line in says:
        assert line in r.stdout, r.stdout
