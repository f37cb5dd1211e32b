"""Stateful models: sequences whose recurrent state stays in device memory between steps.

    model = gert.load("gru.onnx", state={"h": "h_out"}, batch_dim="N")
    with model.sequence() as seq:            # state: zeros (or initial_state={...})
        y = seq.run({"x": x})["y"]           # only the step inputs in, only the non-state outputs out
    model.step([(s1, {"x": x1}), (s2, {"x": x2})])   # one graph run for both

A step binds the sequence's state buffer as the graph's input (a gert.DeviceTensor: no H2D) and has the executor
write the state output into another device buffer (Request.device_out: no D2H); the two are then swapped. Steps of
several sequences run as one batch: their states are gathered into the batch and scattered back with device-to-device
copies. The spare buffers come from a small pool, so N sequences hold about N states, not 2N.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Protocol

import numpy as np

from gert._cann import DeviceBuffer
from gert.errors import AclError, GertError, ModelClosed
from gert.core._locks import HandOffLock
from gert.core.batching import Batcher
from gert.core.dynamic import Pending
from gert.core.batch_queue import run_isolated
from gert.core.engine import Engine
from gert.core.validate import Validator
from gert.core.shapes import DEFAULT_BATCH_GEARS, ShapePlan, TensorInfo
from gert.core.tensor import DeviceTensor


class Runner(Protocol):
    """What Sequences need of their model (gert.Model): its plan, its Engine, and whether it is closed."""

    plan: ShapePlan
    engine: Engine

    @property
    def closed(self) -> bool: ...


@dataclass(frozen=True)
class StatePair:
    """A state input and the output that feeds it at the next step; ``axis``: the state's batch axis (or None)."""

    input: TensorInfo
    output: TensorInfo
    axis: Optional[int]


def pair_states(plan: ShapePlan, state: Mapping[str, str]) -> list:
    """Check ``state`` (state input -> output) against the model: names exist, dtypes and shapes agree."""
    if not isinstance(state, Mapping):
        raise GertError(f"state must be a dict of state input -> output name, got {type(state).__name__}")
    ins = {t.name: t for t in plan.inputs}
    outs = {t.name: t for t in plan.outputs}
    pairs = []
    for i, o in state.items():
        if i not in ins:
            raise GertError(f"state names input '{i}', which is not a model input; inputs: {list(ins)}")
        if o not in outs:
            raise GertError(
                f"state pairs input '{i}' with output '{o}', which is not a model output; outputs: {list(outs)}"
            )
        ti, to = ins[i], outs[o]
        if ti.dtype != to.dtype:
            raise GertError(
                f"state input '{i}' is {ti.dtype} but its output '{o}' is {to.dtype}: the output feeds "
                "the input at the next step, so they must agree"
            )
        if len(ti.shape) != len(to.shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(ti.shape, to.shape)
        ):
            raise GertError(
                f"state input '{i}' has shape {ti.shape} but its output '{o}' has {to.shape}: the output "
                "feeds the input at the next step, so they must agree"
            )
        pairs.append(StatePair(ti, to, plan.batch_axis(i)))
    if len({p.output.name for p in pairs}) != len(pairs):
        raise GertError(f"state {dict(state)} feeds two inputs from one output")
    if len(pairs) == len(plan.inputs):
        raise GertError(f"state {dict(state)} covers every input: a step needs at least one non-state input")
    return pairs


