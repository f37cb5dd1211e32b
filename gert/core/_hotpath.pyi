"""Types of gert.core._hotpath (gert/core/_hotpath.pyx, compiled): the request pipeline's hot loop. Checked against
the built module by mypy's stubtest (tests/test_stubs.py)."""

from typing import Any, Callable, Dict, List, Optional

import numpy as np
from typing_extensions import disjoint_base

_KEPT: int

@disjoint_base
class Prepared:
    """A request signature's run prepared on one stream (its FusedCall), with counters kept in C."""

    def __init__(
        self,
        worker: Any,
        call: Any,
        use_limits: Optional[Callable[[], None]],
        out_names: tuple,
        out_shapes: tuple,
        out_dtypes: tuple,
        label: str,
        real_elements: int,
        padded_elements: int,
        batched: bool,
        on_hit: Optional[Callable[[], None]] = None,
        rows: int = 0,
    ) -> None: ...
    @property
    def worker(self) -> Any: ...
    @property
    def call(self) -> Any: ...
    @property
    def use_limits(self) -> Optional[Callable[[], None]]: ...
    @property
    def out_names(self) -> tuple: ...
    @property
    def out_shapes(self) -> tuple: ...
    @property
    def out_dtypes(self) -> tuple: ...
    @property
    def label(self) -> str: ...
    @property
    def real_elements(self) -> int: ...
    @property
    def padded_elements(self) -> int: ...
    @property
    def batched(self) -> bool: ...
    @property
    def rows(self) -> int: ...
    @property
    def on_hit(self) -> Optional[Callable[[], None]]: ...
    @property
    def valid(self) -> bool: ...
    @property
    def hits(self) -> int: ...
    @property
    def busy_ns(self) -> int: ...
    @property
    def merged(self) -> int: ...
    @property
    def wait_ns(self) -> int: ...
    @property
    def waited(self) -> int: ...

@disjoint_base
class HotPath:
    """A Model's compiled hot path: ``run`` / ``run_list`` answer a signature that ran before in one call, or
    return None for the Python path."""

    enabled: bool
    batch_limit: int
    lists: bool
    def __init__(
        self,
        names: Any,
        queue: Any,
        on_error: Callable[[Any, BaseException], Any],
        on_idle: Callable[[], Any],
        trace: Any,
        count: Callable[[Prepared, int, int, float, float], Any],
        enabled: bool = True,
        batch_limit: int = 0,
        lists: bool = False,
        out_axes: Optional[Dict[str, Optional[int]]] = None,
        acquire: Optional[Callable[[Any], Any]] = None,
        alone: Optional[Callable[[int], bool]] = None,
    ) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def suspended(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def size(self) -> int: ...
    def run(self, inputs: Any) -> Optional[Dict[str, np.ndarray]]: ...
    def run_list(self, requests: Any) -> Optional[List[Dict[str, np.ndarray]]]: ...
    def offer(
        self,
        worker: Any,
        signature: tuple,
        sizes: dict,
        call: Any,
        use_limits: Optional[Callable[[], None]],
        out_names: tuple,
        out_shapes: tuple,
        out_dtypes: tuple,
        label: str,
        real_elements: int,
        padded_elements: int,
        on_hit: Optional[Callable[[], None]] = None,
    ) -> None: ...
    def wants(self, signature: tuple, worker: Any) -> bool: ...
    def add(self, signature: tuple, prepared: Prepared) -> None: ...
    def forget(self, worker: Any = None) -> None: ...
    def suspend(self) -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...
    def flush(self) -> None: ...
