"""The host NPU's own features, which CANN does not have: counters, spin time, fault injection, its provider.

Where they live depends on the build: in ``gert._cann`` when the host NPU is built in (the default build); in
``gert._hostnpu`` when gert is built against the host NPU packaged as a toolkit (cbindings/hostnpu/build_toolkit.py);
nowhere when gert is built against a real CANN toolkit, where calling one raises GertError saying so. Importing this
module (``import gert`` does) finds that module and registers with the core (gert/core/hooks.py) what the core asks
of the host NPU beyond CANN's API: running a waiting thread's work inline, and the compile cache's hit / miss. The
compute provider is ``ort_provider.py``; gert/_binding.py gives it to the host NPU at import (set_host_provider).

To add one: implement it in cbindings/_host.pxi, then add one ``name = _host_only("name")`` line below.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Callable

from gert import _cann
from gert.core import hooks
from gert.errors import GertError


# Imported by gert/_binding.py before it registers into gert._cann what the binding needs: nothing here uses those.
def _find() -> ModuleType | None:
    if _cann.backend() == "hostnpu":  # built in: _cann_hostnpu.pyx
        return _cann
    try:
        return importlib.import_module("gert._hostnpu")
    except ModuleNotFoundError as e:
        if e.name != "gert._hostnpu":
            raise
        return None  # a real toolkit: gert works without it


_module: ModuleType | None = _find()


def available() -> bool:
    """Whether this build has the host NPU's own features (False on a real CANN toolkit)."""
    return _module is not None


def _host_only(name: str) -> Callable:
    """A function that calls ``name`` of the module that has the host NPU's features, or explains it has none."""

    def call(*args, **kwargs):
        impl = getattr(_module, name, None) if _module is not None else None
        if impl is None:
            raise GertError(
                f"gert.{name}() is a host NPU feature; this gert is built against the CANN toolkit at "
                f"{_cann.toolkit_root() or '?'}, which has none (gert.hostnpu.available() is False)"
            )
        return impl(*args, **kwargs)

    impl = getattr(_module, name, None) if _module is not None else None
    call.__name__ = call.__qualname__ = name
    call.__doc__ = impl.__doc__ if impl is not None else f"{name}: host NPU only (absent from this build)."
    return call


host_counters = _host_only("host_counters")
reset_host_counters = _host_only("reset_host_counters")
host_spin_micros = _host_only("host_spin_micros")
host_inline_launch = _host_only("host_inline_launch")
host_provider = _host_only("host_provider")
set_host_provider = _host_only("set_host_provider")
host_executables = _host_only("host_executables")
_inject_fault = _host_only("inject_fault")
clear_faults = _host_only("clear_faults")
last_compile_cache = _host_only("last_compile_cache")
compile_option = _host_only("compile_option")
model_bytes_held = _host_only("model_bytes_held")


# the binding's inject_fault (its docstring is this one's), the device checked here against the runtime's devices
def inject_fault(*args: Any, device: int = 0, **kwargs: Any) -> None:
    if available():  # the binding takes the device as it is: it may be built without the runtime's device count
        n = _cann.device_count()
        if not 0 <= device < n:
            raise ValueError(f"inject_fault: device {device} does not exist; there are {n}")
    _inject_fault(*args, device=device, **kwargs)


inject_fault.__doc__ = _inject_fault.__doc__


@contextlib.contextmanager
def inline(stream_handle: int) -> Iterator[None]:
    """Within the block, once the stream is idle, the host NPU runs the work this thread enqueues on it here, in
    order, instead of handing it to the stream's worker thread: for a thread that enqueues a request's work and then
    only waits for it. Nothing on a real CANN toolkit (a device runs the work whatever the thread does)."""
    begin = getattr(_module, "stream_begin_inline", None) if _module is not None else None
    if begin is None:
        yield
        return
    begin(stream_handle)
    try:
        yield
    finally:
        _module.stream_end_inline(stream_handle)


def _compile_cache_result() -> str | None:
    """Whether this thread's last compile hit the compile cache, where the build reports it (else None)."""
    return last_compile_cache() if available() else None


hooks.register(hooks.BindingHooks(inline=inline, compile_cache_result=_compile_cache_result))


def without_arena(model: bytes, model_dir: str = "") -> None:
    """Let the host NPU's sessions of ``model`` take their intermediates from the heap instead of an arena (what
    ONNX Runtime's SessionOptions.enable_cpu_mem_arena = False asks; gert.InferenceSession passes it on). Nothing on
    a real CANN toolkit (GE manages the device's memory)."""
    if available():
        host_provider().without_arena(model, model_dir)  # model_dir: of a model loaded by path (external data)


def memory_report() -> dict:
    """Where the host NPU's bytes go (benchmarks/bench_memory.py): its ONNX Runtime sessions per model (each holds
    its own optimized copy of the model's weights) and thread count, the ModelProtos kept for shape inference (bytes
    per model digest: skeletons without the weights, gert/core/skeleton.py), and the emulated device's memory:
    ``device_in_use`` / ``device_peak`` the aclrtMalloc'd buffers, ``device_used`` what aclrtGetMemInfo reports in
    use (the buffers and the loaded models' weights, each model once: LoadGraph in cbindings/hostnpu/ge_session.cpp)."""
    import collections

    models: dict = {}
    for digest, size, threads, _overrides, spin in host_provider().sessions():
        m = models.setdefault(
            digest.hex()[:12],
            {"digest": digest.hex()[:12], "model_bytes": size, "sessions": 0, "by_threads": collections.Counter()},
        )
        m["sessions"] += 1
        m["by_threads"][f"{threads}{' spinning' if spin else ''}"] += 1
    counters = host_counters()
    info = _cann.memory_info(0)
    parsed = {digest.hex()[:12]: size for digest, size in host_provider().parsed_models()}
    return {
        "models": [dict(m, by_threads=dict(m["by_threads"])) for m in models.values()],
        "parsed_models": parsed,
        "device_in_use": counters["device_memory_in_use"],
        "device_peak": counters["device_memory_peak"],
        "device_used": info.used,
        "device_total": info.total,
    }
