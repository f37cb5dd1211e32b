"""gert_triton.stub_env: the interpreter Triton's stub embeds gets the import path of the Python that runs gert.

Checked here without a server, the way the stub starts Python: isolated (-I: no PYTHONPATH, no user site), from /,
finding its prefix through PATH. The real-server test is
test_triton_e2e.py::test_gert_serve_from_a_venv_that_is_not_activated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from gert_triton import stub_env


def test_import_path_leaves_out_the_script_folder_and_keeps_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert stub_env.import_path([str(b), "", str(a), str(b), str(tmp_path / "missing")]) == [str(b), str(a)]
    assert all(os.path.isabs(p) for p in stub_env.import_path())


def test_prefix_gives_an_isolated_interpreter_this_import_path(tmp_path):
    prefix = stub_env.write_prefix(str(tmp_path / "prefix"))
    try:
        env = {"PATH": os.path.join(prefix, "bin") + ":/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
        code = "import json, sys, gert_triton, onnxruntime; print(json.dumps([sys.path, sys.prefix]))"
        r = subprocess.run(
            [os.path.join(prefix, "bin", "python3"), "-I", "-c", code],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        path, sys_prefix = json.loads(r.stdout)
        assert sys_prefix == prefix
        want = stub_env.import_path()
        assert path[: len(want)] == want, "this interpreter's import path comes first, in its order"
        if sys.prefix != sys.base_prefix and not os.path.exists(os.path.join(sys.prefix, "lib", "site.py")):
            import site

            base_sp = [d for d in site.getsitepackages() if not d.startswith(sys.prefix)]
            assert not set(base_sp) & set(path), "the base interpreter's site-packages stay out of a venv's stub"
    finally:
        shutil.rmtree(prefix)


def test_prefix_is_what_the_server_environment_puts_first_on_path(tmp_path):
    from gert_triton.server import TritonServer

    s = TritonServer(str(tmp_path))
    s.stub_env = stub_env.write_prefix(str(tmp_path / "prefix"))
    env = s.environment(str(tmp_path))
    assert env["PATH"].split(os.pathsep)[0] == os.path.join(s.stub_env, "bin")
    assert os.path.realpath(os.path.join(s.stub_env, "bin", "python3")) == os.path.realpath(
        getattr(sys, "_base_executable", sys.executable)
    )