class _Pool:
    """Free device buffers by (device, nbytes): a step's new state and a batch's gathered states reuse them."""

    def __init__(self, keep: int = 8):
        self._free: dict = {}
        self._lock = threading.Lock()
        self._keep = keep
        self._closed = False  # after close(), a buffer given back is freed (a step that outlived the model's close)

    def get(self, device: int, nbytes: int) -> DeviceBuffer:
        with self._lock:
            free = self._free.get((device, nbytes))
            if free:
                return free.pop()
        return DeviceBuffer(max(nbytes, 1), device)

    def get_many(self, device: int, sizes: list) -> list:
        """A buffer of each size (one lock for all: a batched step takes one per member)."""
        out = []
        with self._lock:
            for nbytes in sizes:
                free = self._free.get((device, nbytes))
                out.append(free.pop() if free else None)
        try:
            for i, nbytes in enumerate(sizes):
                if out[i] is None:
                    out[i] = DeviceBuffer(max(nbytes, 1), device)
        except BaseException:
            self.put_many([b for b in out if b is not None])
            raise
        return out

    def put(self, buf: DeviceBuffer) -> None:
        self.put_many((buf,))

    def put_many(self, bufs) -> None:
        """Give buffers back (one lock for all); those past ``keep`` per size, or after close(), are freed."""
        extra = []
        with self._lock:
            for buf in bufs:
                free = self._free.setdefault((buf.device_id, buf.nbytes), [])
                if len(free) < self._keep and not self._closed:
                    free.append(buf)
                else:
                    extra.append(buf)
        for buf in extra:
            buf.free()

    def clear(self, close: bool = False) -> None:
        """Free the spare buffers (``close``: and every buffer given back from now on)."""
        with self._lock:
            self._closed = self._closed or close
            bufs = [b for free in self._free.values() for b in free]
            self._free.clear()
        for b in bufs:
            b.free()


class Sequence:
    """One sequence of a stateful model: its state in device memory, one step per run(). Not for two threads at once
    (steps of one sequence are ordered); many sequences may run from many threads."""

    def __init__(self, owner: "Sequences", seq_id: int, device: int):
        self._owner = owner
        self.id = seq_id
        self.device = device
        self._bufs: dict = {}  # state input name -> DeviceBuffer
        self._shapes: dict = {}  # state input name -> shape
        self._rows = 1  # rows along the batch axis (set with _shapes, Sequences.write_state)
        self._key_extra: tuple = ()  # what of the sequence a step's batch key holds (Sequences._step_key)
        self._lock = HandOffLock()  # held by a step; close() hands the free to a step still holding it
        self._closed = False
        self.steps = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def rows(self) -> int:
        """Rows along the batch axis (1 unless the initial state had more)."""
        return self._rows

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict:
        """One step: the non-state inputs in, the non-state outputs out; the state advances on the device."""
        return self._owner.run_one(self, inputs)

    @property
    def state(self) -> dict:
        """A host copy of the state (state input name -> array), read from the device."""
        with self._lock:
            self._check_open()
            out = {}
            for name, buf in self._bufs.items():
                a = np.empty(self._shapes[name], self._owner.dtypes[name])
                if a.nbytes:
                    buf.copy_to(a.reshape(-1).view(np.uint8))
                out[name] = a
            return out

    def reset(self, state: Optional[Mapping[str, np.ndarray]] = None) -> None:
        """Start over: zeros, or ``state`` (state input name -> array)."""
        with self._lock:
            self._check_open()
            self._owner.write_state(self, state)
            self.steps = 0

    def close(self, timeout: Optional[float] = None) -> None:
        """Free the state's device memory. Waits for a step in flight (at most ``timeout`` seconds: then the step
        frees it when it ends)."""
        self._lock.run_or_hand_over(self._free, timeout)
        self._owner.forget(self)

    def _free(self) -> None:
        """Run by the sequence's owner (the holder of its lock): closed, state freed."""
        if self._closed:
            return
        self._closed = True
        bufs, self._bufs = list(self._bufs.values()), {}
        for b in bufs:
            b.free()

    def _check_open(self) -> None:
        if self._closed:
            raise self.closed_error()

    def closed_error(self) -> GertError:
        """What a step of this closed sequence raises: ModelClosed when the model's close() closed it (as every
        front door after close()), else this sequence's own close."""
        return ModelClosed() if self._owner.model.closed else GertError(f"sequence {self.id} is closed")

    def __enter__(self) -> "Sequence":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}{list(s)}" for n, s in self._shapes.items())
        return (
            f"<gert.Sequence {self.id} {'closed' if self._closed else 'open'}, device {self.device}, "
            f"{self.steps} steps, state {shapes}>"
        )


class _Step(Pending):
    """A seq.run step queued for a stream (gert/core/dynamic.py's Pending, with its sequence)."""

    __slots__ = ("seq",)

    def __init__(self, seq: Sequence, *args):
        super().__init__(*args)
        self.seq = seq


