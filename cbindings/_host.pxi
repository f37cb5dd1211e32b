# Backend identity and the host NPU's counters.
from backend cimport (GERT_BACKEND_NAME, GERT_HAS_HOST_NPU, gertHostCounters, gertHostGetCounters,
                      gertHostResetCounters, gertHostSetSpinMicros, gertHostGetSpinMicros)


def backend() -> str:
    """'hostnpu' (the CPU implementation built in) or 'cann' (linked against a real toolkit)."""
    return GERT_BACKEND_NAME.decode()


cdef int _require_host_npu(str what) except -1:
    if not GERT_HAS_HOST_NPU:
        raise _errors.GertError(f"{what} exists only on the host NPU backend; this build uses '{backend()}'")
    return 0


def host_counters() -> dict:
    """Host NPU counters: bytes copied per memcpy kind, stream tasks run, device memory in use and peak."""
    _require_host_npu("host_counters()")
    cdef gertHostCounters c
    gertHostGetCounters(&c)
    return {
        "bytes_h2d": c.bytes_h2d, "bytes_d2h": c.bytes_d2h, "bytes_d2d": c.bytes_d2d, "bytes_h2h": c.bytes_h2h,
        "tasks": c.tasks, "device_memory_in_use": c.device_memory_in_use,
        "device_memory_peak": c.device_memory_peak, "streams_alive": c.streams_alive,
    }


def reset_host_counters() -> None:
    """Zero the byte and task counters; the memory peak restarts from what is in use now."""
    _require_host_npu("reset_host_counters()")
    gertHostResetCounters()


def host_spin_micros(value=None) -> int:
    """Get (and with ``value``, set) how long host NPU hand-offs spin before blocking, in microseconds."""
    _require_host_npu("host_spin_micros()")
    if value is not None:
        if int(value) < 0:
            raise ValueError(f"host_spin_micros: value must be >= 0, got {value}")
        gertHostSetSpinMicros(int(value))
    return gertHostGetSpinMicros()
