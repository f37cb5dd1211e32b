"""What the core asks of the binding beyond CANN's API: registered by the binding's Python side, so that a build
against a real CANN toolkit leaves the core as it is (docs/architecture.md, "Layers").

The defaults are what a device does: work enqueued on a stream runs there whatever the enqueuing thread does, and
GE only logs whether a compile hit its compile cache. The host NPU (gert/hostnpu/) registers its own at import.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, ContextManager, Optional


def _device_runs_it(stream_handle: int) -> ContextManager[None]:
    return contextlib.nullcontext()


def _not_reported() -> Optional[str]:
    return None


@dataclass(frozen=True)
class BindingHooks:
    """``inline(stream_handle)``: a context within which the stream's work enqueued by this thread may run on it
    (for a thread that enqueues a request's work and then only waits for it). ``compile_cache_result()``: "hit" or
    "miss" of this thread's last compile, or None where the backend does not report it (real GE)."""

    inline: Callable[[int], ContextManager[None]] = _device_runs_it
    compile_cache_result: Callable[[], Optional[str]] = _not_reported


_hooks = BindingHooks()


def register(hooks: BindingHooks) -> None:
    """Install the binding's hooks (gert.hostnpu calls this when the build has the host NPU's features)."""
    global _hooks
    _hooks = hooks


def current() -> BindingHooks:
    """The registered hooks (the defaults until a binding registers its own)."""
    return _hooks