class _RunAlone(Exception):
    """Handed back by a batch leader: run this step yourself (its sequence was busy, or already in the batch)."""


class _StepBatches:
    """seq.run from many threads, batched by the model's one batch queue (gert/core/batch_queue.py): each step queues
    for a stream of its sequence's device with its batch key; the step that gets the stream leads a batch of the
    queued steps of its key, admitted by ``_admit`` and run by ``_run``.

    Lock order: a step run by Sequences.step takes its sequences' locks, then a stream; a leader already holds the
    stream, so it only tries the sequences' locks (never waiting): a step whose sequence is busy (a Model.step
    waiting for this very stream, a reset, a state read), or a second step of a sequence already in the batch, is
    handed back to its own thread (``_RunAlone``), which runs it the ordinary way. No thread ever waits for a
    sequence's lock while holding a stream."""

    def __init__(self, owner: "Sequences"):
        self.owner = owner

    def limit(self) -> int:
        """Rows a batch of steps may have (0: each step runs alone): the Engine's dynamic batch limit; with
        sequence_wait_s > 0 even when dynamic batching is off."""
        owner, engine = self.owner, self.owner.model.engine
        if not owner.batchable:
            return 0
        if engine.batch_limit:
            return engine.batch_limit
        batch = owner.plan.batch
        return (
            (batch.gears[-1] if batch.policy == "pad" and batch.gears else DEFAULT_BATCH_GEARS[-1])
            if owner.wait_s > 0
            else 0
        )

    def run(self, seq: Sequence, arrays: dict, limit: int) -> dict:
        """One checked step, queued in the model's batch queue (gert/core/batch_queue.py) with the steps' own run
        and admit rules; its outputs (raises _RunAlone when a leader hands it back)."""
        owner = self.owner
        pending = _Step(
            seq, arrays, None, seq.rows, owner._step_key(seq, arrays), None, None, limit, seq.device, owner.wait_s
        )
        return owner.model.engine.queue(pending, self._run, self._admit, record=False)

    @staticmethod
    def _admit(group: list) -> tuple:
        """(the steps of ``group`` that run, a callable that lets go of their sequences): each step's sequence
        locked without waiting, in id order; a step whose sequence is busy, or a second step of a sequence already in
        the batch, is handed back to its thread (_RunAlone); a closed sequence's step fails."""
        locked, seen = [], set()
        for p in sorted(group, key=lambda p: p.seq.id):
            if p.seq.id in seen or not p.seq._lock.acquire(blocking=False):
                p.set_error(_RunAlone())
                continue
            seen.add(p.seq.id)
            locked.append(p)
            if p.seq.closed:
                p.set_error(p.seq.closed_error())

        def let_go() -> None:
            for p in locked:
                p.seq._lock.release()

        return [p for p in locked if not p.done], let_go

    def _run(self, members: list, run) -> list:
        """One step of the sequences of ``members`` as one batch on the stream ``run`` runs on (a device fault:
        the BatchQueue runs each step again alone; every state is still the old one)."""
        return self.owner._run_locked([(p.seq, p.arrays) for p in members], run)


