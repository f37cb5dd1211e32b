"""A stream's graph table: the stream, its GE Session and the graphs loaded in it, built, installed, evicted and
released through one owner, so that a device recovery, an out-of-memory retry, a background compile and close()
never leave a graph of a retired Session installed or a Session closed under a compile (gert.core.executor.Worker runs
requests on it; gert.core.tiers, gert.core.recovery and Model.warmup change graphs only through it).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from gert._cann import Graph, Session, Stream
from gert.core.compile_cache import compile_graph
from gert.core.host_memory import graph_bytes
from gert.dtypes import ge_dtype
from gert.errors import GeError, GertError, SessionReplaced
from gert.core._locks import HandOffLock
from gert.core.resolve import key_label
from gert.core.shapes import ShapePlan
from gert.core.frequency import SegmentedLRU


@dataclass
class GraphEntry:
    graph_id: int
    key: tuple
    input_shapes: dict  # input name -> shape the graph runs at (-1 for dynamic dims)
    is_static: bool
    output_shapes: list  # per output (static graphs)
    output_dtypes: list
    evictable: bool
    # static graphs: per input (shape, nbytes, GE dtype), per output (numpy dtype, nbytes, GE dtype), computed once
    in_meta: dict = field(default_factory=dict)
    out_meta: list = field(default_factory=list)
    generation: int = 0  # the Session it was built in (StreamGraphs.install refuses an older one)
    compile_seconds: float = 0.0
    memory: int = 0  # bytes GE's summary reports: const (weights) + feature memory (gert.core.host_memory)


@dataclass
class WorkerStats:
    device: int
    stream: int
    cube_cores: int = 0  # the stream's effective core limits (its own, else the device's, else all)
    vector_cores: int = 0
    requests: int = 0
    busy_seconds: float = 0.0
    compiles: int = 0
    compile_seconds: float = 0.0
    failed_compiles: int = 0  # shapes whose compile failed (later requests of that shape fail without compiling)
    static_hits: int = 0  # requests served by a static graph
    dynamic_hits: int = 0  # requests served by a dynamic-shape graph
    background_compiles: int = 0  # static graphs compiled off the request path (policy auto)
    failed_background_compiles: int = 0  # those that failed: the shape stays on the dynamic graph
    request_path_compiles: int = 0  # compiles a request waited for (0 once a model is warm, unless exact)
    cache_hits: int = 0  # compiles GE's compile cache served (gert.core.compile_cache)
    cache_misses: int = 0  # compiles that compiled afresh and filled the cache

    def count(self, runs: int, static: bool, seconds: float) -> None:
        """``runs`` requests served, on a static graph or the dynamic one, busy for ``seconds``."""
        self.requests += runs
        if static:
            self.static_hits += runs
        else:
            self.dynamic_hits += runs
        self.busy_seconds += seconds


@dataclass(eq=False)
class _Context:
    """A stream and its GE Session: what the graphs live in. A device recovery replaces it (StreamGraphs.reopen) and
    close() retires it; it is closed by whoever uses it last, so a background build that outlives a reopen or a
    close never runs in a deleted Session (on real GE: CompileGraph / LoadGraph on a freed ge::Session)."""

    stream: Stream
    session: Session
    generation: int
    builds: int = 0  # builds running in it now (they hold no worker lock)
    retired: bool = False  # replaced or closed: disposed when the last build leaves


class StreamGraphs:
    """One stream on one device with its own GE Session, the graphs loaded in it, its device I/O buffers, and their
    life (gert.core.executor.Worker runs requests on top).

    Ownership: requests, warmup and recovery use it while holding ``lock`` (a HandOffLock: close() with a timeout
    hands the close to a stuck holder instead of freeing the stream under it). The graph table (``has``, ``entry``,
    ``build``, ``install``, ``compile``, ``evict``, ``reopen``, ``release``) is the only way graphs are added or
    dropped: gert.core.tiers, gert.core.recovery and Model.warmup use nothing else. ``build`` needs no lock (GE compiles one
    graph of a Session while its other graphs execute); the others need ``lock``."""

    def __init__(
        self,
        index: int,
        device: int,
        graph: Graph,
        plan: ShapePlan,
        session_options: dict,
        graph_options: dict,
        cube_cores: Optional[int],
        vector_cores: Optional[int],
        max_exact_graphs: int,
        cache=None,
        tiers=None,
        hot: Optional[Callable[[], object]] = None,
    ):
        self.index = index
        self.device = device
        self.plan = plan
        self.graph = graph
        self.graph_options = graph_options
        self.lock = HandOffLock()
        self.cores = (cube_cores, vector_cores)
        opts = {"ge.session_device_id": str(device), **session_options}
        if cube_cores is not None and "ge.aicoreNum" not in opts:
            opts["ge.aicoreNum"] = f"{cube_cores}|{vector_cores or ''}"
        self.session_options = opts
        self._ctx_lock = threading.Lock()  # guards _ctx, _closed and the contexts' build counts
        self._closed = False
        self._ctx = self._open(0)
        self.stream, self.session = self._ctx.stream, self._ctx.session
        self.graphs: "OrderedDict[tuple, GraphEntry]" = OrderedDict()  # read freely; changed only by the table
        self.failed: "OrderedDict[tuple, GeError]" = OrderedDict()  # shape key -> why its compile failed
        self.max_exact_graphs = max_exact_graphs
        self.exact = SegmentedLRU(max_exact_graphs)  # the evictable (exact) graphs' keys: always those in graphs
        self.tiers = tiers  # gert.core.tiers.Tiers when a dim uses the auto policy
        self.cache = cache  # gert.core.compile_cache.CompileCache when the model has a cache directory
        # () -> gert.core._hotpath.HotPath or None (the pool opens it after its workers): runs prepared over this
        # stream's buffers and graphs; told to forget them whenever the buffers or graphs change (forget_prepared)
        self._hot_path = hot or (lambda: None)
        self._graph_ids = itertools.count(1)  # thread-safe: the tiers' thread compiles too
        self.in_bufs: dict = {}
        self.out_bufs: dict = {}
        self.stats = WorkerStats(
            device=device, stream=index, cube_cores=self.stream.cube_cores, vector_cores=self.stream.vector_cores
        )

    def _open(self, generation: int) -> _Context:
        """A stream (with its core limits) and a Session; again after a device recovery (reopen)."""
        stream = Stream(self.device)
        cube_cores, vector_cores = self.cores
        try:
            # the device's cores as this stream sees them before any limit of its own (its device's, else all)
            self.device_cores = (stream.cube_cores, stream.vector_cores)
            if cube_cores is not None:
                stream.cube_cores = cube_cores
            if vector_cores is not None:
                stream.vector_cores = vector_cores
            session = Session(self.session_options)
        except BaseException:
            stream.destroy()
            raise
        return _Context(stream, session, generation)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def builds_in_flight(self) -> int:
        """Builds running now in the current Session (background compiles hold no lock)."""
        return self._ctx.builds

    # ---- the graph table ------------------------------------------------------------------------------------
    def has(self, key: tuple) -> bool:
        """Whether a graph for ``key`` is installed."""
        return key in self.graphs

    def entry(self, key: tuple) -> Optional[GraphEntry]:
        """The installed graph for ``key``, or None."""
        return self.graphs.get(key)

    def build(self, key: tuple) -> GraphEntry:
        """Add, compile and load the graph for ``key`` in the current Session, without installing it and without
        the lock (the stream keeps serving on its other graphs). SessionReplaced if a recovery or close() retired
        the Session while it failed; a graph built in a Session retired meanwhile is refused by install()."""
        with self._ctx_lock:
            if self._closed:
                raise GertError(f"stream {self.index} of device {self.device} is closed")
            ctx = self._ctx
            ctx.builds += 1
        t0 = time.perf_counter()
        try:
            entry = self._build_in(ctx, key)
        except Exception as e:
            if ctx.retired:
                raise SessionReplaced(
                    f"the Session of stream {self.index} was replaced while graph {key_label(key)} was built"
                ) from e
            raise
        finally:
            self._leave(ctx)
        entry.generation = ctx.generation
        entry.compile_seconds = time.perf_counter() - t0
        return entry

    def install(self, entry: GraphEntry) -> bool:
        """Route ``entry.key`` to ``entry`` (the caller holds lock). False, and nothing installed, when the graph was
        built in a Session retired since (a device recovery, close()): it went with that Session."""
        if self._closed or entry.generation != self._ctx.generation:
            return False
        old = self.graphs.get(entry.key)
        if old is not None:  # built twice (warmup and a background compile): keep the one installed first
            self.session.remove_graph(entry.graph_id)
            return True
        self.graphs[entry.key] = entry
        self.stats.compiles += 1
        self.stats.compile_seconds += entry.compile_seconds
        return True

    def discard(self, entry: GraphEntry) -> None:
        """Drop a graph built but not installed (the caller holds lock): refused by the tiers' host_memory budget.
        A graph of a Session retired meanwhile went with that Session."""
        if not self._closed and entry.generation == self._ctx.generation:
            self.session.remove_graph(entry.graph_id)

    def compile(self, key: tuple) -> GraphEntry:
        """The graph for ``key``: the installed one, else built and installed now (the caller holds lock). Exact
        graphs are bounded by max_exact_graphs: the scan-resistant set picks what to evict first."""
        entry = self.graphs.get(key)
        if entry is not None:
            return entry
        plan = self.plan
        evictable = self.tiers is None and any(
            plan.dims[n].policy == "exact" and not plan.dims[n].gears for n, _ in key
        )
        if evictable:
            for old_key in self.exact.admit(key):
                self.evict(old_key)
        try:
            entry = self.build(key)
        except BaseException:
            self.exact.discard(key)
            raise
        entry.evictable = evictable
        self.install(entry)
        return entry

    def evict(self, key: tuple) -> bool:
        """Drop the graph for ``key`` (the caller holds lock: no request is running on it). True if there was one."""
        self.exact.discard(key)
        entry = self.graphs.pop(key, None)
        if entry is None:
            return False
        self.forget_prepared()
        self.session.remove_graph(entry.graph_id)
        return True

    def release(self, keep: tuple) -> None:
        """Out of device memory: free the I/O buffers and every graph but the one for ``keep`` (the caller holds
        lock); the exact set keeps only what is still installed."""
        self.free_buffers()
        for key in [k for k in self.graphs if k != keep]:
            self.evict(key)

    def reopen(self) -> None:
        """A new stream and Session after a device recovery (the caller holds lock); graphs recompile on demand.
        The old Session is closed now, or by the background build still using it when that build ends."""
        with self._ctx_lock:
            if self._closed:
                return
            old = self._ctx
            old.retired = True
            last = old.builds == 0
        self.forget_prepared()
        if last:
            self._dispose(old, synchronize=False)
        try:
            self.free_buffers()
        except GertError:
            self.in_bufs.clear()
            self.out_bufs.clear()
        self.graphs.clear()
        self.failed.clear()
        self.exact = SegmentedLRU(self.max_exact_graphs)
        ctx = self._open(old.generation + 1)
        with self._ctx_lock:
            self._ctx = ctx
            self.stream, self.session = ctx.stream, ctx.session

    def _leave(self, ctx: _Context) -> None:
        with self._ctx_lock:
            ctx.builds -= 1
            last = ctx.retired and ctx.builds == 0
        if last:  # retired while this build used it: this thread is its last user
            self._dispose(ctx, synchronize=False)

    @staticmethod
    def _dispose(ctx: _Context, synchronize: bool) -> None:
        """Close a context's Session and destroy its stream (after a synchronize, unless the device failed)."""
        try:
            if synchronize:
                ctx.stream.synchronize()
        finally:
            try:
                ctx.session.close()
            except GertError:
                pass
            try:
                ctx.stream.destroy()
            except GertError:
                pass

    def _build_in(self, ctx: _Context, key: tuple) -> GraphEntry:
        """Add, compile and load the graph for ``key`` (dim name -> size, -1 for dynamic) in ``ctx``'s Session."""
        plan = self.plan
        sizes = dict(key)
        shapes = {}
        for t in plan.inputs:
            dims = []
            for axis, d in enumerate(t.shape):
                name = plan.input_axes.get((t.name, axis))
                dims.append(int(d) if name is None else int(sizes[name]))
            shapes[t.name] = tuple(dims)
        spec = ";".join(f"{n}:{','.join(str(d) for d in s)}" for n, s in shapes.items())
        gid = next(self._graph_ids)
        session = ctx.session
        outcome = compile_graph(
            session, gid, self.graph, self.session_options, {"ge.inputShape": spec, **self.graph_options}, self.cache
        )
        if outcome == "hit":
            self.stats.cache_hits += 1
        elif outcome == "miss":
            self.stats.cache_misses += 1
        try:
            summary = session.summary(gid)
            session.load_graph(gid, ctx.stream)
        except BaseException:
            session.remove_graph(gid)
            raise
        static = summary.is_static  # an unknown-shape graph's summary has no output shapes (GE's getters fail)
        entry = GraphEntry(
            gid,
            key,
            shapes,
            static,
            summary.output_shapes if static else [],
            summary.output_dtypes if static else [],
            False,
            memory=graph_bytes(summary),
        )
        if entry.is_static:
            for t in plan.inputs:
                shape = shapes[t.name]
                entry.in_meta[t.name] = (shape, math.prod(shape) * t.dtype.itemsize, ge_dtype(t.dtype))
            for shape, dtype in zip(entry.output_shapes, entry.output_dtypes):
                dtype = np.dtype(dtype)
                entry.out_meta.append((dtype, math.prod(shape) * dtype.itemsize, ge_dtype(dtype)))
        return entry

    def forget_prepared(self) -> None:
        """The compiled hot path must not run what it prepared over this stream's buffers and graphs any more."""
        hot = self._hot_path()
        if hot is not None:
            hot.forget(self)

    def free_buffers(self) -> None:
        """Free the device I/O buffers (no work may be queued); they grow again on demand."""
        self.forget_prepared()
        for b in list(self.in_bufs.values()) + list(self.out_bufs.values()):
            b.free()
        self.in_bufs.clear()
        self.out_bufs.clear()

    def close(self) -> None:
        """Release the stream, Session and buffers (the caller holds lock, or no one else uses the worker); the
        Session of a background build in flight is closed by that build when it ends. Idempotent."""
        with self._ctx_lock:
            if self._closed:
                return
            self._closed = True
            ctx = self._ctx
            ctx.retired = True
            last = ctx.builds == 0
        self.forget_prepared()
        self.graphs.clear()
        try:
            if last:
                self._dispose(ctx, synchronize=True)
        finally:
            self.free_buffers()
