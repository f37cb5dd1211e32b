"""What gert.InferenceSession loads: the model as ONNX Runtime would see it with the session options applied.

ONNX Runtime's SessionOptions can change a model's constants: ``add_initializer`` replaces an initializer,
``add_external_initializers`` gives the data of initializers stored externally, ``add_external_initializers_from_
files_in_memory`` the bytes of their external files. gert compiles constants into GE's graph, so it writes them into
the model before GE parses it (its SessionOptions records them: ``ort_session.session_options_class``). A model loaded
by path and left as it is loads by path (GE's file-based parser: its external data resolves next to it, read once by
whoever computes); a rewritten model with external data left needs those tensors read in (inline, under 2 GB).
Errors are ONNX Runtime's classes and messages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gert.core import external_data
from gert.ort_io import ort_class

_PROTO_LIMIT = 2**31 - 1  # protobuf's limit of one serialized message


@dataclass
class SessionModel:
    """The model to load: ``data`` its bytes (what gert reads), ``path`` the file to load by (None: load ``data``)."""

    data: bytes
    path: str | None

    @property
    def source(self) -> str | bytes:
        return self.path if self.path is not None else self.data


def session_model(path_or_bytes, sess_options) -> SessionModel:
    """The model of a session made from ``path_or_bytes`` with ``sess_options`` (see the module doc)."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data, path = bytes(path_or_bytes), None
    else:
        path = os.fspath(path_or_bytes)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise ort_class("NoSuchFile")(
                f"[ONNXRuntimeError] : 3 : NO_SUCHFILE : Load model from {path} failed. File doesn't exist"
            ) from None
    initializers = dict(getattr(sess_options, "gert_initializers", None) or {})
    external = dict(getattr(sess_options, "gert_external_initializers", None) or {})
    files = dict(getattr(sess_options, "gert_external_files", None) or {})
    if not (initializers or external or files):
        return SessionModel(data, path)
    import onnx

    proto = onnx.load_from_string(data)
    _external_initializers(proto, external)
    external_data.supply(proto, files)
    replace_initializers(proto, initializers)
    return SessionModel(inline_external(proto, external_data.model_dir(path) if path is not None else None), None)


def inline_external(proto, model_dir: str | None) -> bytes:
    """``proto`` serialized, its external data (from ``model_dir``, checked as ONNX Runtime checks it) read in: a
    rewritten model loads from bytes, which have no directory. Fail above protobuf's 2 GB."""
    if model_dir is not None and external_data.has_external(proto):
        external_data.load_small(proto, model_dir, max_elements=2**63)
    if proto.ByteSize() > _PROTO_LIMIT:
        raise ort_class("Fail")(
            "[ONNXRuntimeError] : 1 : FAIL : gert writes the initializers the session options "
            "or LoRA adapters give into the model, which then exceeds protobuf's 2 GB: gert "
            "cannot change initializers of a model this large"
        )
    return proto.SerializeToString()


def replace_initializers(proto, values: Mapping[str, np.ndarray]) -> None:
    """add_initializer: the named initializers take the values given (a name the model does not have is ignored,
    as ONNX Runtime ignores it); a value of another element type is refused, naming it."""
    from onnx import helper

    by_name = {t.name: t for t in proto.graph.initializer}
    for name, value in values.items():
        t = by_name.get(name)
        if t is None:
            continue
        want = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
        if value.dtype != want:
            raise ort_class("InvalidArgument")(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : add_initializer('{name}'): the model's initializer is "
                f"{want}, the value given is {value.dtype}"
            )
        del t.dims[:]
        t.dims.extend(value.shape)
        external_data.set_data(t, _raw(value))


def _external_initializers(proto, values: Mapping[str, np.ndarray]) -> None:
    """add_external_initializers: the data of initializers stored externally, with ONNX Runtime's errors."""
    from onnx import TensorProto, helper

    by_name = {t.name: t for t in proto.graph.initializer}
    for name, value in values.items():
        t = by_name.get(name)
        if t is None:
            raise ort_class("Fail")(
                f"[ONNXRuntimeError] : 1 : FAIL : graph.cc ReplaceInitializedTensorImpl Failed to "
                f"find existing initializer with name {name}."
            )
        if t.data_location != TensorProto.EXTERNAL:
            raise ort_class("Fail")(
                "[ONNXRuntimeError] : 1 : FAIL : graph.cc ReplaceInitializedTensorImpl Trying to "
                "replace non-external initializer with external data"
            )
        want = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
        if value.dtype != want or tuple(value.shape) != tuple(t.dims):
            raise ort_class("Fail")(
                f"[ONNXRuntimeError] : 1 : FAIL : graph.cc ReplaceInitializedTensorImpl "
                f"Replacement tensor's data type does not match or shape does not match: "
                f"initializer {name} is {want} {list(t.dims)}, the value {value.dtype} "
                f"{list(value.shape)}"
            )
        external_data.set_data(t, _raw(value))


def _raw(value: np.ndarray) -> bytes:
    return np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tobytes()


def write_optimized_model(sess_options, model_data: Callable[[], bytes]) -> None:
    """SessionOptions.optimized_model_filepath: the ONNX model GE's parser was given (the session options'
    initializers and overrides applied), where ONNX Runtime writes its optimized graph. GE's compiled graph is no
    ONNX model, and ONNX Runtime's own ``.ort`` format is not one gert can write: refused with ONNX Runtime's Fail."""
    path = getattr(sess_options, "optimized_model_filepath", "") or ""
    if not path:
        return
    if str(path).lower().endswith(".ort"):
        raise ort_class("Fail")(
            f"[ONNXRuntimeError] : 1 : FAIL : optimized_model_filepath '{path}': gert cannot "
            "write ONNX Runtime's ORT format; give a .onnx path to get the ONNX model GE compiled"
        )
    with open(path, "wb") as f:
        f.write(model_data())
