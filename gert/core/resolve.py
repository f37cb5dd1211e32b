"""Resolve: the sizes a request's graph runs at (a ``pad`` dim's gear, the size itself for ``exact``, -1 for
``dynamic``) and its graph key, from the request's real sizes (docs/architecture.md, "The data path", step 3)."""

from __future__ import annotations

from gert.core.shapes import ShapePlan
from gert.errors import GertError

_RESOLVED_KEPT = 1024  # remembered sizes -> (run sizes, graph key) (cleared when full)


def key_label(key: tuple) -> str:
    """A graph key as stats(), traces, logs and errors name it: "batch=8,seq=32" ("H=-1,W=-1": the dynamic graph;
    "static": a model without dynamic dims). The one place it is formatted."""
    return ",".join(f"{k}={v}" for k, v in key) or "static"


class Resolver:
    """A model's resolve step. ``pads``: its batch is padded up to gears (and run in chunks above the largest);
    ``why``: why its rows cannot be padded, merged or split, when they cannot (gert.core.batching.Batcher.why)."""

    def __init__(self, plan: ShapePlan, pads: bool, why: str):
        self.plan = plan
        self.pads = pads
        self.why = why
        self._resolved: dict = {}

    def resolve(self, sizes: dict) -> tuple:
        """(run sizes, graph key) for the real sizes; remembered per sizes (errors are not)."""
        known = self._resolved.get(tuple(sizes.items()))
        if known is not None:
            return dict(known[0]), known[1]
        dims = self.plan.dims
        run_sizes = {}
        for name, value in sizes.items():
            dim = dims[name]
            axes = ", ".join(f"{i}:{a}" for i, a in dim.axes)
            run_sizes[name] = dim.resolve(value, f"inputs ({axes})")
            if name == "batch" and run_sizes[name] != value and not self.pads:
                raise GertError(
                    f"inputs ({axes}): a batch of {value} rows would be padded to {run_sizes[name]} or "
                    f"cut into chunks, but this model's rows cannot be padded, merged or split "
                    f"({self.why}); send a batch of one of its gears {list(dim.gears)}, or load it "
                    f"with shape_policy={{'batch': 'exact'}}"
                )
        key = tuple(sorted((n, -1 if dims[n].policy == "dynamic" else v) for n, v in run_sizes.items()))
        if len(self._resolved) >= _RESOLVED_KEPT:
            self._resolved.clear()
        self._resolved[tuple(sizes.items())] = (dict(run_sizes), key)
        return run_sizes, key
