"""The tritonserver arguments `gert serve` runs with: the user's (after ``--``) as they are, plus what supervision
needs, and what supervision the user's own choices leave out.

Why: to reload a model whose Python stub died, gert needs Triton's model-control API, i.e. explicit mode. Without a
``--model-control-mode`` of the user's, gert runs ``explicit`` with ``--load-model=*`` (Triton loads the whole
repository at start and exits if a model fails to load, as in its default ``none`` mode) and restricts the
model-repository API to a header only gert knows, so clients can no more load or unload models than in ``none``
mode. A mode of the user's is respected; ``none`` and ``poll`` allow no per-model reload (a dead stub restarts the
whole server instead).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from gert_triton.serve_policy import DRAIN_TIMEOUT_S

REPO_API = "model-repository"
SUPERVISOR_HEADER = "gert-supervisor-key"


def option_values(args: Sequence[str], name: str) -> List[str]:
    """Every value of ``--name=V`` or ``--name V`` in ``args`` (tritonserver accepts both spellings)."""
    values, flag = [], f"--{name}"
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            values.append(a[len(flag) + 1 :])
        elif a == flag and i + 1 < len(args):
            values.append(args[i + 1])
    return values


def without_option(args: Sequence[str], name: str) -> List[str]:
    """``args`` without ``--name=V`` / ``--name V``."""
    out, skip, flag = [], False, f"--{name}"
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def restricted_header(values: Sequence[str], api: str = REPO_API) -> Optional[Tuple[str, str]]:
    """The ``(header, value)`` a ``--http-restricted-api=API[,API...]:KEY=VALUE`` puts on ``api``, if any."""
    for v in values:
        apis, sep, kv = v.partition(":")
        key, eq, val = kv.partition("=")
        if sep and eq and api in [a.strip() for a in apis.split(",")]:
            return key.strip(), val
    return None


def shm_prefix_of(args: Sequence[str]) -> Optional[str]:
    """The user's ``--backend-config=python,shm-region-prefix-name=P``, if any."""
    for v in option_values(args, "backend-config"):
        backend, _, setting = v.partition(",")
        key, _, value = setting.partition("=")
        if backend == "python" and key == "shm-region-prefix-name":
            return value
    return None


def new_shm_prefix(replica: int) -> str:
    """A prefix of the Python backend's shared-memory regions no other server on this host uses: gert serve's pid,
    the replica and a random part (two containers may see the same pid). A server start appends its generation."""
    return f"gert_{os.getpid()}_r{replica}_{secrets.token_hex(3)}_"


@dataclass
class Plan:
    """What gert serve passes to tritonserver and what its supervision can do with it."""

    args: List[str]
    control: str  # "gert" (gert's explicit mode), "explicit", "none" or "poll" (the user's)
    repo_header: Optional[Tuple[str, str]]
    shm_prefix: Optional[str]  # the prefix gert chose (None: the user's own, kept)
    exit_timeout: int
    http: bool = True  # gert talks to Triton over its HTTP endpoint
    notes: List[str] = field(default_factory=list)

    @property
    def can_reload(self) -> bool:
        """Whether a model can be reloaded alone (Triton's load / unload API)."""
        return self.control in ("gert", "explicit") and self.http

    def with_generation(self, generation: int) -> List[str]:
        """The arguments of one server start: gert's shm prefix gets the start's number (its regions are removed
        when that server is gone, without touching the next one's)."""
        if self.shm_prefix is None:
            return list(self.args)
        return [*self.args, f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}{generation}_"]


def plan(user_args: Sequence[str], drain_timeout: int = DRAIN_TIMEOUT_S, replica: int = 0) -> Plan:
    """The arguments for tritonserver after the user's ``user_args``; see the module's docstring."""
    args = list(user_args)
    notes: List[str] = []
    modes = option_values(args, "model-control-mode")
    http = not any(v.lower() in ("false", "0", "off") for v in option_values(args, "allow-http"))
    extra: List[str] = []
    header = restricted_header(option_values(args, "http-restricted-api"))
    if not modes:
        control = "gert"
        if option_values(args, "load-model"):
            notes.append(
                "--load-model without --model-control-mode is ignored by tritonserver: gert serve loads "
                "the whole repository, as tritonserver would"
            )
            args = without_option(args, "load-model")
        extra += ["--model-control-mode=explicit", "--load-model=*"]
        if header is None:
            header = (SUPERVISOR_HEADER, secrets.token_hex(16))
            extra.append(f"--http-restricted-api={REPO_API}:{header[0]}={header[1]}")
        if restricted_header(option_values(args, "grpc-restricted-protocol")) is None:
            extra.append(f"--grpc-restricted-protocol={REPO_API}:{header[0]}={header[1]}")
    else:
        control = modes[-1].lower()
        if control not in ("explicit", "none", "poll"):
            control = "none"
        if control != "explicit":
            notes.append(
                f"--model-control-mode={modes[-1]}: a model cannot be reloaded alone, so a dead Python "
                "stub restarts the whole server (every model goes down meanwhile)"
            )
        else:
            notes.append(
                "--model-control-mode=explicit (yours): after a server restart gert serve loads again the "
                "models that were loaded before it, from the repository's files (a config a client passed "
                "with its load request is not kept)"
            )
    if not http:
        notes.append(
            "--allow-http=false: gert serve cannot ask tritonserver about its models, so it restarts a "
            "server that exits but does not see a dead stub, and its readiness only says the process runs"
        )
    timeouts = option_values(args, "exit-timeout-secs")
    exit_timeout = int(timeouts[-1]) if timeouts and timeouts[-1].isdigit() else drain_timeout
    if not timeouts:
        extra.append(f"--exit-timeout-secs={drain_timeout}")
    prefix = None
    if shm_prefix_of(args) is None:
        prefix = new_shm_prefix(replica)
    return Plan(extra + args, control, header, prefix, exit_timeout, http, notes)
