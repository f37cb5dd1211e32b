"""A model's external data (``onnx.save(..., save_as_external_data=True)``, the format of every model over 2 GB), as
ONNX Runtime resolves it: next to the model file, never outside its directory.

A model loaded by path keeps its directory (CANN's file-based parser, aclgrphParseONNX, and the host NPU's
``GraphImpl::model_dir``); the weights themselves are read by whoever computes (ONNX Runtime's sessions of the host
NPU, GE on a device), once. gert reads only the small constants the shape work at load needs (at most
``skeleton.KEPT_ELEMENTS`` elements each, gert/core/skeleton.py), after the same checks ONNX Runtime makes: the model
directory and every location in the file are hostile input, so an absolute location, one that climbs out of the
directory, or a symlink that leads out of it, is refused with ONNX Runtime's message. A model given as bytes has no
directory: ONNX Runtime resolves its external data against the working directory, and gert reads none of it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional

import onnx

from gert.core.skeleton import is_skeleton_tensor, tensors as _tensors
from gert.errors import GertError

_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


class ExternalDataError(GertError):
    """An external data location ONNX Runtime refuses (its message, ``tensor`` the initializer's name)."""

    def __init__(self, tensor: str, reason: str) -> None:
        super().__init__(f"External data path validation failed for initializer: {tensor}. Error: {reason}")
        self.tensor = tensor


@dataclass(frozen=True)
class Entry:
    """One external tensor's location, as its external_data entries give it (offset 0, length None: to the end)."""

    location: str
    offset: int
    length: Optional[int]


def model_dir(path: "os.PathLike | str") -> str:
    """The canonical directory of a model file (symlinks resolved, as ONNX Runtime's "allowed directory")."""
    return os.path.dirname(os.path.realpath(os.fspath(path)))


def entry(t: onnx.TensorProto) -> Entry:
    """``t``'s external data entry; ExternalDataError for a malformed offset or length."""
    info = {e.key: e.value for e in t.external_data}
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise ExternalDataError(
            t.name, f"offset {info.get('offset')!r} / length {info.get('length')!r} is not an integer"
        ) from None
    if offset < 0 or (length is not None and length < 0):
        raise ExternalDataError(t.name, f"offset {offset} / length {length} is negative")
    return Entry(info.get("location", ""), offset, length)


def resolve(directory: str, t: onnx.TensorProto) -> str:
    """The file ``t``'s data is in, checked as ONNX Runtime checks it (ExternalDataError otherwise)."""
    location = entry(t).location
    if not location:
        raise ExternalDataError(t.name, "the tensor has no external data location")
    if os.path.isabs(location):
        raise ExternalDataError(t.name, "Absolute path not allowed for external data location")
    allowed = os.path.realpath(directory)
    resolved = os.path.realpath(os.path.join(allowed, location))
    if os.path.commonpath([allowed, resolved]) != allowed:
        raise ExternalDataError(
            t.name,
            f'External data path escapes model directory. External data path: "{location}"'
            f' resolved path: "{resolved}" allowed directory: "{allowed}"',
        )
    return resolved


def external_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """The tensors of ``graph`` (initializers, tensor attributes, subgraphs) whose data is external."""
    for t in _tensors(graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            yield t


def has_external(model: onnx.ModelProto) -> bool:
    """Whether some tensor of ``model`` has its data in a file (the skeleton's stripped weights are not)."""
    return any(not _stripped(t) for t in external_tensors(model.graph))


def check(model: onnx.ModelProto, directory: str, skip: frozenset = frozenset()) -> None:
    """Every external location of ``model`` resolves inside ``directory`` (ExternalDataError naming the first that
    does not); tensors named in ``skip`` (their data supplied in memory) are not checked."""
    for t in external_tensors(model.graph):
        if t.name not in skip and not _stripped(t):
            resolve(directory, t)


def load_small(model: onnx.ModelProto, directory: str, max_elements: int) -> int:
    """Read into ``model`` the data of external tensors of at most ``max_elements`` elements (what shape inference
    may fold), after resolve()'s checks; returns how many were read. A file too short is ONNX Runtime's error."""
    n = 0
    for t in list(external_tensors(model.graph)):
        if _stripped(t) or _elements(t) > max_elements:
            continue
        path = resolve(directory, t)
        e = entry(t)
        try:
            with open(path, "rb") as f:
                f.seek(e.offset)
                data = f.read(e.length if e.length is not None else -1)
        except OSError as err:
            raise ExternalDataError(t.name, f"cannot read {path}: {err.strerror}") from None
        if e.length is not None and len(data) != e.length:
            raise ExternalDataError(t.name, f"{path} holds {len(data)} bytes at offset {e.offset}, {e.length} needed")
        set_data(t, data)
        n += 1
    return n


def set_data(t: onnx.TensorProto, raw: bytes) -> None:
    """Make ``t`` hold ``raw`` (its little-endian bytes) inline, no longer external."""
    for name in _DATA_FIELDS:
        t.ClearField(name)
    del t.external_data[:]
    t.data_location = onnx.TensorProto.DEFAULT
    t.raw_data = bytes(raw)


def supply(model: onnx.ModelProto, files: Mapping[str, bytes]) -> set:
    """Fill the external tensors whose location is a key of ``files`` (file name -> its bytes in memory: ONNX
    Runtime's add_external_initializers_from_files_in_memory) from those bytes; the names filled."""
    done = set()
    for t in list(external_tensors(model.graph)):
        e = entry(t)
        if e.location not in files:
            continue
        blob = files[e.location]
        end = len(blob) if e.length is None else e.offset + e.length
        if end > len(blob):
            raise ExternalDataError(
                t.name,
                f"the in-memory file {e.location!r} holds {len(blob)} bytes; offset "
                f"{e.offset} + length {e.length} needs {end}",
            )
        set_data(t, blob[e.offset : end])
        done.add(t.name)
    return done


def _stripped(t: onnx.TensorProto) -> bool:
    return is_skeleton_tensor(t)


def _elements(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n
