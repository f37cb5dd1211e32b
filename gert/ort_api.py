"""The rest of onnxruntime 1.32's InferenceSession API over gert (mixed into gert.InferenceSession): memory infos,
EP devices, the graph assignment, ``run_with_ortvaluevector``, session-made OrtValues, and the methods gert cannot
honour, refused with ONNX Runtime's NotImplemented class (never a silent no-op).

gert takes its inputs from and gives its outputs in host memory (the NPU's buffers are gert's own), so the memory
info of every input and output is ONNX Runtime's CPU memory info and the EP device of every input the CPU's. The
graph assignment reports the model's nodes on CANNExecutionProvider (GE compiles the whole graph), or ONNX Runtime's
own assignment when the session runs on its CPU provider (gert/ort_fallback.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gert.ort_io import ort_class

_RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


@dataclass(frozen=True)
class AssignedNode:
    """One node of a subgraph an execution provider runs (onnxruntime.OrtEpAssignedNode's fields)."""

    name: str
    op_type: str
    domain: str


@dataclass(frozen=True)
class AssignedSubgraph:
    """onnxruntime.OrtEpAssignedSubgraph's API: the provider's name and its nodes."""

    ep_name: str
    nodes: tuple

    def get_nodes(self) -> list:
        return list(self.nodes)


def _ort():
    import onnxruntime

    return onnxruntime


def _not_implemented(what: str) -> Exception:
    return ort_class("NotImplemented")(
        f"[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : {what} is not supported by gert.InferenceSession"
    )


class SessionExtras:
    """Mixed into gert.InferenceSession (which provides ``_cpu``, ``_info``, ``_graph_nodes``, ``get_providers``,
    ``get_session_options``, ``run``)."""

    _cpu: Any

    def get_input_memory_infos(self) -> list:
        """The memory each input is read from: the host's (ONNX Runtime's CPU memory info)."""
        if self._cpu is not None:
            return self._cpu.get_input_memory_infos()
        return [_cpu_memory_info() for _ in self._info.inputs]

    def get_output_memory_infos(self) -> list:
        """The memory each output is given in: the host's (gert downloads outputs)."""
        if self._cpu is not None:
            return self._cpu.get_output_memory_infos()
        return [_cpu_memory_info() for _ in self._info.outputs]

    def get_input_epdevices(self) -> list:
        """The EP device each input is read on: the CPU's, as gert reads inputs from host memory."""
        if self._cpu is not None:
            return self._cpu.get_input_epdevices()
        cpu = [d for d in _ort().get_ep_devices() if d.ep_name == "CPUExecutionProvider"]
        return [cpu[0] if cpu else None for _ in self._info.inputs]

    def get_provider_graph_assignment_info(self) -> list:
        """Which provider runs which nodes; ONNX Runtime's Fail unless the session option
        ``session.record_ep_graph_assignment_info`` is "1"."""
        if self._cpu is not None:
            return self._cpu.get_provider_graph_assignment_info()
        edges = getattr(self, "_edges_session", None)  # the core on gert, the edges on CPU (gert.ort_partition)
        try:
            recorded = self.get_session_options().get_session_config_entry(_RECORD_ASSIGNMENT)
        except RuntimeError:  # ONNX Runtime's: no such entry
            recorded = None
        if recorded != "1":
            raise ort_class("Fail")(
                f"[ONNXRuntimeError] : 1 : FAIL : Session configuration entry "
                f"'{_RECORD_ASSIGNMENT}' must be set to \"1\" to retrieve EP graph assignment "
                "information."
            )
        if edges is not None:
            return edges.assignment()
        nodes = tuple(AssignedNode(n.name, n.op_type, n.domain) for n in self._graph_nodes())
        return [AssignedSubgraph(self.get_providers()[0], nodes)]

    def run_with_ortvaluevector(
        self,
        run_options,
        feed_names: Sequence[str],
        feeds,
        fetch_names: Sequence[str],
        fetches,
        fetch_devices: Sequence | None = None,
    ) -> None:
        """run() with an OrtValueVector of inputs; the outputs are appended to ``fetches`` (an empty
        OrtValueVector), or written into its OrtValues when it holds one per output."""
        if self._cpu is not None:
            return self._cpu.run_with_ortvaluevector(
                run_options, feed_names, feeds, fetch_names, fetches, fetch_devices
            )
        if len(feed_names) != len(feeds):
            raise ort_class("InvalidArgument")(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : {len(feed_names)} feed names for {len(feeds)} feeds"
            )
        feed = {n: feeds[i].numpy() for i, n in enumerate(feed_names)}
        results = self.run(list(fetch_names), feed, run_options)
        if len(fetches) == len(results) and len(fetches):
            for i, r in enumerate(results):
                fetches[i].update_inplace(np.ascontiguousarray(r))
            return None
        if len(fetches):
            raise ort_class("InvalidArgument")(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : fetches holds "
                f"{len(fetches)} values for {len(results)} outputs"
            )
        for r in results:
            fetches.push_back(_owned_ortvalue(r))
        return None

    def create_ortvalue_from_shape_and_type(
        self, shape: Sequence[int], element_type, device_type: str, device_id: int = 0, vendor_id: int = -1
    ):
        """An OrtValue in host memory (gert's sessions read their inputs there), usable as a feed."""
        if self._cpu is not None:
            return self._cpu.create_ortvalue_from_shape_and_type(shape, element_type, device_type, device_id, vendor_id)
        if str(device_type).lower() != "cpu":
            raise ort_class("InvalidArgument")(
                f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : gert sessions take "
                f"inputs in host memory ('cpu'), not '{device_type}'"
            )
        OrtValue = _ort().OrtValue
        if isinstance(element_type, int) and not isinstance(element_type, bool):
            return OrtValue.ortvalue_from_shape_and_onnx_type(list(shape), element_type, "cpu", device_id)
        return OrtValue.ortvalue_from_shape_and_type(list(shape), element_type, "cpu", device_id)

    # ---- what gert cannot honour: ONNX Runtime's NotImplemented ------------------------------------------------
    def get_tuning_results(self) -> list:
        if self._cpu is not None:
            return self._cpu.get_tuning_results()
        raise _not_implemented("get_tuning_results (kernel tuning of the CUDA/ROCm providers)")

    def set_tuning_results(self, results, *, error_on_invalid: bool = False) -> None:
        if self._cpu is not None:
            return self._cpu.set_tuning_results(results, error_on_invalid=error_on_invalid)
        raise _not_implemented("set_tuning_results (kernel tuning of the CUDA/ROCm providers)")

    def set_ep_dynamic_options(self, options: dict) -> None:
        if self._cpu is not None:
            return self._cpu.set_ep_dynamic_options(options)
        raise _not_implemented("set_ep_dynamic_options")

    def release_captured_graph(self, *args, **kwargs) -> None:
        raise _not_implemented("release_captured_graph (CUDA graph capture)")


def _cpu_memory_info():
    ort = _ort()
    return ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)


def _owned_ortvalue(array: np.ndarray):
    """A C OrtValue (what an OrtValueVector holds) whose memory ONNX Runtime owns, holding a copy of ``array``: one
    made from numpy would borrow the array's memory, which does not outlive this call."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0, 0)
    ov = C.OrtValue.ortvalue_from_shape_and_type(list(array.shape), array.dtype, device)
    ov.update_inplace(np.ascontiguousarray(array))
    return ov
