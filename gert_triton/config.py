"""config.pbtxt ``parameters`` -> gert.load() arguments: each text read here, each value checked by gert.LoadConfig.

Keys (all string values, as Triton passes them):
  onnx_file      the ONNX file, relative to the version dir, then to the model dir; may not name a path outside the
                 model dir (absolute, or '..' past it). Default: model.onnx there, which may be a symlink to anywhere
                 (a shared model store), as Triton's own backends read <model dir>/<version>/<default_model_filename>
  streams        streams (executors) per device. Default (with cube_cores / vector_cores unset too): see
                 stream_layout(): two streams sharing the cores by load for a batching model, else one
  cube_cores, vector_cores   per-stream core limits (core locking)
  gears          "batch:1,4,8;W:160,320,640". Batch gears under a non-pad batch policy (exact / dynamic / auto): a
                 batch Triton merged to another size runs as gear-sized pieces (gert_triton.gears); the gears must
                 make up every size up to max_batch_size
  shape_policy   "W:pad;H:exact" (pad, exact, dynamic, auto). Default: pad for the batch axis, exact for dims with
                 gears, auto for the rest (a new size runs at once on the dynamic-shape graph; hot sizes get static
                 graphs compiled in the background)
  hot_after, hot_window   auto: a size is hot once seen hot_after times within the last hot_window requests
                 (defaults 4 and 256)
  max_exact_graphs       static graphs kept per stream for exact / auto sizes (default 16)
  compile_share  auto: the share of one CPU that background compiles may take on average, in (0, 1] (default 0.25):
                 after a compile of d seconds the compiler rests d * (1 - share) / share seconds
  host_memory    bytes the auto policy's static graphs may hold per model instance ("2GB", "512MB", "1073741824"):
                 a hot size whose graphs would not fit runs on the dynamic graph (default: 1/8 of the machine's
                 memory, or of the container's limit; gert/core/host_memory.py)
  pad_value      a number
  max_batch      largest batch gear (defaults to the config's max_batch_size)
  device_ids     "0,1": spread this instance over several devices (default: the instance's device)
  metrics_interval_ms   publish the gert_* metrics at most this often (default 1000; 0: after every batch). Each
                 metric call is an IPC round trip to the server, which competes with the requests (at 100 ms: ~10 us
                 of stub CPU per request with 32 GRU sequences, benchmarks/bench_sequences.py); Triton's own
                 per-interval metrics default to 2000 ms (--metrics-interval-ms)
  warmup         "true"/"false": compile every declared gear combination on every stream at load (default true),
                 and for auto dims the dynamic-shape graph, so that no request pays a compile
  check_cancelled  "auto"/"true"/"false": ask each request whether its client cancelled it right before its batch
                 runs, and answer a cancelled one CANCELLED without running it. Each ask is one IPC round trip
                 between the stub and the server (PP-OCR cls under bench_triton: 10 % of the stub's time). "auto"
                 (default) asks while the asks cost at most 2 % of the batch's run, both measured by the model: a
                 model whose requests run in about an ask's time runs a request cancelled that late instead
                 (cheaper than asking all); "true" always asks; "false" never does. Sequence steps are asked unless
                 "false" (a cancelled step must not change its state). gert_triton/cancellation.py
  request_timeout_ms   a request not done on the device in this time fails with UNAVAILABLE; its stream is aborted and
                 reused (default: no limit)
  split_batch    "true"/"false": split each batch over the idle streams (default: true when streams > 1, since
                 Triton runs one execute() per instance at a time, this is how one instance uses several streams)
  state          "h=h_out;c=c_out" (the older "h:h_out" is read too; names may contain ':', "h:0=h_out:0"): a
                 stateful model served with Triton's sequence batcher; each state input is kept on the device per
                 correlation id (gert_triton.sequences) and clients send only the step inputs
  batch_dim      the batch axis where it is not axis 0: an ONNX dim name ("N") or axes ("x:1,h:1")
  cache_dir      GE's compile cache directory, relative to the model dir and inside it (created if missing): graphs
                 compiled once are loaded by later loads, restarts and other instances. An absolute path (or a link
                 out of the model dir) only inside GERT_CACHE_DIR, the server's cache root (default: GERT_CACHE_DIR)
  cache_mode     octal mode of the cache directory ("0700" default, "0770" / "2770" for one shared with the
                 directory's group; default GERT_CACHE_MODE): who besides this user and root may write it. A
                 directory others can write is refused (see gert/core/cache_trust.py)
  trust_foreign_entries  "true"/"false": serve cache entries gert did not record (another tool's) as GE would
                 (default false: such an entry is compiled again)
  cann_ops       "warn" / "strict" / "off": what to do with a model a stock CANN 8.x ONNX parser would refuse
                 (gert.load(cann_ops=...); default: GERT_CANN_OPS, else warn)
  precision_mode GE precision mode (ge.exec.precision_mode or _v2 value: force_fp16, fp16, origin, ...), emulated
                 by the host NPU (default must_keep_origin_dtype: results equal ONNX Runtime's)
  keep_fp32      "name1,OpType2": nodes / op types kept in fp32 under precision_mode
  trace_file     write a Chrome trace-event JSON (Perfetto, chrome://tracing) of every request this instance serves,
                 with each execute()'s batches by Triton request id (relative to the model dir and inside it; an
                 absolute path, or a link out of the model dir, only inside the directory GERT_TRACE_DIR names in the
                 server's environment; default: GERT_TRACE, a directory, if set; gert_triton/tracing.py)
  load_analysis  "process" / "inline": where the load's analysis of the model (its I/O, row proofs, output axes:
                 ONNX's parser and shape inference) runs. Default process: a child process that exits when done, so
                 that the stub never imports onnx (~15 MB per stub; gert/core/load_analysis.py)
  ge.K           GEInitialize option K;  session.ge.K  Session option;  graph.ge.K  AddGraph option
Triton's own keys (EXECUTION_ENV_PATH, FORCE_CPU_ONLY_INPUT_TENSORS) are left to Triton.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from gert.core.load_config import LoadConfig, OptionError
from gert.errors import GertError

TRITON_KEYS = {"EXECUTION_ENV_PATH", "FORCE_CPU_ONLY_INPUT_TENSORS"}
KNOWN_KEYS = {
    "onnx_file",
    "streams",
    "cube_cores",
    "vector_cores",
    "gears",
    "shape_policy",
    "pad_value",
    "max_batch",
    "device_ids",
    "split_batch",
    "check_cancelled",
    "metrics_interval_ms",
    "warmup",
    "request_timeout_ms",
    "hot_after",
    "hot_window",
    "max_exact_graphs",
    "compile_share",
    "host_memory",
    "state",
    "batch_dim",
    "cache_dir",
    "cache_mode",
    "trust_foreign_entries",
    "cann_ops",
    "precision_mode",
    "keep_fp32",
    "trace_file",
    "load_analysis",
}


MAX_STREAMS = 64  # per device: each stream is a worker thread with its own Session and buffers


class ConfigError(GertError):
    """A config.pbtxt parameter is malformed or unknown; the message names the key."""


@dataclass
class GertParams:
    """A model config's parameters: the gert.load options it sets (``load``: LoadConfig field -> value, checked
    and read as LoadConfig reads them; declared there, not here) and gert_triton's own."""

    load: dict = field(default_factory=dict)  # the LoadConfig fields the config sets (options: the ge.* keys)
    onnx_file: Optional[str] = None
    metrics_interval_ms: int = 1000
    warmup: bool = True
    check_cancelled: str = "auto"  # ask is_cancelled() right before a batch runs: auto / true / false (AskPolicy)
    cache_dir: Optional[str] = None  # as given: absolute, or relative to the model dir (see cache_path)
    trace_file: Optional[str] = None  # gert_triton/tracing.py (else GERT_TRACE, if set)

    @property
    def load_analysis(self) -> str:
        """Where the load's analysis runs: the parameter, else "process" (gert_triton's default; gert.load's is
        "inline")."""
        return self.get("load_analysis", "process")

    def get(self, option: str, default=None):
        """The value the config sets for LoadConfig field ``option``, else ``default``."""
        return self.load.get(option, default)

    def load_config(self, **decided) -> LoadConfig:
        """The gert.LoadConfig of this config: the fields it sets, with ``decided`` (what gert_triton chooses itself:
        devices, the stream layout, split_batch, max_batch, cache_dir) over them."""
        return LoadConfig.from_kwargs(**{**self.load, **decided})


