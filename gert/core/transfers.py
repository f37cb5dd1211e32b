"""How a request's tensors meet a stream's device buffers: the H2D copies (and pad fills) that lay each input out at
the shape its graph runs at, device tensors bound as they are, the D2H copies of each output's real part, and
whether a request's transfers can be replayed as they are by the compiled hot path. One ``Transfers`` per stream
(gert.core.executor.Worker plans every request with it); it holds no buffer and runs nothing itself.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from gert import _cann
from gert._cann import DeviceBuffer
from gert.core._merge import lay_out
from gert.core.request import Request
from gert.core.rows import Rows
from gert.core.shapes import ShapePlan
from gert.core.stream_graphs import GraphEntry
from gert.core.tensor import DeviceTensor
from gert.errors import GertError


class Transfers:
    """The transfers of one stream's requests (``plan``: the model's; ``device``: the stream's)."""

    def __init__(self, plan: ShapePlan, device: int):
        self.plan = plan
        self.device = device

    def real_elements(self, name: str, arr, req: Request) -> int:
        """Elements of ``arr`` that are not padding the caller added on the batch axis (req.real_batch rows)."""
        if req.real_batch is None or self.plan.batch_axis(name) is None:
            return arr.size
        return arr.size * req.real_batch // max(1, req.run_sizes.get("batch", req.real_batch))

    def bind_device_input(self, name: str, arr: DeviceTensor, entry: GraphEntry, req: Request) -> tuple:
        """(buffer, shape, dtype, nbytes, GE dtype) of a device-resident input: it must already have the shape the
        graph runs at (no padding on the device) and live on this stream's device."""
        if arr.buffer.device_id != self.device:
            raise GertError(
                f"input '{name}' lives on device {arr.buffer.device_id}; this stream is on device {self.device}"
            )
        if entry.is_static:
            shape = entry.in_meta[name][0]
        else:
            t = next(t for t in self.plan.inputs if t.name == name)
            shape = tuple(
                req.run_sizes[self.plan.input_axes[(name, a)]] if (name, a) in self.plan.input_axes else d
                for a, d in enumerate(t.shape)
            )
        if tuple(shape) != arr.shape:
            raise GertError(
                f"input '{name}': a device tensor is bound as it is, so it must have the shape the graph "
                f"runs at {tuple(shape)}; got {arr.shape}"
            )
        return arr.buffer, arr.shape, arr.dtype, arr.nbytes, arr.ge_dtype

    # The H2D copies (and memsets) that lay ``arr`` out in ``buf`` as ``shape``: upload(arr, shape, buf, pad_value,
    # uploads, fills). A Rows (a batch kept in parts) on axis 0 is copied part by part into its place: no host
    # concatenation. The merge's own code (gert/core/_merge.pyx, compiled), not a wrapper: no call added per input.
    upload = staticmethod(lay_out)

    def download(self, name: str, shape: tuple, dtype: np.dtype, req: Request) -> tuple:
        """(host array the D2H copy fills, the result): the output sliced back to the request's real sizes where the
        graph ran padded. Leading rows are contiguous, so a batch slice copies only them (into ``out=`` if given)."""
        plan = self.plan
        sizes = list(shape)
        for axis in range(len(sizes)):
            dim = plan.output_axes.get((name, axis))
            if dim is not None and plan.dims[dim].policy == "pad" and req.run_sizes[dim] == shape[axis]:
                sizes[axis] = req.sizes[dim]
        real = tuple(sizes)
        if real == tuple(shape) or real[1:] == tuple(shape[1:]):
            out = out_array(req.out.get(name) if req.out else None, real, dtype)
            if out is None:
                out = np.empty(real, dtype)
            return out, out
        full = np.empty(shape, dtype)
        return full, full[tuple(slice(0, s) for s in real)]

    def replayable(self, req: Request, uploads: list, inputs: list, downloads: list, results: dict) -> Optional[tuple]:
        """(the inputs' whole uploads, the outputs) of a request just run (whose signature() the caller found not
        None), when running its signature again is the same fused call with only the host arrays changed (the
        compiled hot path, gert/core/_hotpath.pyx): numpy inputs each uploaded whole (no staged padding), every
        output downloaded whole into a fresh array (no slice of a padded one), nothing of the request's own (out=,
        timeout, device tensors, sequence copies). None otherwise. (A graph that may be evicted is replayable too:
        its eviction makes the hot path forget the stream's prepared runs, StreamGraphs.evict.)"""
        plan = self.plan
        if (
            req.out
            or req.device_out
            or req.before
            or req.after
            or req.real_batch is not None
            or req.timeout is not None
            or len(downloads) != len(plan.outputs)
        ):
            return None
        arrays = [req.arrays[t.name] for t in plan.inputs]
        if all(type(a) is Rows and a.axis == 0 for a in arrays):  # a merged batch (run(list)): parts in a row
            if any(a.shape[1:] != tuple(i[1][1:]) for a, i in zip(arrays, inputs)) or len(uploads) != len(arrays):
                return None
            whole = [(b.ptr, b.nbytes, a.nbytes) for a, (b, _, _, _, _) in zip(arrays, inputs)]
        elif len(uploads) == len(arrays) and all(type(a) is np.ndarray and u[2] is a for a, u in zip(arrays, uploads)):
            whole = [(dptr, dmax, host.nbytes) for dptr, dmax, host in uploads]
        else:
            return None
        outs = [results[o.name] for o in plan.outputs]
        if any(host is not out for (host, _), out in zip(downloads, outs)):
            return None
        return whole, outs

    def signature(self, req: Request) -> Optional[tuple]:
        """The compiled hot path's key of a request: (shape, dtype) per input in the plan's order; None when an
        input is neither a numpy array nor merged Rows (the hot path replays neither). Cheap: asked first, so that a
        request whose signature is prepared already is not checked further (every merged batch of dynamic
        batching after the first)."""
        out = []
        for t in self.plan.inputs:
            a = req.arrays.get(t.name)
            if type(a) is not np.ndarray and type(a) is not Rows:
                return None
            out.append((a.shape, a.dtype))
        return tuple(out)

    @staticmethod
    def copy_in(stream, uploads: list, fills: list) -> None:
        """Queue the planned uploads (host -> device) and pad fills on ``stream`` (a dynamic graph's run: a static
        graph's go in its fused call), the host arrays kept alive until the stream ran them."""
        _cann.memcpy_uploads_async(uploads, stream.handle)
        for dptr, dmax, n, value in fills:
            _cann.memset_async(dptr, dmax, value, n, stream.handle)
        stream.keep_alive(uploads)

    def copy_out(self, stream, req: Request, outputs: list, results: dict) -> None:
        """Queue the downloads of a dynamic graph's ``outputs`` (device tensors GE sized) into ``results``' arrays
        (the real part: Transfers.download), or one device copy each into the caller's device buffers."""
        for o, dev in zip(self.plan.outputs, outputs):
            target = req.device_out.get(o.name) if req.device_out else None
            if target is not None:  # GE allocated it: one D2D copy into the caller's device buffer
                n = math.prod(dev.shape) * np.dtype(dev.dtype).itemsize
                check_device_out(o.name, target, n, self.device)
                if n:
                    _cann.memcpy_async(
                        target.ptr, target.nbytes, dev.buffer.ptr, n, _cann.MEMCPY_DEVICE_TO_DEVICE, stream.handle
                    )
                continue
            host, results[o.name] = self.download(o.name, dev.shape, dev.dtype, req)
            if host.nbytes:
                dev.buffer.copy_to(host, stream)

    @staticmethod
    def enqueue(handle: int, ops: list) -> None:
        """Queue device-side copies (dst, dmax, src, n) and zero fills (ptr, dmax, n) on the stream ``handle``."""
        for op in ops:
            if len(op) == 3:
                _cann.memset_async(op[0], op[1], 0, op[2], handle)
            else:
                _cann.memcpy_async(op[0], op[1], op[2], op[3], _cann.MEMCPY_DEVICE_TO_DEVICE, handle)


def check_device_out(name: str, target: DeviceBuffer, nbytes: int, device: int) -> None:
    """A caller's device buffer for output ``name``: on the stream's device, and large enough."""
    if target.device_id != device:
        raise GertError(f"output '{name}': its device buffer is on device {target.device_id}, the stream on {device}")
    if target.nbytes < nbytes:
        raise GertError(f"output '{name}' needs {nbytes} bytes; its device buffer holds {target.nbytes}")


def out_array(dst, shape: tuple, dtype) -> Optional[np.ndarray]:
    """The caller's out= array (or buffer) as an ndarray, if the D2H can write straight into it."""
    if dst is None:
        return None
    a = dst if isinstance(dst, np.ndarray) else np.asarray(dst)
    if a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable:
        return a
    return None
