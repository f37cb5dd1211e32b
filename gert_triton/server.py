"""Run the real tritonserver (bundled in the nvidia-pytriton wheel) for a model repository.

The wheel's backends/ folder has no Python stub: a copy of it gets the stub of the running Python, and the stub gets
this interpreter's import path (gert_triton.stub_env), so the server's Python models run in the environment gert
runs in, whether or not it is activated and whatever the working directory.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Callable, Optional, Sequence

from gert.errors import GertError
from gert_triton.stub_env import write_prefix


def pytriton_root() -> Optional[str]:
    spec = importlib.util.find_spec("pytriton")  # found, not imported: pytriton's own API is not used
    if spec is None or not spec.submodule_search_locations:
        return None
    root = os.path.join(list(spec.submodule_search_locations)[0], "tritonserver")
    return root if os.path.isdir(root) else None


def find_tritonserver(path: Optional[str] = None) -> str:
    """--tritonserver PATH, else $GERT_TRITONSERVER, else the binary in the nvidia-pytriton wheel."""
    for cand in (path, os.environ.get("GERT_TRITONSERVER")):
        if cand:
            if not (os.path.isfile(cand) and os.access(cand, os.X_OK)):
                raise GertError(f"tritonserver {cand!r} is not an executable file")
            return cand
    root = pytriton_root()
    if root is None:
        raise GertError("no tritonserver found: pip install 'gert[triton]' (nvidia-pytriton), or pass --tritonserver")
    return os.path.join(root, "bin", "tritonserver")


def prepare_backends(server_root: str, dest: Optional[str] = None) -> str:
    """A backends folder for the server at ``server_root`` (holding bin/ and backends/): its own when the Python
    backend there has a stub already; else a copy with the stub of the running Python added (the nvidia-pytriton
    wheel ships one stub per Python version beside backends/)."""
    python_dir = os.path.join(server_root, "backends", "python")
    if not os.path.isdir(python_dir):
        raise GertError(f"no Triton Python backend at {python_dir}")
    if os.path.isfile(os.path.join(python_dir, "triton_python_backend_stub")):
        return os.path.join(server_root, "backends")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = os.path.join(server_root, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        raise GertError(f"the Triton server has no Python backend stub for Python {version} ({stub})")
    dest = dest or tempfile.mkdtemp(prefix="gert-triton-backends-")
    target = os.path.join(dest, "python")
    if os.path.isdir(target):
        shutil.rmtree(target)
    shutil.copytree(python_dir, target)
    shutil.copy2(stub, os.path.join(target, "triton_python_backend_stub"))
    return dest


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TritonServer:
    """A tritonserver process serving ``repo`` on loopback ports; stop() (or the context manager) ends it."""

    def __init__(
        self,
        repo: str,
        http_port: Optional[int] = None,
        grpc_port: Optional[int] = None,
        metrics_port: Optional[int] = None,
        tritonserver: Optional[str] = None,
        extra_args: Sequence[str] = (),
        log_path: Optional[str] = None,
        address: str = "127.0.0.1",
        on_line: Optional[Callable[[bytes], None]] = None,
    ):
        self.repo = os.path.abspath(repo)
        self.address = address
        if not os.path.isdir(self.repo):
            raise GertError(f"model repository {repo!r} is not a directory")
        self.binary = find_tritonserver(tritonserver)
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.extra_args = list(extra_args)
        self.log_path = log_path
        self.backends: Optional[str] = None
        self.stub_env: Optional[str] = None  # the prefix the stub's interpreter starts from (stub_env)
        self.process: Optional[subprocess.Popen] = None
        self.on_line = on_line  # without log_path: every line of the server's output, read by a thread
        self._log = None
        self._reader: Optional[threading.Thread] = None

    def command(self) -> list:
        return [
            self.binary,
            f"--model-repository={self.repo}",
            f"--backend-directory={self.backends}",
            f"--http-address={self.address}",
            f"--grpc-address={self.address}",
            f"--metrics-address={self.address}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            *(
                [] if any(a.startswith("--exit-timeout-secs") for a in self.extra_args) else ["--exit-timeout-secs=10"]
            ),  # below stop()'s wait, so a stop ends cleanly
            *self.extra_args,
        ]

    def start(self) -> "TritonServer":
        root = os.path.dirname(os.path.dirname(os.path.realpath(self.binary)))
        self.backends = prepare_backends(root)
        self._own_backends = os.path.realpath(self.backends) != os.path.realpath(os.path.join(root, "backends"))
        self.stub_env = write_prefix()
        out = None
        if self.log_path:
            self._log = open(self.log_path, "wb")
            out = self._log
        elif self.on_line is not None:
            out = subprocess.PIPE
        self.process = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
            env=self.environment(root),
        )
        if out is subprocess.PIPE:
            self._reader = threading.Thread(
                target=self._read_output, args=(self.process.stdout,), name="tritonserver-output", daemon=True
            )
            self._reader.start()
        return self

    def _read_output(self, pipe) -> None:
        """Hand each output line to on_line until the server (and every stub, which inherit the pipe) closed it."""
        with pipe:
            for line in iter(pipe.readline, b""):
                try:
                    self.on_line(line)
                except Exception:  # a consumer's failure must not stop the server's output from draining
                    pass

    def environment(self, server_root: str) -> dict:
        """The server's environment: the copied stub finds the wheel's bundled libraries (its RPATH is relative to
        where the wheel put it) and this Python's libpython, and its interpreter gets this one's import path (the
        prefix written by ``stub_env`` comes first on PATH)."""
        import sysconfig

        env = dict(os.environ)
        if self.stub_env:
            env["PATH"] = os.pathsep.join(
                [os.path.join(self.stub_env, "bin")] + ([env["PATH"]] if env.get("PATH") else [])
            )
        dirs = [
            os.path.join(os.path.dirname(os.path.dirname(server_root)), "nvidia_pytriton.libs"),
            sysconfig.get_config_var("LIBDIR") or "",
        ]
        dirs = [d for d in dirs if d and os.path.isdir(d)]
        if env.get("LD_LIBRARY_PATH"):
            dirs.append(env["LD_LIBRARY_PATH"])
        env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs)
        return env

    def url(self, kind: str = "http") -> str:
        """host:port a client on this machine reaches the server at (loopback when it listens on every address)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "[::]": "[::1]"}.get(self.address, self.address)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.http_port if kind == 'http' else self.grpc_port}"

    def wait_ready(self, timeout: float = 120.0, path: str = "/v2/health/ready") -> None:
        """Poll the HTTP health endpoint until it answers 200; raise if the server exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise GertError(
                    f"tritonserver exited with code {self.process.returncode if self.process else None}"
                    + (f"; log: {self.log_path}" if self.log_path else "")
                )
            try:
                with urllib.request.urlopen(f"http://{self.url()}{path}", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise GertError(
            f"tritonserver was not ready within {timeout:.0f} s" + (f"; log: {self.log_path}" if self.log_path else "")
        )

    def stop(self, timeout: float = 30.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; removes the backends copy."""
        p = self.process
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        if self._log:
            self._log.close()
            self._log = None
        if self.backends and getattr(self, "_own_backends", False):
            shutil.rmtree(self.backends, ignore_errors=True)
        self.backends = None
        if self.stub_env:
            shutil.rmtree(self.stub_env, ignore_errors=True)
            self.stub_env = None
        return p.returncode if p else None

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