class _StepStates:
    """The states of one step's members on their device: bound as they are (one member whose rows fill the run) or
    gathered into one batch buffer, the state outputs written into fresh buffers (scattered back per member). All or
    nothing: the new states are swapped in only once the step succeeded (``commit``), so a copy failing halfway
    leaves every member's state as it was; the buffers come from and go back to the sequences' pool."""

    def __init__(self, pairs: list, pool: _Pool, members: list, rows: list, g: int):
        self.pairs, self.pool, self.members, self.rows, self.g = pairs, pool, members, rows, g
        self.direct = len(members) == 1 and g == sum(rows)
        self.device_out: dict = {}  # state output name -> the buffer the run writes it into
        self.before: list = []  # the gather copies (and zero fill), queued before the run
        self.after: list = []  # the scatter copies, queued after it
        self._taken: list = []  # buffers taken from the pool (given back by release)
        self._new: dict = {}  # state input name -> each member's new state buffer

    def bind(self, arrays: dict) -> None:
        """Each state input into ``arrays`` as a DeviceTensor at the run's batch ``g``, and its copies planned."""
        members, g = self.members, self.g
        device = members[0][0].device
        for p in self.pairs:
            name = p.input.name
            dims = list(members[0][0]._shapes[name])
            if p.axis is not None:
                dims[p.axis] = g
            shape = tuple(dims)
            nbytes = math.prod(shape) * p.input.dtype.itemsize
            if self.direct:  # the state bound as it is; the output becomes the new state
                src = members[0][0]._bufs[name]
                dst = self.pool.get(device, nbytes)
                self._taken.append(dst)
                self._new[name] = [dst]
            else:  # gathered into src, the output scattered into one fresh buffer per member
                bufs = self.pool.get_many(device, [nbytes, nbytes] + [seq._bufs[name].nbytes for seq, _ in members])
                self._taken += bufs
                src, dst, fresh = bufs[0], bufs[1], bufs[2:]
                self.before += self._gather(p, src, shape)
                self.after += self._scatter(p, dst, fresh)
                self._new[name] = fresh
            arrays[name] = DeviceTensor(src, shape, p.input.dtype)
            self.device_out[p.output.name] = dst

    def commit(self) -> None:
        """The step succeeded: each member's new states replace its old ones, which go back to the pool."""
        became, old = set(), []
        for name, news in self._new.items():
            for (seq, _), new in zip(self.members, news):
                old.append(seq._bufs[name])
                seq._bufs[name] = new
                became.add(id(new))
        self._taken = [b for b in self._taken if id(b) not in became] + old

    def release(self) -> None:
        """The buffers this step took and does not keep, back to the pool."""
        self.pool.put_many(self._taken)

    @staticmethod
    def _layout(p: StatePair, shape: tuple) -> tuple:
        """(blocks before the batch axis, bytes per batch row within a block) of a state of ``shape``."""
        return math.prod(shape[: p.axis]), math.prod(shape[p.axis + 1 :]) * p.input.dtype.itemsize

    def _gather(self, p: StatePair, dst: DeviceBuffer, shape: tuple) -> list:
        """The device-to-device copies (dst, dmax, src, n) that put each member's state into its rows of the batch,
        after a zero fill when pad rows remain."""
        g, rows = shape[p.axis], self.rows
        outer, inner = self._layout(p, shape)
        ops: list = [(dst.ptr, dst.nbytes, dst.nbytes)] if g > sum(rows) else []
        offset = 0
        for (seq, _), r in zip(self.members, rows):
            src = seq._bufs[p.input.name]
            for j in range(outer):
                at = (j * g + offset) * inner
                ops.append((dst.ptr + at, dst.nbytes - at, src.ptr + j * r * inner, r * inner))
            offset += r
        return ops

    def _scatter(self, p: StatePair, src: DeviceBuffer, fresh: list) -> list:
        """The device-to-device copies that put each member's rows of the batch's new state into its fresh buffer
        (``fresh``, in the members' order), which becomes its state once the step succeeded."""
        g, shape = self.g, self.members[0][0]._shapes[p.input.name]
        outer, inner = self._layout(p, shape)
        ops, offset = [], 0
        for (seq, _), r, dst in zip(self.members, self.rows, fresh):
            for j in range(outer):
                ops.append(
                    (dst.ptr + j * r * inner, dst.nbytes - j * r * inner, src.ptr + (j * g + offset) * inner, r * inner)
                )
            offset += r
        return ops


