# The ONNX model reader (hostnpu/onnx_model.h): I/O metadata without libprotobuf.
from libc.stdint cimport int32_t, int64_t, uint8_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.pair cimport pair


cdef extern from "hostnpu/onnx_model.h" namespace "hostnpu::onnx" nogil:
    cdef cppclass Dim:
        int64_t value
        string param
    cdef cppclass ValueInfo:
        string name
        int32_t elem_type
        cbool has_shape
        vector[Dim] dims
    cdef cppclass ModelInfo:
        int64_t ir_version
        vector[pair[string, int64_t]] opsets
        string graph_name
        vector[ValueInfo] inputs
        vector[ValueInfo] outputs
        size_t node_count
    cbool parse_model(const uint8_t* data, size_t size, ModelInfo& out, string& err)
    const char* elem_type_name(int32_t elem_type)
