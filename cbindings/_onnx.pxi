# ONNX I/O metadata, read by the same C++ reader the host NPU's parser uses.
cimport onnx_model as cox


cdef list _value_infos(vector[cox.ValueInfo]& vis):
    cdef list out = []
    for i in range(vis.size()):
        dims = None
        if vis[i].has_shape:
            dims = []
            for k in range(vis[i].dims.size()):
                d = vis[i].dims[k]
                dims.append(d.value if d.value >= 0 else (d.param.decode("utf-8", "replace") or None))
            dims = tuple(dims)
        out.append((vis[i].name.decode("utf-8", "replace"), vis[i].elem_type, dims))
    return out


def read_onnx_io(data) -> dict:
    """I/O of a serialized ONNX model: {"graph_name", "ir_version", "opsets", "inputs", "outputs"}, where each
    input/output is (name, ONNX elem type, dims or None), a dim being an int, a symbolic name, or None."""
    cdef bytes b = bytes(data)
    cdef cox.ModelInfo info
    cdef string err
    cdef const uint8_t* p = <const uint8_t*><const char*>b
    cdef size_t n = len(b)
    cdef bint ok
    with nogil:
        ok = cox.parse_model(p, n, info, err)
    if not ok:
        raise _GertError(err.decode("utf-8", "replace"))
    return {
        "graph_name": info.graph_name.decode("utf-8", "replace"),
        "ir_version": info.ir_version,
        "opsets": [(o.first.decode(), o.second) for o in info.opsets],
        "inputs": _value_infos(info.inputs),
        "outputs": _value_infos(info.outputs),
    }
