"""ONNX's backend interface over gert, as ``onnxruntime.backend`` is for ONNX Runtime:

    import gert.onnx_backend as backend
    rep = backend.prepare(model_proto)           # gert.load on the NPU (or the host NPU)
    outputs = rep.run([x])                       # a list, in graph output order
    outputs = backend.run_model(model_proto, [x])
    outputs = backend.run_node(node_proto, [x])

Every dynamic dim runs ``exact`` (a graph per size, no padding): ONNX's semantics, whatever the model computes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from gert import _cann
from gert.dtypes import numpy_to_onnx
from gert.errors import GertError

_DEVICES = ("CPU", "NPU")


class GertRep(BackendRep):
    """A prepared model: a gert.Model, run with positional inputs."""

    def __init__(self, model) -> None:
        self.model = model
        self.input_names = [t.name for t in model.inputs]
        self.output_names = [t.name for t in model.outputs]

    def run(self, inputs: Any, **kwargs: Any) -> list:
        """``inputs``: arrays in graph input order (a single array for a one-input model), or a dict by name."""
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise GertError(
                    f"the model takes {len(self.input_names)} input(s) {self.input_names}, got {len(inputs)}"
                )
            feeds = dict(zip(self.input_names, inputs))
        out = self.model.run({k: np.asarray(v) for k, v in feeds.items()})
        return [out[n] for n in self.output_names]

    def close(self) -> None:
        self.model.close()


class GertBackend(Backend):
    """onnx.backend.base.Backend over gert.load."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """ "NPU" (or "NPU:n"), and "CPU" where the host NPU stands in for the device."""
        kind, _, index = str(device).upper().partition(":")
        if kind not in _DEVICES or (index and not index.isdigit()):
            return False
        if kind == "CPU" and _cann.backend() != "hostnpu":
            return False
        return int(index or 0) < _cann.device_count()

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> GertRep:
        """gert.load(model) on ``device`` with every dynamic dim exact; ``kwargs`` go to gert.load (e.g. streams)."""
        if not cls.supports_device(device):
            raise GertError(
                f"device {device!r} is not supported here; use 'NPU[:n]'"
                + (" or 'CPU' (the host NPU)" if _cann.backend() == "hostnpu" else "")
            )
        from gert.core import onnx_io
        from gert.core.shapes import plan_shapes
        from gert.model import load

        data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else bytes(model)
        _cann.Graph.from_onnx(data)  # what GE refuses fails first, with GE's code
        policy = {name: "exact" for name in plan_shapes(onnx_io.read(data).io).dims}
        kwargs.setdefault("streams", 1)
        # ONNX's conformance cases (opset 19+ mostly): the CANN op check is `gert check`'s job, not the backend's;
        # GERT_CANN_OPS or cann_ops=... still turn it on
        kwargs.setdefault("cann_ops", os.environ.get("GERT_CANN_OPS") or "off")
        _, _, index = str(device).partition(":")
        kwargs.setdefault("devices", (int(index or 0),))
        return GertRep(load(data, shape_policy={**policy, **kwargs.pop("shape_policy", {})}, **kwargs))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> list:
        rep = cls.prepare(model, device, **kwargs)
        try:
            return rep.run(inputs)
        finally:
            rep.close()

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple] | None = None,
        **kwargs: Any,
    ) -> list:
        """One operator as a graph: its inputs typed from the arrays, its outputs left to shape inference."""
        arrays = [np.asarray(a) for a in (inputs if isinstance(inputs, (list, tuple)) else [inputs])]
        names = [n for n in node.input if n]
        if len(names) != len(arrays):
            raise GertError(f"node {node.op_type} takes {len(names)} input(s) {names}, got {len(arrays)}")
        graph_in = [
            onnx.helper.make_tensor_value_info(n, numpy_to_onnx(a.dtype), a.shape) for n, a in zip(names, arrays)
        ]
        graph_out = [onnx.ValueInfoProto(name=n) for n in node.output if n]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        graph = onnx.helper.make_graph([node], f"{node.op_type}_node", graph_in, graph_out)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        return cls.run_model(model, arrays, device, **kwargs)


prepare = GertBackend.prepare
run_model = GertBackend.run_model
run_node = GertBackend.run_node
supports_device = GertBackend.supports_device
is_compatible = GertBackend.is_compatible