class Sequences:
    """The sequences of one stateful Model: creates them, runs their steps (alone or batched), tracks them."""

    def __init__(self, model: Runner, state: Mapping[str, str], wait_s: float, devices: tuple):
        self.model = model
        self.plan: ShapePlan = model.plan
        self.pairs = pair_states(self.plan, state)
        self.state_inputs = {p.input.name for p in self.pairs}
        self.step_inputs = [t.name for t in self.plan.inputs if t.name not in self.state_inputs]
        self.dtypes = {p.input.name: p.input.dtype for p in self.pairs}
        # the step inputs are checked by the model's one validator (gert/core/validate.py), batched by its batcher
        self._validator = Validator(self.plan, self.step_inputs, takes="a step takes")
        self._batcher = Batcher(self.plan)
        self.wait_s = float(wait_s)
        # batched steps need every state to carry the batch axis; else sequences step one by one
        self.batchable = self._batcher.enabled and all(p.axis is not None for p in self.pairs)
        self._ids = itertools.count(1)
        self._live: dict = {}
        self._lock = threading.Lock()
        self._pool = _Pool()
        self._devices = itertools.cycle(devices)  # new sequences go round robin over the model's devices
        self._closed = False  # set by close(), under _lock: no sequence joins _live afterwards
        self._step_batches = _StepBatches(self)

    @property
    def active(self) -> int:
        return len(self._live)

    # ---- lifecycle --------------------------------------------------------------------------------------------
    def create(self, initial_state: Optional[Mapping[str, np.ndarray]] = None) -> Sequence:
        """A new sequence, tracked until it is closed; GertError once the model is closed. Its state is written
        outside the lock; a close() that ran meanwhile is seen when it joins the live set, and it is freed then
        (outside the lock: Sequence.close() takes it again to forget the sequence)."""
        with self._lock:
            if self._closed:
                raise ModelClosed()
            seq = Sequence(self, next(self._ids), next(self._devices))
        self.write_state(seq, initial_state)
        with self._lock:
            closed = self._closed
            if not closed:
                self._live[seq.id] = seq
        if closed:
            seq.close()
            raise ModelClosed()
        return seq

    def forget(self, seq: Sequence) -> None:
        with self._lock:
            self._live.pop(seq.id, None)

    def write_state(self, seq: Sequence, state: Optional[Mapping[str, np.ndarray]]) -> None:
        """Lay out ``seq``'s state on its device: zeros, or copies of ``state`` (checked against the model)."""
        state = dict(state or {})
        unknown = [n for n in state if n not in self.state_inputs]
        if unknown:
            raise GertError(
                f"initial state names {unknown}, which are not state inputs; state inputs: {sorted(self.state_inputs)}"
            )
        arrays, shapes = {}, {}
        for p in self.pairs:
            t = p.input
            if t.name in state:
                a = np.require(np.asarray(state[t.name]), requirements="C")
                if (
                    a.dtype != t.dtype
                    or a.ndim != len(t.shape)
                    or any(isinstance(d, int) and d != s for d, s in zip(t.shape, a.shape))
                ):
                    raise GertError(
                        f"initial state '{t.name}': expected {t.dtype} of shape {t.shape}, got {a.dtype} "
                        f"of shape {a.shape}"
                    )
                arrays[t.name], shapes[t.name] = a, a.shape
            else:
                shapes[t.name] = tuple(
                    d if isinstance(d, int) else self._default_size(t, axis) for axis, d in enumerate(t.shape)
                )
        if self.batchable:
            rows = {s[p.axis] for p, s in ((p, shapes[p.input.name]) for p in self.pairs)}
            if len(rows) > 1:
                raise GertError(f"initial state: the states have different sizes on the batch axis ({sorted(rows)})")
        old = dict(seq._bufs)
        new = {}
        try:
            for p in self.pairs:
                name = p.input.name
                nbytes = math.prod(shapes[name]) * p.input.dtype.itemsize
                buf = (
                    old.pop(name)
                    if name in old and old[name].nbytes == max(nbytes, 1)
                    else self._alloc(seq, name, nbytes)
                )
                new[name] = buf
                # DeviceBuffer's own calls: they make the device's context current in this thread (any thread)
                if name in arrays:
                    if nbytes:
                        buf.copy_from(arrays[name].reshape(-1).view(np.uint8))
                else:
                    buf.memset(0)
        except BaseException:
            for name, buf in new.items():
                if seq._bufs.get(name) is not buf:
                    buf.free()
            raise
        for buf in old.values():
            buf.free()
        seq._bufs, seq._shapes = new, shapes
        p = self.pairs[0]
        seq._rows = shapes[p.input.name][p.axis] if p.axis is not None else 1
        # steps with equal keys can share one run: same device, same non-batch state shapes (and batch key)
        seq._key_extra = (seq.device,) + tuple(
            shapes[p.input.name][: p.axis] + shapes[p.input.name][p.axis + 1 :]
            if p.axis is not None
            else shapes[p.input.name]
            for p in self.pairs
        )

    def _default_size(self, t: TensorInfo, axis: int) -> int:
        """A symbolic state dim without an initial state: 1 on the batch axis (or a dim the step inputs share)."""
        dim = self.plan.input_axes.get((t.name, axis))
        if dim == "batch" or any(n in self.step_inputs for n, _ in self.plan.dims[dim].axes):
            return 1
        raise GertError(
            f"state input '{t.name}' axis {axis} is dynamic ('{dim}') and not a batch axis: give "
            f"initial_state={{'{t.name}': ...}} to set its size"
        )

    def _alloc(self, seq: Sequence, name: str, nbytes: int) -> DeviceBuffer:
        try:
            return DeviceBuffer(max(nbytes, 1), seq.device)
        except AclError as first:
            self._pool.clear()  # spare buffers first, then give up
            try:
                return DeviceBuffer(max(nbytes, 1), seq.device)
            except AclError:
                raise GertError(
                    f"sequence {seq.id}: out of device memory for state '{name}' ({nbytes} bytes on "
                    f"device {seq.device}, {self.active} sequences open): {first}"
                ) from first

    def close(self, timeout: Optional[float] = None) -> None:
        """Close every sequence (Model.close(), after the steps in flight ended or were aborted): a sequence whose
        step still runs after ``timeout`` seconds in all is freed by that step when it ends."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._closed = True
            live = list(self._live.values())
        for seq in live:
            seq.close(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._pool.clear(close=True)

    # ---- steps ------------------------------------------------------------------------------------------------
    def run_one(self, seq: Sequence, inputs: Mapping[str, np.ndarray]) -> dict:
        """seq.run(): the step queues for a stream with its batch key (the Engine's dynamic batching,
        gert/core/dynamic.py) and runs with the queued steps of its key (``_StepBatches``), with sequence_wait_s > 0
        after waiting that long for company; alone when steps cannot share a run (a state without the batch axis,
        batching off)."""
        limit = self._step_batches.limit()
        if not limit:
            return self.step([(seq, inputs)])[0]
        arrays = self._check_item(0, seq, inputs)
        if seq.rows < limit:
            try:
                return self._step_batches.run(seq, arrays, limit)
            except _RunAlone:  # its sequence was busy when a batch took it: its own step, in turn
                pass
        return self.step_checked([(0, seq, arrays)])[0]

    def _check_item(self, index: int, seq, inputs) -> dict:
        if not isinstance(seq, Sequence) or seq._owner is not self:
            raise GertError(f"step item {index}: {seq!r} is not a sequence of this model")
        seq._check_open()
        if type(inputs) is not dict and not isinstance(inputs, Mapping):
            raise GertError(
                f"step item {index}: inputs must be a dict of input name -> array, got {type(inputs).__name__}"
            )
        state = [n for n in inputs if n in self.state_inputs] if len(inputs) != len(self.step_inputs) else ()
        if state:
            raise GertError(
                f"sequence {seq.id}: input(s) {state} are the sequence's state, kept on the device; give "
                f"only the step inputs {self.step_inputs}"
            )
        return self._validator.check(inputs)[0]

    def step(self, items: list, return_exceptions: bool = False) -> list:
        """One step of each (seq, inputs): grouped into batches, each run once; outputs in the items' order. Every
        item is checked before anything runs. A group whose run fails leaves its sequences' states as they were;
        the other groups still run, then the first error is raised (``return_exceptions``: each failed item's
        result is its error instead, a bad item's too, and the others run)."""
        checked, refused = [], {}
        for i, (seq, inputs) in enumerate(items):
            try:
                checked.append((i, seq, self._check_item(i, seq, inputs)))
            except GertError as e:
                if not return_exceptions:
                    raise
                refused[i] = e
        if not refused:
            return self.step_checked(checked, return_exceptions)
        results = [refused.get(i) for i in range(len(items))]
        for (i, _, _), r in zip(checked, self.step_checked(checked, return_exceptions) if checked else []):
            results[i] = r
        return results

    def step_checked(self, checked: list, return_exceptions: bool = False) -> list:
        """step() of items [(index, seq, arrays)] that passed _check_item; results in the items' order."""
        ids = [seq.id for _, seq, _ in checked]
        if len(set(ids)) != len(ids):
            raise GertError("step: a sequence appears twice; its steps are ordered, run them in separate calls")
        results: list = [None] * len(checked)
        positions = {id(item): k for k, item in enumerate(checked)}
        first = None
        for group in self._groups(checked):
            try:  # a device fault of a group: each sequence's step again alone (its state is still the old one)
                outs = run_isolated(
                    [(s, a) for _, s, a in group], self._run_group, self.model.engine.batching_stats.retried
                )
            except Exception as e:  # noqa: BLE001 - the group's error, raised or returned below
                outs = [e] * len(group)
            first = first or next((o for o in outs if isinstance(o, BaseException)), None)
            for item, out in zip(group, outs):
                results[positions[id(item)]] = out
        if first is not None and not return_exceptions:
            raise first
        return results

    def _groups(self, checked: list) -> list:
        """Items that can share one graph run (gert/core/batching.py): same device, same batch key, same non-batch
        state shapes; at most the batch's largest gear of rows."""
        if not self.batchable:  # a state without the batch axis: each sequence's step runs alone
            return [[item] for item in checked]
        batcher = self._batcher
        batch = self.plan.batch
        top = batch.gears[-1] if batch is not None and batch.policy == "pad" and batch.gears else None
        return [
            chunk
            for members in batcher.group(checked, lambda item: batcher.key(item[2], item[1]._key_extra))
            for chunk in batcher.chunks(members, lambda item: item[1]._rows, top)
        ]

    def _step_key(self, seq: Sequence, arrays: dict) -> tuple:
        """Steps with equal keys can share one run: same device, batch key, non-batch state shapes."""
        return self._batcher.key(arrays, seq._key_extra)

    def _run_group(self, members: list) -> list:
        """One graph run for ``members`` [(seq, arrays)]: their states bound (one member whose rows fill the run) or
        gathered on the device, the state outputs written on the device and swapped (or scattered) back."""
        seqs = sorted({s.id: s for s, _ in members}.values(), key=lambda s: s.id)
        for s in seqs:  # in id order: concurrent steps over overlapping sequences cannot deadlock
            s._lock.acquire()
        try:
            for s in seqs:
                s._check_open()
            return self._run_locked(members)
        finally:
            for s in seqs:
                s._lock.release()

    def _run_locked(self, members: list, run=None) -> list:
        plan, model = self.plan, self.model
        device = members[0][0].device
        rows = [s._rows for s, _ in members]
        n = sum(rows)
        g = n
        if self.batchable:
            g = plan.batch.resolve(n, f"sequences step of {n} rows")
            if g < n:  # _groups keeps a batch within the largest gear
                raise GertError(f"a step of {n} rows is larger than the largest batch gear {g}")
        # the step inputs as one batch (axis 0: each member's rows copied straight to the device), filler rows to g
        arrays = (
            self._batcher.merge([a for _, a in members], pad_to=g, total=n) if self.batchable else dict(members[0][1])
        )
        states = _StepStates(self.pairs, self._pool, members, rows, g)
        try:
            states.bind(arrays)
            out = model.engine.run_prepared(
                arrays,
                run,
                device_out=states.device_out,
                device=device,
                real_batch=n if g != n else None,
                before=states.before,
                after=states.after,
            )
            states.commit()  # the step succeeded: the new states replace the old ones
        finally:
            states.release()
        for s, _ in members:
            s.steps += 1
        return self._split(out, members, rows, g, n)

    def _split(self, out: dict, members: list, rows: list, g: int, n: int) -> list:
        """Each member's rows of the outputs (filler rows past n go to nobody)."""
        if len(members) == 1 and g == n:
            return [out]
        return self._batcher.split(out, rows)