# config.pbtxt key -> the LoadConfig field (gert.load option) it sets; the other KNOWN_KEYS are gert_triton's own
LOAD_KEYS = {
    "streams": "streams",
    "cube_cores": "cube_cores",
    "vector_cores": "vector_cores",
    "gears": "gears",
    "shape_policy": "shape_policy",
    "max_batch": "max_batch",
    "device_ids": "devices",
    "split_batch": "split_batch",
    "request_timeout_ms": "request_timeout_s",
    "hot_after": "hot_after",
    "hot_window": "hot_window",
    "max_exact_graphs": "max_exact_graphs",
    "compile_share": "compile_share",
    "host_memory": "host_memory",
    "state": "state",
    "batch_dim": "batch_dim",
    "cache_mode": "cache_mode",
    "cann_ops": "cann_ops",
    "precision_mode": "precision_mode",
    "keep_fp32": "keep_fp32",
    "pad_value": "pad_value",
    "trust_foreign_entries": "trust_foreign_entries",
    "load_analysis": "load_analysis",
}

# fields whose parameter text LoadConfig reads itself ("2GB", "0770", "Strict", a precision mode's name)
_NORMALISED = ("host_memory", "cache_mode", "cann_ops", "precision_mode")


def _integer(key: str, value: str) -> int:
    """The text of an integer parameter (LoadConfig checks its range)."""
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"parameter '{key}': expected an integer, got {value!r}") from None


