"""The ``host_memory`` budget: how many bytes a Model's static graphs (policy auto's hot sizes) may hold.

A static graph is a speed-up, never needed for a correct answer (the dynamic graph serves any size), so the tiers
(gert/core/tiers.py) admit one only while the Model's static graphs stay within this budget. A graph's bytes are what
GE's compile summary reports for it (CompiledGraphSummary: const memory, the weights, plus feature memory, its
workspace), once per stream it is loaded on. The default is a share of the machine's memory (the cgroup's limit where
one is set, as in a container): DEFAULT_SHARE of it per Model.
"""

from __future__ import annotations

import os
import re
from typing import Optional, Union

from gert.errors import GertError

# The share of the machine's memory a Model's static graphs may hold by default: a server that loads a few models,
# and the workers of a CI machine or laptop, stay well inside the machine.
DEFAULT_SHARE = 0.125
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory() -> int:
    """Physical memory in bytes, or the cgroup's memory limit where one is set and lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def default_budget() -> int:
    """The default host_memory of a Model: DEFAULT_SHARE of machine_memory()."""
    return int(machine_memory() * DEFAULT_SHARE)


def parse(value: Union[int, str, None]) -> int:
    """Bytes from ``host_memory``: an int >= 0, or a string such as "1.5GB", "512MB", "1073741824" (units: B, KB, MB,
    GB, TB, powers of 1024); None: default_budget(). GertError naming the setting otherwise."""
    if value is None:
        return default_budget()
    if isinstance(value, bool):
        raise GertError(f"host_memory must be a number of bytes (an int >= 0 or a string like '2GB'), got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise GertError(f"host_memory must be >= 0 bytes, got {value}")
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", value)
        unit = m.group(2).lower() if m else None
        if m is not None and unit in _UNITS:
            return int(float(m.group(1)) * _UNITS[unit])
    raise GertError(
        f"host_memory must be a number of bytes (an int >= 0 or a string like '2GB', '512MB'), got {value!r}"
    )


def graph_bytes(summary) -> int:
    """A compiled graph's bytes from GE's summary (const + feature memory); 0 for what the summary cannot tell."""
    total = 0
    for read in (lambda: summary.const_memory_size, lambda: summary.feature_memory_size):
        try:
            total += int(read())
        except (GertError, TypeError, ValueError):
            pass
    return total


def label(n: Optional[int]) -> str:
    """Bytes for people: '12.3 MB'."""
    if n is None:
        return "-"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
