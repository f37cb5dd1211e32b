# The host NPU's own introspection: counters and hand-off spin time (gert_host/host_npu.h). Host NPU only: compiled
# into gert._cann when the host NPU is built in, into gert._hostnpu against the host NPU packaged as a toolkit.
# Python reaches these through gert.hostnpu, which says clearly when a build has none.
from libc.stdint cimport uint32_t
from backend cimport gertHostCounters, gertHostGetCounters, gertHostResetCounters, gertHostSetSpinMicros, gertHostGetSpinMicros


def host_counters() -> dict:
    """Host NPU counters: bytes copied per memcpy kind, stream tasks run, device memory in use and peak."""
    cdef gertHostCounters c
    gertHostGetCounters(&c)
    return {
        "bytes_h2d": c.bytes_h2d, "bytes_d2h": c.bytes_d2h, "bytes_d2d": c.bytes_d2d, "bytes_h2h": c.bytes_h2h,
        "tasks": c.tasks, "device_memory_in_use": c.device_memory_in_use,
        "device_memory_peak": c.device_memory_peak, "streams_alive": c.streams_alive,
    }


def reset_host_counters() -> None:
    """Zero the byte and task counters; the memory peak restarts from what is in use now."""
    gertHostResetCounters()


def host_spin_micros(value=None) -> int:
    """Get (and with ``value``, set) how long host NPU hand-offs spin before blocking, in microseconds."""
    if value is not None:
        if int(value) < 0:
            raise ValueError(f"host_spin_micros: value must be >= 0, got {value}")
        gertHostSetSpinMicros(int(value))
    return gertHostGetSpinMicros()