def _int(key: str, value: str, minimum: int = 1, maximum: int = 2**31 - 1) -> int:
    """An integer parameter of gert_triton's own (not a gert.load option), in [minimum, maximum]."""
    v = _integer(key, value)
    if not minimum <= v <= maximum:
        raise ConfigError(f"parameter '{key}': must be in [{minimum}, {maximum}], got {v}")
    return v


def _number(key: str, value: str, what: str = "a number") -> float:
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"parameter '{key}': expected {what}, got {value!r}") from None


_FLAG_WORDS = ("true", "false", "1", "0", "yes", "no")


def _flag(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v not in _FLAG_WORDS:
        raise ConfigError(f"parameter '{key}': expected true or false, got {value!r}")
    return v in ("true", "1", "yes")


def _dim_map(key: str, value: str, parse_values) -> dict:
    """'a:1,2;b:3' -> {'a': parse_values('1,2'), 'b': ...}. Dim names may contain ':' ('x:3:160,320')."""
    out = {}
    for item in filter(None, (s.strip() for s in value.split(";"))):
        name, sep, rest = item.rpartition(":")
        if not sep or not name:
            raise ConfigError(f"parameter '{key}': entry {item!r} is not 'dim:value'")
        out[name.strip()] = parse_values(rest.strip(), name.strip())
    if not out:
        raise ConfigError(f"parameter '{key}': empty")
    return out


def _sizes(text: str, dim: str) -> list:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"parameter 'gears': sizes for '{dim}' must be integers, got {text!r}") from None


def _device_ids(key: str, value: str) -> tuple:
    try:
        return tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"parameter '{key}': expected '0,1,...', got {value!r}") from None


def _keep_fp32(key: str, value: str) -> tuple:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    if not names:
        raise ConfigError("parameter 'keep_fp32': empty (give node names or op types, comma-separated)")
    return names


# the text of each load parameter -> its value (its syntax only: what the value may be is LoadConfig's check)
_PARSE: dict = {
    **dict.fromkeys(
        ("streams", "cube_cores", "vector_cores", "max_batch", "hot_after", "hot_window"),
        _integer,
    ),
    "request_timeout_ms": lambda k, v: _integer(k, v) / 1000,
    "max_exact_graphs": _integer,
    "compile_share": lambda k, v: _number(k, v, "a number in (0, 1]"),
    "host_memory": lambda k, v: v,
    "cache_mode": lambda k, v: v,
    "cann_ops": lambda k, v: v,
    "precision_mode": lambda k, v: v,
    "gears": lambda k, v: _dim_map(k, v, _sizes),
    "shape_policy": lambda k, v: _dim_map(k, v, lambda text, dim: text),
    "split_batch": _flag,
    "keep_fp32": lambda k, v: list(_keep_fp32(k, v)),
    "state": lambda k, v: parse_state(v),
    "batch_dim": lambda k, v: parse_batch_dim(v),
    "device_ids": _device_ids,
    "pad_value": _number,
    "trust_foreign_entries": _flag,
    "load_analysis": lambda k, v: v.strip(),
}


