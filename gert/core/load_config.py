"""LoadConfig: every option of ``gert.load`` with its default, checked once (issue 39 step 5).

``gert.load(path, **options)`` builds one with ``LoadConfig.from_kwargs``; gert_triton's ``parse_parameters`` reads
config.pbtxt's strings into its fields and ``gert bench`` builds one per configuration. The checks that need no
model and no device are here, each raising GertError (``OptionError``) naming the option, what it takes and what it
got; what needs the model (a gear's dim name, pad_value's input names, batch_dim's axes: gert/core/shapes.py) or the
device (device ids, core counts: gert/model.py) is checked where those are known. After pytriton's ``ModelConfig``.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from gert.core import host_memory as _host_memory
from gert.core.cache_trust import parse_mode
from gert.core.dynamic import BatchingConfig
from gert.core.shapes import POLICIES
from gert.core.tiers import COMPILE_SHARE, HOT_AFTER, HOT_WINDOW
from gert.core.option_error import OptionError, cann_ops_mode
from gert.errors import GertError

FALLBACKS = (None, "cpu")  # gert.load(fallback=...): gert/cpu_model.py


def _int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionError(name, f"{name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise OptionError(name, f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _cores(name: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise OptionError(name, f"{name}={value!r} is out of range: expected an int >= 1 (at most the device's cores)")
    return int(value)


def _real(name: str, value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionError(name, f"{name} must be a number {what}, got {type(value).__name__} {value!r}")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if type(value).__name__ not in ("bool", "bool_"):
        raise OptionError(name, f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def _names(name: str, value: Any, what: str) -> tuple:
    """A str or a sequence of strs as a tuple of strs."""
    items = (value,) if isinstance(value, str) else value
    if isinstance(items, (bytes, Mapping)) or not hasattr(items, "__iter__"):
        raise OptionError(name, f"{name} must be {what}, got {type(value).__name__} {value!r}")
    items = tuple(items)
    if not all(isinstance(v, str) for v in items):
        raise OptionError(name, f"{name} must be {what}, got {value!r}")
    return items


def _str_map(name: str, value: Any, what: str) -> dict:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise OptionError(name, f"{name} must be a dict of {what}, got {type(value).__name__} {value!r}")
    return dict(value)


def _devices(value: Any) -> tuple:
    items = (value,) if isinstance(value, numbers.Integral) else value
    try:
        devices = tuple(_int("devices", d, 0) for d in items)
    except (OptionError, TypeError):
        raise OptionError("devices", f"devices must be device ids (ints >= 0), got {value!r}") from None
    if not devices:
        raise OptionError("devices", "devices must name at least one device")
    return devices


def _gears(value: Any) -> Optional[dict]:
    if value is None:
        return None
    out = {}
    for dim, sizes in _str_map("gears", value, "dim name -> sizes").items():
        try:
            g = tuple(sorted({int(x) for x in sizes if not isinstance(x, bool) and int(x) == x}))
            ok = bool(g) and g[0] > 0 and len(g) == len(set(sizes))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            shown = list(sizes) if isinstance(sizes, (list, tuple, range)) else sizes
            raise OptionError("gears", f"gears for '{dim}' must be positive integers, got {shown!r}")
        out[dim] = g
    return out or None


def _policies(value: Any) -> Optional[dict]:
    if value is None:
        return None
    policies = _str_map("shape_policy", value, "dim name -> policy")
    for dim, p in policies.items():
        if p not in POLICIES:
            raise OptionError("shape_policy", f"shape_policy for '{dim}' is {p!r}; choose one of {list(POLICIES)}")
    return policies or None


def _pad_value(value: Any) -> Union[float, dict]:
    values = _str_map("pad_value", value, "input name -> number") if isinstance(value, Mapping) else {"": value}
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            where = f" for '{name}'" if name else ""
            raise OptionError("pad_value", f"pad_value{where} must be a number, got {type(v).__name__} {v!r}")
    return values if isinstance(value, Mapping) else value


def _output_dims(value: Any) -> Optional[dict]:
    if value is None:
        return None
    out = _str_map("output_dims", value, "output name -> {axis: dim name}")
    for name, axes in out.items():
        if not isinstance(axes, Mapping) or not all(isinstance(a, numbers.Integral) for a in axes):
            raise OptionError(
                "output_dims", f"output_dims for '{name}' must be a dict of axis -> dim name, got {axes!r}"
            )
    return out or None


def _state(value: Any) -> Optional[dict]:
    if not value:
        return None
    state = _str_map("state", value, "state input -> state output names")
    if not all(isinstance(v, str) and v for v in state.values()):
        raise OptionError("state", f"state must map each state input to its output's name, got {value!r}")
    return state


def _batch_dim(value: Any) -> Union[str, tuple, None]:
    if value is None or isinstance(value, str):
        return value
    return _names("batch_dim", value, "a dim name or 'tensor:axis' strings")


def _rows_independent(value: Any) -> Union[bool, tuple, None]:
    if value is None or isinstance(value, bool):
        return value
    return _names("rows_independent", value, "True, False or output names")


def _precision_mode(value: Any) -> Optional[str]:
    if value is None:
        return None
    from gert.preview import precision  # GE's mode table (tests/test_layout.py CORE_EXCEPTIONS)

    try:
        return precision.normalise(value).given
    except GertError as e:
        raise OptionError("precision_mode", str(e)) from None


def _host_memory_bytes(value: Any) -> Optional[int]:
    try:
        return None if value is None else _host_memory.parse(value)
    except GertError as e:
        raise OptionError("host_memory", str(e)) from None


def _cache_mode(value: Any) -> Optional[int]:
    try:
        return None if value is None else parse_mode(value)
    except GertError as e:
        raise OptionError("cache_mode", str(e)) from None


def _dynamic_batching(value: Any) -> Optional[BatchingConfig]:
    try:
        return BatchingConfig.parse(value)
    except GertError as e:
        raise OptionError("dynamic_batching", str(e)) from None


@dataclass(frozen=True)
class LoadConfig:
    """How ``gert.load`` loads a model: every option, with its default (docs/python-api.md tells what each does). Checked
    and normalised when built (dicts and tuples of checked values; ``host_memory`` in bytes, ``cache_mode`` an int,
    ``dynamic_batching`` a BatchingConfig or None), so equal settings give equal configs."""

    devices: tuple = (0,)
    streams: Optional[int] = None  # None: two per cube core of each device, 2..16 (gert/core/stream_layout.py)
    cube_cores: Optional[int] = None
    vector_cores: Optional[int] = None
    gears: Optional[Mapping[str, Any]] = None
    shape_policy: Optional[Mapping[str, str]] = None
    pad_value: Union[float, Mapping[str, float]] = 0
    max_batch: Optional[int] = None
    options: Optional[Mapping[str, str]] = None
    output_dims: Optional[Mapping[str, Mapping[int, str]]] = None
    max_exact_graphs: int = 16
    split_batch: bool = False
    request_timeout_s: Optional[float] = None
    hot_after: int = HOT_AFTER
    hot_window: int = HOT_WINDOW
    compile_share: float = COMPILE_SHARE
    state: Optional[Mapping[str, str]] = None
    batch_dim: Union[str, tuple, None] = None
    sequence_wait_s: float = 0.0
    cache_dir: Optional[Union[str, os.PathLike]] = None
    cache_mode: Union[int, str, None] = None
    trust_foreign_entries: bool = False
    cann_ops: Optional[str] = None
    precision_mode: Optional[str] = None
    keep_fp32: tuple = ()
    dynamic_batching: Union[bool, Mapping, BatchingConfig, None] = True
    host_memory: Union[int, str, None] = None
    rows_independent: Union[bool, tuple, None] = None
    load_analysis: str = "inline"
    fallback: Optional[str] = None

    def __post_init__(self) -> None:
        for name, value in self._checked().items():
            object.__setattr__(self, name, value)

    def _checked(self) -> dict:
        """Every field's checked, normalised value (OptionError naming the first bad one)."""
        hot_after = _int("hot_after", self.hot_after, 1)
        hot_window = _int("hot_window", self.hot_window, 1)
        if hot_window < hot_after:
            raise OptionError("hot_window", f"hot_window must be >= hot_after ({hot_after}), got {hot_window}")
        share = _real("compile_share", self.compile_share, "in (0, 1]")
        if not 0 < share <= 1:
            raise OptionError("compile_share", f"compile_share must be in (0, 1], got {self.compile_share}")
        timeout = None if self.request_timeout_s is None else _real("request_timeout_s", self.request_timeout_s, "> 0")
        if timeout is not None and not timeout > 0:
            raise OptionError(
                "request_timeout_s", f"request_timeout_s must be > 0 seconds, got {self.request_timeout_s}"
            )
        wait = _real("sequence_wait_s", self.sequence_wait_s, ">= 0")
        if not wait >= 0:
            raise OptionError("sequence_wait_s", f"sequence_wait_s must be >= 0, got {self.sequence_wait_s}")
        if self.fallback not in FALLBACKS:
            raise OptionError("fallback", f"fallback: expected None or 'cpu', got {self.fallback!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise OptionError("cache_dir", f"cache_dir must be a path, got {type(self.cache_dir).__name__}")
        return {
            "devices": _devices(self.devices),
            "streams": None if self.streams is None else _int("streams", self.streams, 1),
            "cube_cores": _cores("cube_cores", self.cube_cores),
            "vector_cores": _cores("vector_cores", self.vector_cores),
            "gears": _gears(self.gears),
            "shape_policy": _policies(self.shape_policy),
            "pad_value": _pad_value(self.pad_value),
            "max_batch": None if self.max_batch is None else _int("max_batch", self.max_batch, 1),
            "options": None if self.options is None else _options(self.options),
            "output_dims": _output_dims(self.output_dims),
            "max_exact_graphs": _int("max_exact_graphs", self.max_exact_graphs, 1),
            "split_batch": _flag("split_batch", self.split_batch),
            "request_timeout_s": timeout,
            "hot_after": hot_after,
            "hot_window": hot_window,
            "compile_share": share,
            "state": _state(self.state),
            "batch_dim": _batch_dim(self.batch_dim),
            "sequence_wait_s": wait,
            "cache_mode": _cache_mode(self.cache_mode),
            "trust_foreign_entries": _flag("trust_foreign_entries", self.trust_foreign_entries),
            "cann_ops": None if self.cann_ops is None else cann_ops_mode(self.cann_ops),
            "precision_mode": _precision_mode(self.precision_mode),
            "keep_fp32": _names("keep_fp32", self.keep_fp32, "node names or op types"),
            "dynamic_batching": _dynamic_batching(self.dynamic_batching),
            "host_memory": _host_memory_bytes(self.host_memory),
            "rows_independent": _rows_independent(self.rows_independent),
            "load_analysis": _load_analysis(self.load_analysis),
        }

    @property
    def batching(self) -> Optional[BatchingConfig]:
        """``dynamic_batching`` as checked: its settings, or None when it is off."""
        return self.dynamic_batching if isinstance(self.dynamic_batching, BatchingConfig) else None

    @classmethod
    def from_kwargs(cls, **options: Any) -> "LoadConfig":
        """The config of ``gert.load(model, **options)``; TypeError naming an option gert.load does not take."""
        _known(options)
        return cls(**options)

    def replace(self, **options: Any) -> "LoadConfig":
        """This config with ``options`` changed (checked as from_kwargs checks them)."""
        _known(options)
        return dataclasses.replace(self, **options)


def _load_analysis(value: Any) -> str:
    """Where the load's analysis runs (gert/core/load_analysis.py): "inline" or "process"."""
    if value not in ("inline", "process"):
        raise OptionError("load_analysis", f"load_analysis: expected 'inline' or 'process', got {value!r}")
    return value


def _options(value: Any) -> Optional[dict]:
    """GE options: str keys, values as the strs GE takes."""
    if not isinstance(value, Mapping):
        raise OptionError("options", f"options must be a dict of GE option -> value, got {type(value).__name__}")
    for k in value:
        if not isinstance(k, str):
            raise OptionError("options", f"options: key {k!r} is not a str")
    return {k: str(v) for k, v in value.items()} or None


OPTIONS = tuple(f.name for f in dataclasses.fields(LoadConfig))


def _known(options: Mapping[str, Any]) -> None:
    for name in options:
        if name not in OPTIONS:
            import difflib

            close = difflib.get_close_matches(name, OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"gert.load() got an unexpected keyword argument {name!r}{hint}")
