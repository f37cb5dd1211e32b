"""The few calls of Triton's HTTP API `gert serve`'s supervisor makes: liveness, the repository index, a model's
config, load and unload (with the header that opens the model-repository API gert serve restricted)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote
from typing import List, Optional, Tuple

from gert.errors import GertError


class TritonHTTP:
    """Calls to one server at ``hostport`` (``127.0.0.1:8000``)."""

    def __init__(self, hostport: str, header: Optional[Tuple[str, str]] = None):
        self.base = f"http://{hostport}"
        self.headers = {header[0]: header[1]} if header else {}

    def _call(self, method: str, path: str, body: Optional[bytes] = None, timeout: float = 5.0) -> bytes:
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                text = json.loads(text).get("error", text)
            except (ValueError, AttributeError):
                pass
            raise GertError(f"tritonserver {method} {path}: HTTP {e.code}: {text}") from None

    def live(self, timeout: float = 2.0) -> bool:
        try:
            self._call("GET", "/v2/health/live", timeout=timeout)
            return True
        except (OSError, GertError):
            return False

    def model_ready(self, model: str, timeout: float = 2.0) -> bool:
        """Triton's ``/v2/models/M/ready``: 200 while a version of the model is READY (it stays 200 with a dead stub)."""
        try:
            self._call("GET", f"/v2/models/{quote(model, safe='')}/ready", timeout=timeout)
            return True
        except (OSError, GertError):
            return False

    def index(self, timeout: float = 5.0) -> List[dict]:
        """[{name, version, state, reason}, ...]: every model of the repository (state empty: never loaded)."""
        return json.loads(self._call("POST", "/v2/repository/index", b"{}", timeout) or b"[]")

    def config(self, model: str, timeout: float = 5.0) -> dict:
        return json.loads(self._call("GET", f"/v2/models/{quote(model, safe='')}/config", timeout=timeout))

    def unload(self, model: str, timeout: float = 60.0) -> None:
        self._call("POST", f"/v2/repository/models/{quote(model, safe='')}/unload", b"{}", timeout)

    def load(self, model: str, timeout: float = 600.0) -> None:
        """Returns once Triton loaded it (warmup included); raises GertError with Triton's reason otherwise."""
        self._call("POST", f"/v2/repository/models/{quote(model, safe='')}/load", b"{}", timeout)


def model_states(index: List[dict]) -> dict:
    """model -> (state, reason): READY when any version is; else the first version's."""
    out: dict = {}
    for e in index:
        name, state, reason = e.get("name", ""), e.get("state", ""), e.get("reason", "")
        if name not in out or state == "READY":
            out[name] = (state, reason)
    return out


def instance_names(config: dict) -> set:
    """The instance names Triton gives a model's instance groups (``GROUP_I``), from its config."""
    names = set()
    for g in config.get("instance_group", []) or []:
        count = int(g.get("count", 1) or 1)
        gpus = g.get("gpus") or [None]
        for _ in gpus:
            names.update(f"{g.get('name', '')}_{i}" for i in range(count))
    return names