def _own_parameter(p: GertParams, key: str, value: str) -> None:
    """A parameter of gert_triton's own (not a gert.load option) into ``p``."""
    if key == "cache_dir":  # resolved against the model dir (cache_path), then given to gert.load
        if not value.strip():
            raise ConfigError("parameter 'cache_dir': empty (leave it out for no cache)")
        p.cache_dir = value.strip()
    elif key == "trace_file":
        if not value.strip() or value.strip().endswith(("/", os.sep)):
            raise ConfigError(
                f"parameter 'trace_file': expected a file path (relative to the model's directory), got {value!r}"
            )
        p.trace_file = value.strip()
    elif key == "onnx_file":
        if not value.strip():
            raise ConfigError("parameter 'onnx_file': empty")
        p.onnx_file = value.strip()
    elif key == "metrics_interval_ms":
        p.metrics_interval_ms = _int(key, value, minimum=0)
    elif key == "check_cancelled":
        v = value.strip().lower()
        if v != "auto" and v not in _FLAG_WORDS:
            raise ConfigError(f"parameter 'check_cancelled': expected auto, true or false, got {value!r}")
        p.check_cancelled = v if v == "auto" else str(_flag(key, v)).lower()
    else:  # warmup
        setattr(p, key, _flag(key, value))


def _checked(p: GertParams) -> None:
    """Check the load options ``p`` sets as gert.load does (one LoadConfig), naming the parameter of a bad one; the
    values LoadConfig reads from their text (_NORMALISED) are kept as it reads them."""
    try:
        config = p.load_config()
    except OptionError as e:
        key = next((k for k, f in LOAD_KEYS.items() if f == e.option), e.option)
        text = str(e)
        if key == e.option and text.startswith(f"{key}: "):  # "cann_ops: expected ..."
            text = text[len(key) + 2 :]
        elif key == e.option and text.startswith(f"{key} must "):  # "hot_after must be >= 1, got 0"
            text = text[len(key) + 1 :]
        raise ConfigError(f"parameter '{key}': {text}") from None
    for name in _NORMALISED:
        if name in p.load:
            p.load[name] = getattr(config, name)
    if p.get("streams", 0) > MAX_STREAMS:
        raise ConfigError(f"parameter 'streams': must be in [1, {MAX_STREAMS}], got {p.get('streams')}")


def parse_parameters(raw: dict) -> GertParams:
    """Parse the ``parameters`` of a model config (``{key: {"string_value": str}}`` or ``{key: str}``): each text
    read into its field here, every load option checked once by gert.LoadConfig (``_checked``)."""
    p = GertParams()
    for key, entry in (raw or {}).items():
        value = entry.get("string_value", "") if isinstance(entry, dict) else entry
        if key in TRITON_KEYS:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"parameter '{key}': expected a string value, got {type(value).__name__} {value!r}")
        if key.startswith("ge."):
            p.load.setdefault("options", {})["global." + key] = value
        elif key.startswith("session.ge.") or key.startswith("graph.ge."):
            p.load.setdefault("options", {})[key] = value
        elif key not in KNOWN_KEYS:
            raise ConfigError(
                f"unknown parameter '{key}'; gert_triton takes {sorted(KNOWN_KEYS)} and ge.*, "
                "session.ge.*, graph.ge.* keys"
            )
        elif key in _PARSE:
            p.load[LOAD_KEYS[key]] = _PARSE[key](key, value)
        else:
            _own_parameter(p, key, value)
    _checked(p)
    return p


def parse_state(value: str) -> dict:
    """'h=h_out;c=c_out' -> {'h': 'h_out', 'c': 'c_out'}. Names may contain ':' (tf2onnx's 'h:0=h_out:0'); the older
    'h:h_out' form (split at the last ':') is read when an entry has no '='."""
    out = {}
    for item in filter(None, (s.strip() for s in value.split(";"))):
        name, sep, output = item.partition("=") if "=" in item else item.rpartition(":")
        name, output = name.strip(), output.strip()
        if not sep or not name:
            raise ConfigError(f"parameter 'state': entry {item!r} is not 'input=output'")
        if not output or "," in output or "=" in output:
            raise ConfigError(f"parameter 'state': input '{name}' needs one output name, got {output!r}")
        out[name] = output
    if not out:
        raise ConfigError("parameter 'state': empty")
    return out


def state_parameter(state: dict) -> str:
    """The ``state`` parameter's value for {input: output} (parse_state reads it back)."""
    for name in list(state) + list(state.values()):
        if not name or any(c in name for c in ";="):
            raise ConfigError(
                f"state tensor name {name!r} cannot be written in parameter 'state' (';' and '=' separate its entries)"
            )
    return ";".join(f"{i}={o}" for i, o in state.items())


