# Declarations of the GE C++ API subset gert uses, through ge_glue.h (ge/ge_api.h, parser/onnx_parser.h).
# Exceptions: GE's own entry points (the Session methods) return a Status and never throw (the host NPU's are
# function-try-blocks, cbindings/hostnpu/ge_state.h HOSTNPU_GE_GUARD); gert_run_fused catches too. The glue helpers
# build std::string / std::vector / std::map / GE objects before or after the call and throw std::bad_alloc by
# design: they are `except +` (Cython turns it into MemoryError).
from libc.stdint cimport uint32_t, uint64_t, int64_t, int32_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.vector cimport vector
from libcpp.pair cimport pair


cdef extern from "ge_glue.h" nogil:
    ctypedef uint32_t Status "ge::Status"
    ctypedef uint32_t graphStatus "ge::graphStatus"

    cdef cppclass Graph "ge::Graph":
        Graph()
        cbool IsValid()

    cdef cppclass Session "ge::Session":
        Status RemoveGraph(uint32_t graph_id)
        Status CompileGraph(uint32_t graph_id)
        Status ExecuteGraphWithStreamAsync(uint32_t graph_id, void* stream, const vector[Tensor]& inputs,
                                           vector[Tensor]& outputs)
        Status RunGraphWithStreamAsync(uint32_t graph_id, void* stream, const vector[GeTensor]& inputs,
                                       vector[GeTensor]& outputs)
        uint64_t GetSessionId()

    cdef cppclass Tensor "gert::Tensor":
        void* GetAddr()
        size_t GetSize()

    cdef cppclass GeTensor "ge::Tensor":
        const unsigned char* GetData()
        size_t GetSize()

    Status GEFinalize "ge::GEFinalize"()

    ctypedef vector[pair[string, string]] gert_options
    ctypedef vector[Tensor] gert_tensor_list

    cdef struct gert_summary:
        cbool ok
        cbool is_static
        uint32_t const_st
        uint32_t feature_st
        uint32_t shapes_st
        uint32_t dtypes_st
        size_t const_memory
        size_t feature_memory
        vector[vector[int64_t]] shapes
        vector[int] dtypes

    Status gert_ge_initialize(const gert_options& o) except +
    string gert_ge_error_msg() except +
    string gert_ge_warning_msg() except +
    Session* gert_new_session(const gert_options& o) except +
    graphStatus gert_parse_onnx(const char* path, const gert_options& o, Graph* g) except +
    graphStatus gert_parse_onnx_mem(const char* buf, size_t n, const gert_options& o, Graph* g) except +
    string gert_graph_name(const Graph* g) except +
    Status gert_add_graph(Session* s, uint32_t graph_id, const Graph* g, const gert_options& o) except +
    Status gert_load_graph(Session* s, uint32_t graph_id, const gert_options& o, void* stream) except +
    gert_summary gert_get_summary(Session* s, uint32_t graph_id) except +
    void gert_push_device_tensor(gert_tensor_list& v, void* addr, size_t nbytes, int dtype, const vector[int64_t]& dims) except +
    vector[int64_t] gert_tensor_dims(const Tensor& t) except +
    int gert_tensor_dtype(const Tensor& t)
    Tensor* gert_take_tensor(gert_tensor_list& v, size_t i) except +
    Status gert_run_graph(Session* s, uint32_t graph_id, const vector[const void*]& data, const vector[size_t]& sizes,
                          const vector[int]& dtypes, const vector[vector[int64_t]]& dims, vector[GeTensor]* out) except +
    cdef struct gert_copy:
        void* dst
        size_t dmax
        const void* src
        size_t n
        int kind
    cdef struct gert_fill:
        void* dst
        size_t dmax
        size_t n
        int value
    int gert_run_fused(Session* s, uint32_t graph_id, void* stream, const vector[gert_copy]& inp,
                       const vector[gert_fill]& fills, const gert_tensor_list& inputs, gert_tensor_list& outputs,
                       const vector[gert_copy]& out, int32_t timeout_ms, int* kind, string* msg)
    void gert_push_ge_device_tensor(vector[GeTensor]& v, void* addr, size_t nbytes, int dtype,
                                    const vector[int64_t]& dims) except +
    GeTensor* gert_take_ge_tensor(vector[GeTensor]& v, size_t i) except +
    vector[int64_t] gert_ge_tensor_dims(const GeTensor& t) except +
    int gert_ge_tensor_dtype(const GeTensor& t)
