"""A Model's statistics (Model.stats()): per stream, per gear, device memory, faults, tiers."""

from __future__ import annotations

from gert import _cann
from gert.core import trace
from gert.core.executor import GearStats
from gert.core.resolve import key_label
from gert.tools import display


def graph_memory(workers: list) -> dict:
    """Per graph key ("H=320,W=448", "H=-1,W=-1" for the dynamic graph): static or not, the streams it is loaded on
    and the bytes it holds on them together (GE's summary: const + feature memory; gert/core/host_memory.py)."""
    out: dict = {}
    for w in workers:
        for key, entry in list(w.graphs.items()):  # a snapshot: the tiers install graphs meanwhile
            label = key_label(key)
            g = out.setdefault(label, {"static": entry.is_static, "streams": 0, "memory": 0})
            g["streams"] += 1
            g["memory"] += entry.memory
    return out


def collect_stats(workers: list, faults, tiers: object | None) -> display.Stats:
    """The stats of ``workers`` (gert.core.executor.Worker), the model's fault counters
    (gert.core.recovery.FaultStats) and its tiers (gert.core.tiers.Tiers, or None), as one gert.tools.display.Stats."""
    streams = [dict(vars(w.stats)) for w in workers]  # flat dataclasses; asdict() deep-copies (slow)
    gears: dict = {}
    for w in workers:
        for k, g in list(w.gear_stats.items()):  # a snapshot: workers add gears while running
            agg = gears.setdefault(k, GearStats())
            agg.hits += g.hits
            agg.real_elements += g.real_elements
            agg.padded_elements += g.padded_elements
            agg.padding_seconds += g.padding_seconds
    memory = {}
    for d in sorted({w.device for w in workers}):
        info = _cann.memory_info(d)
        memory[d] = {"used": info.used, "total": info.total}
    out = display.Stats(
        streams=streams,
        gears={
            k: {"hits": g.hits, "padding_ratio": g.padding_ratio, "padding_seconds": g.padding_seconds}
            for k, g in gears.items()
        },
        device_memory=memory,
        **vars(faults),  # failed_tasks, timeouts, aborted_streams, recoveries, oom_retries
    )
    for k in (
        "compiles",
        "static_hits",
        "dynamic_hits",
        "background_compiles",
        "request_path_compiles",
        "cache_hits",
        "cache_misses",
    ):
        out[k] = sum(s[k] for s in streams)
    out["graphs"] = graph_memory(workers)
    if tiers is not None:
        out["tiers"] = tiers.stats()
    if trace.last is not None:  # a trace ran (gert.trace): per stage of these streams, count, mean and p99 (ms)
        stages = trace.last.stage_stats(workers)
        if stages:
            out["stages"] = stages
    return out