def parse_batch_dim(value: str):
    """'N' -> 'N'; 'x:1,h:1' -> ['x:1', 'h:1'] (gert.load's batch_dim)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ConfigError("parameter 'batch_dim': empty")
    if len(items) == 1 and ":" not in items[0]:
        return items[0]
    for item in items:
        name, sep, axis = item.rpartition(":")
        if not sep or not name or not axis.isdigit():
            raise ConfigError(
                f"parameter 'batch_dim': {item!r} is not 'tensor:axis'; give a dim name ('N') or axes ('x:1,h:1')"
            )
    return items


@dataclass(frozen=True)
class StreamLayout:
    streams: int
    cube_cores: Optional[int]
    vector_cores: Optional[int]
    auto: bool  # chosen by stream_layout, not given in the config


def instance_count(config: Mapping) -> int:
    """The model's instances by its config's instance_group (each group's ``count``, default 1; a GPU group's
    count is per GPU listed): an upper bound on the instances that share one device."""
    total = 0
    for group in config.get("instance_group") or []:
        count = int(group.get("count", 1) or 1)
        gpus = group.get("gpus") or []
        total += count * (len(gpus) if group.get("kind") == "KIND_GPU" and gpus else 1)
    return max(1, total)


def stream_layout(p: GertParams, batching: bool, device_cores: Callable[[], tuple], instances: int = 1) -> StreamLayout:
    """Streams and per-stream core limits. Explicit parameters win (streams defaults to 1 once a core limit is
    given). With none of streams / cube_cores / vector_cores set, a batching model whose device has at least two
    cube cores gets two streams that share the device's cores by load (gert/core/_core_share.pyx: a stream running
    alone gets every core, two running split them), and a batch is split over them where that ran faster than the
    whole batch on one stream (gert/core/split_choice.py): the cores run rows in parallel instead of one request's
    operators where the model gains from it (on the host NPU: two single-threaded ONNX Runtime runs instead of one
    run with two intra-op threads; PP-OCR cls gains, det does not), and a lone request gets every core.
    benchmarks/bench_triton.py measures the layouts. Otherwise (also with split_batch "false") one stream over all
    cores. With several ``instances`` (instance_group), one stream each: Triton already runs one execute() per
    instance side by side, and the instances' processes share the device's cores by load as streams do (two
    instances of one stream served PP-OCR cls from 16 clients at 975 requests/s, two of two streams at 943;
    docs/triton.md).
    ``device_cores()``: the (cube, vector) core counts of the instance's device with the fewest (asked only when
    needed)."""
    streams, cube, vector = p.get("streams"), p.get("cube_cores"), p.get("vector_cores")
    if streams is not None or cube is not None or vector is not None:
        return StreamLayout(streams or 1, cube, vector, auto=False)
    if not batching or p.get("split_batch") is False or instances > 1:  # one execute() at a time uses one stream
        return StreamLayout(1, None, None, auto=True)
    cube, _ = device_cores()
    if cube < 2:
        return StreamLayout(1, None, None, auto=True)
    return StreamLayout(2, None, None, auto=True)


def served_version(model_dir: str, version_policy: Optional[dict]) -> tuple:
    """(model dir, version) whose ONNX file auto-complete reads. The Python backend runs auto_complete_config for
    one model version, and its stub reports that version's dir (<model dir>/<version>): that version. A stub that
    reports the model dir: the highest version the config's ``version_policy`` serves (Triton's rule: ``latest``
    (default, num_versions 1) the highest-numbered version dirs, ``all`` every one, ``specific`` those listed),
    the way onnxruntime_backend reads <model dir>/<version being loaded>/model.onnx."""
    norm = os.path.normpath(model_dir)
    if os.path.basename(norm).isdigit():
        return os.path.dirname(norm), os.path.basename(norm)
    have = (
        sorted((int(d) for d in os.listdir(norm) if d.isdigit() and os.path.isdir(os.path.join(norm, d))), reverse=True)
        if os.path.isdir(norm)
        else []
    )
    policy = version_policy or {}
    if "specific" in policy:
        listed = {int(v) for v in (policy["specific"] or {}).get("versions", [])}
        have = [v for v in have if v in listed]
    elif "all" not in policy:
        n = int(((policy.get("latest") or {}).get("num_versions")) or 1)
        have = have[:n]
    return norm, str(have[0]) if have else "1"


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def find_onnx_file(model_dir: str, version: str, onnx_file: Optional[str]) -> str:
    """The ONNX file to serve: ``onnx_file`` (default model.onnx) in the version dir, else in the model dir. As in
    Triton's own backends, the default file may be a symlink to anywhere (a shared model store); a path given in
    ``onnx_file`` may not point outside the model dir (absolute, '..' past it, or a link out of it)."""
    model_dir = os.path.abspath(model_dir)
    real_dir = os.path.realpath(model_dir)
    name = onnx_file or "model.onnx"
    if onnx_file is not None and os.path.isabs(onnx_file):
        raise ConfigError(f"parameter 'onnx_file': {onnx_file!r} must be relative to the model directory")
    candidates = [os.path.join(model_dir, str(version), name), os.path.join(model_dir, name)]
    for c in candidates:
        if onnx_file is not None and not (
            _inside(os.path.normpath(c), model_dir) and _inside(os.path.realpath(c), real_dir)
        ):
            raise ConfigError(f"parameter 'onnx_file': {onnx_file!r} leaves the model directory {model_dir}")
        if os.path.isfile(c):
            return os.path.realpath(c)
    what = f"parameter 'onnx_file': no {onnx_file}" if onnx_file is not None else "no model.onnx"
    raise ConfigError(
        f"{what} in {candidates[0]} or {candidates[1]}"
        + ("" if onnx_file is not None else " (parameter 'onnx_file' names another file)")
    )


# the environment variables naming where, besides the model dir, a path parameter may point (an absolute path, or a
# link out of the model dir): the server's operator decides, not the config
PATH_ROOTS = {"cache_dir": "GERT_CACHE_DIR", "trace_file": "GERT_TRACE_DIR"}


def model_path(key: str, value: str, model_dir: str) -> str:
    """``value`` of path parameter ``key`` (cache_dir, trace_file) made absolute, with ``onnx_file``'s rule: a path
    relative to the model dir that stays inside it ('..' may not climb past it; symlinks resolved), or a path inside
    the directory the server's environment variable PATH_ROOTS[key] names (absolute, or a link there); else
    ConfigError naming the parameter, the path and the variable."""
    env = PATH_ROOTS[key]
    if "\x00" in value:
        raise ConfigError(f"parameter '{key}': {value!r} contains a NUL character, which no path can hold")
    model_dir = os.path.realpath(model_dir)
    root = os.environ.get(env) or None
    real_root = os.path.realpath(root) if root else None
    value = os.path.expanduser(value)
    path = os.path.normpath(os.path.join(model_dir, value))  # an absolute value stays as it is
    allow = (
        f"an absolute path only inside the directory the server's environment variable {env} names ("
        + (f"{env}={root!r}" if root else f"{env} is not set")
        + ")"
    )
    if not os.path.isabs(value) and not _inside(path, model_dir):
        raise ConfigError(
            f"parameter '{key}': {value!r} climbs out of the model directory {model_dir} ('..'); "
            f"give a path inside it, or {allow}"
        )
    real = os.path.realpath(path)
    inside_root = real_root is not None and _inside(real, real_root)
    if os.path.isabs(value) and not inside_root:
        raise ConfigError(
            f"parameter '{key}': {value!r} is an absolute path; give a path relative to the model "
            f"directory {model_dir}, or {allow}"
        )
    if not (_inside(real, model_dir) or inside_root):
        raise ConfigError(
            f"parameter '{key}': {value!r} leads out of the model directory {model_dir} through a "
            f"symlink (to {real}); give a path inside it, or {allow}"
        )
    return real


def cache_path(p: GertParams, model_dir: str) -> Optional[str]:
    """The compile cache directory for gert.load(cache_dir=...): the parameter resolved by ``model_path``, or None
    (gert then takes GERT_CACHE_DIR, if set)."""
    if p.cache_dir is None:
        return None
    return model_path("cache_dir", p.cache_dir, model_dir)


def trace_file_path(p: GertParams, model_dir: str) -> Optional[str]:
    """The trace file of parameter trace_file resolved by ``model_path``, or None (gert_triton.tracing then takes
    GERT_TRACE, if set)."""
    if p.trace_file is None:
        return None
    return model_path("trace_file", p.trace_file, model_dir)
