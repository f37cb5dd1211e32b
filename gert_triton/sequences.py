"""Stateful models under Triton's sequence batcher (as Triton 2.51 implements it).

The Python backend has no implicit state, so the adapter keeps one device-resident gert.Sequence per correlation id:
created on START (a START on a live id resets it), freed on END, or by its own idle timer, since Triton's reaper
releases an idle sequence's slot without any END reaching the model. Clients send only the step inputs; one
execute() runs every live request as one gert ``model.step`` (states gathered and scattered on the device).

What is read of a request is its own ``flags()`` and ``correlation_id()`` (Triton >= 22.02; string ids included), so
``gert repo init`` declares no control inputs. A config that declares them gets them as ordinary inputs (START / END /
READY / CORRID, shape [1, 1] with max_batch_size > 0), read only when the request carries no correlation id: Direct's
null requests (id 0, or READY false) get an empty response and never touch a state.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from gert.errors import GertError
from gert_triton.cancellation import Cancellation, cancelled_response
from gert_triton.config import ConfigError
from gert_triton.error_codes import error_response
from gert_triton.layout import Layout
from gert_triton.model_config import only_output
from gert_triton.tensors import as_array, to_tensor

START, END = 1, 2  # TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END
DEFAULT_IDLE_US = 1_000_000  # max_sequence_idle_microseconds 0 or unset (model_config.proto)
CONTROL_KINDS = {
    "CONTROL_SEQUENCE_START": "start",
    "CONTROL_SEQUENCE_END": "end",
    "CONTROL_SEQUENCE_READY": "ready",
    "CONTROL_SEQUENCE_CORRID": "corrid",
}


def control_names(config: dict) -> dict:
    """{"start"|"end"|"ready"|"corrid": input name} from sequence_batching.control_input."""
    out = {}
    for entry in (config.get("sequence_batching") or {}).get("control_input", []) or []:
        for c in entry.get("control", []) or []:
            kind = CONTROL_KINDS.get(c.get("kind"))
            if kind is not None:
                out[kind] = entry.get("name")
    return out


def idle_seconds(config: dict) -> float:
    us = int((config.get("sequence_batching") or {}).get("max_sequence_idle_microseconds") or 0)
    return (us or DEFAULT_IDLE_US) / 1e6


def sequence_block(
    strategy: str = "oldest", idle_us: int = 5_000_000, max_batch_size: int = 8, queue_delay_us: int = 1000
) -> str:
    """config.pbtxt's sequence_batching block, without control inputs: the adapter reads each request's ``flags()``
    and ``correlation_id()`` (Triton >= 22.02), and Direct's null requests carry id 0. Every control would be one
    more tensor per request through the stub (measured: READY + CORRID cost ~10 us of stub CPU and as much of the
    server's per step, benchmarks/bench_sequences.py). A config that declares controls still works (they are read
    only for a request without a correlation id)."""
    if strategy == "oldest":
        strat = (
            f"  oldest {{\n    max_candidate_sequences: {max(1, 4 * max_batch_size)}\n"
            f"    preferred_batch_size: [ {max_batch_size} ]\n    max_queue_delay_microseconds: {queue_delay_us}\n"
            "  }\n"
        )
    elif strategy == "direct":
        strat = (
            f"  direct {{\n    max_queue_delay_microseconds: {queue_delay_us}\n"
            "    minimum_slot_utilization: 0.5\n  }\n"
        )
    else:
        raise GertError(f"sequence strategy must be 'oldest' or 'direct', got {strategy!r}")
    return f"sequence_batching {{\n  max_sequence_idle_microseconds: {int(idle_us)}\n{strat}}}\n"


@dataclass
class _Live:
    seq: object  # gert.Sequence
    last_used: float  # time.monotonic() of its last request


class SequenceServer:
    """The live sequences of one model instance and how a batch of sequence requests runs."""

    def __init__(self, model, config: dict, name: str, layout: Layout, on_change=None, check_cancelled: bool = True):
        if "sequence_batching" not in config:
            raise ConfigError(
                "parameter 'state' needs a sequence_batching block in config.pbtxt (the sequence "
                "batcher sends each correlation id's requests to the instance that holds its state); "
                "`gert repo init MODEL REPO --state h=h_out` writes one"
            )
        self.model = model
        self.name = name
        self.layout = layout
        self.check_cancelled = check_cancelled
        self.controls = control_names(config)
        self.idle = idle_seconds(config)
        self.step_inputs = model.step_inputs
        self.state_outputs = set(model.state.values())
        self._wanted = only_output(config)  # a config of one output: every request asks for it
        self._live: dict = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.expired = 0  # sequences dropped by the idle timer
        self._on_change = on_change  # called when the timer dropped some (the active-sequences metric)
        self._reaper = threading.Thread(target=self._reap, name="gert-triton-sequences", daemon=True)
        self._reaper.start()

    @property
    def active(self) -> int:
        return len(self._live)

    # ---- idle timer ---------------------------------------------------------------------------------------------
    def _reap(self) -> None:
        period = min(max(self.idle / 4, 0.005), 1.0)
        while not self._stop.wait(period):
            now = time.monotonic()
            with self._lock:
                gone = [k for k, v in self._live.items() if now - v.last_used > self.idle]
                dropped = [self._live.pop(k) for k in gone]
            for v in dropped:
                v.seq.close()
            self.expired += len(dropped)
            if dropped and self._on_change is not None:
                self._on_change()

    def close(self) -> None:
        self._stop.set()
        self._reaper.join(5)
        with self._lock:
            live, self._live = list(self._live.values()), {}
        for v in live:
            v.seq.close()

    # ---- execute --------------------------------------------------------------------------------------------------
    def execute(self, requests: list, pb_utils) -> list:
        responses: list = [None] * len(requests)
        ready = []  # (index, key, live, inputs, wanted, end)
        now = time.monotonic()
        cancel = Cancellation(
            requests, enabled=self.check_cancelled
        )  # a cancelled step never runs (gert_triton/cancellation.py)
        for i, request in enumerate(requests):
            if cancel.cancelled(i):
                responses[i] = cancelled_response(pb_utils)
                self._end_cancelled(request)
                continue
            try:
                item = self._prepare(request, pb_utils, now)
            except GertError as e:  # out of device memory for its state: UNAVAILABLE (gert_triton.error_codes)
                responses[i] = error_response(pb_utils, e, checking=True)
                continue
            if item is None:  # a Direct null request: answered, never run
                responses[i] = pb_utils.InferenceResponse(output_tensors=[])
                continue
            ready.append((i,) + item)
        first = True
        while ready:  # never two steps of one sequence in a batch (Triton does not send them; be safe)
            seen, now, later = set(), [], []
            for r in ready:
                (later if r[1] in seen else now).append(r)
                seen.add(r[1])
            ready = later
            # each step was asked when read (a cancelled START must not reset its sequence); asked again only when
            # it waited behind an earlier group of this execute(): one IPC round trip per step, not two
            waited = [] if first else [r for r in now if cancel.cancelled(r[0], recheck=True)]
            first = False
            for item in waited:  # cancelled while others ran
                responses[item[0]] = cancelled_response(pb_utils)
                now.remove(item)
                if item[5]:
                    self._finish(item[1], item[2])
            if now:
                self._run(now, responses, pb_utils)
        return responses

    def _end_cancelled(self, request) -> None:
        """A cancelled request that ends its sequence (END flag) still ends it: its state is freed (the client
        starts the id again with START)."""
        flags = getattr(request, "flags", lambda: 0)()
        key = getattr(request, "correlation_id", lambda: 0)()
        if flags & END and key not in (0, "", None):
            with self._lock:
                live = self._live.get(key)
            if live is not None:
                self._finish(key, live)

    def _prepare(self, request, pb_utils, now: float) -> Optional[tuple]:
        """(key, live, model inputs, requested outputs, end) of one request; None for a null request."""
        flags = request.flags()
        key = request.correlation_id()
        start, end = bool(flags & START), bool(flags & END)
        if key in (0, "", None):  # a null request, unless the controls carry the sequence
            ready = self._control_value(request, "ready", pb_utils)
            corrid = self._control_value(request, "corrid", pb_utils)
            if not ready or corrid in (None, 0, ""):
                return None
            key = corrid
            start = start or self._control(request, "start", pb_utils)
            end = end or self._control(request, "end", pb_utils)
        inputs = {}
        for name in self.step_inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                raise GertError(
                    f"input '{name}' is missing; a step of this stateful model takes {self.step_inputs} "
                    "(the state stays on the server)"
                )
            inputs[name] = self.layout.to_model(name, as_array(tensor))
        with self._lock:
            live = self._live.get(key)
            if live is not None:
                live.last_used = now
        if start:
            if live is not None:
                live.seq.reset()  # a START on a live id: Triton ended the previous sequence early
            else:
                live = _Live(self.model.sequence(), now)
                with self._lock:
                    self._live[key] = live
        elif live is None:
            raise GertError(
                f"sequence {key!r} of model '{self.name}' is not active (never started, ended, or idle "
                f"for more than {self.idle:g} s): send its first request with sequence_start=True"
            )
        return key, live, inputs, self._wanted or request.requested_output_names(), end

    def _control_value(self, request, kind: str, pb_utils):
        name = self.controls.get(kind)
        if name is None:
            return None
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            return None
        value = np.asarray(tensor.as_numpy()).reshape(-1)
        if not value.size:
            return None
        v = value[0]
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        return v.item() if hasattr(v, "item") else v

    def _control(self, request, kind: str, pb_utils) -> bool:
        return bool(self._control_value(request, kind, pb_utils))

    def _run(self, items: list, responses: list, pb_utils) -> None:
        """Checked items (a bad one is answered alone, before anything runs), then one model.step for the rest: a
        group that fails answers its own requests with the error and leaves their states as they were."""
        good = list(items)
        try:  # each item checked by the model (a bad one fails alone), the rest batched by the model's Engine
            results = self.model.step([(live.seq, inputs) for _, _, live, inputs, _, _ in good], return_exceptions=True)
        except Exception as e:  # noqa: BLE001 - answered as the requests' error
            results = [e] * len(good)
        now = time.monotonic()
        to_triton = self.layout.to_triton
        for (i, key, live, _, wanted, end), out in zip(good, results):
            if isinstance(out, BaseException):
                responses[i] = error_response(pb_utils, out)
            else:
                tensors = [to_tensor(pb_utils, n, to_triton(n, a)) for n, a in out.items() if not wanted or n in wanted]
                responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
            live.last_used = now
            if end:
                self._finish(key, live)

    def _finish(self, key, live: _Live) -> None:
        """After a sequence's last request (END): free its state."""
        with self._lock:
            if self._live.get(key) is live:
                del self._live[key]
        live.seq.close()
