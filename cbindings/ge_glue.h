/* gert: glue between Cython and the GE C++ API: builds the AscendString option maps and the move-only
 * gert::Tensor vectors that Cython cannot spell directly. Each function is one GE call. */
#ifndef GERT_GE_GLUE_H_
#define GERT_GE_GLUE_H_

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ge/ge_api.h"
#include "parser/onnx_parser.h"
#include "acl/acl.h"
#ifdef GERT_HOSTNPU
#include "gert_host/host_npu.h"
#endif

typedef std::vector<std::pair<std::string, std::string>> gert_options;
typedef std::vector<gert::Tensor> gert_tensor_list;

static inline std::map<ge::AscendString, ge::AscendString> gert_to_map(const gert_options &o) {
  std::map<ge::AscendString, ge::AscendString> m;
  for (auto &kv : o) m[ge::AscendString(kv.first.c_str())] = ge::AscendString(kv.second.c_str());
  return m;
}

static inline ge::Status gert_ge_initialize(const gert_options &o) { return ge::GEInitialize(gert_to_map(o)); }
static inline std::string gert_ge_error_msg() { return ge::GEGetErrorMsgV2().GetString(); }
static inline std::string gert_ge_warning_msg() { return ge::GEGetWarningMsgV2().GetString(); }

static inline ge::Session *gert_new_session(const gert_options &o) { return new ge::Session(gert_to_map(o)); }

static inline ge::graphStatus gert_parse_onnx(const char *path, const gert_options &o, ge::Graph *g) {
  return ge::aclgrphParseONNX(path, gert_to_map(o), *g);
}
static inline ge::graphStatus gert_parse_onnx_mem(const char *buf, size_t n, const gert_options &o, ge::Graph *g) {
  return ge::aclgrphParseONNXFromMem(buf, n, gert_to_map(o), *g);
}
static inline std::string gert_graph_name(const ge::Graph *g) {
  ge::AscendString n;
  g->GetName(n);
  return n.GetString();
}

static inline ge::Status gert_add_graph(ge::Session *s, uint32_t id, const ge::Graph *g, const gert_options &o) {
  return s->AddGraph(id, *g, gert_to_map(o));
}
static inline ge::Status gert_load_graph(ge::Session *s, uint32_t id, const gert_options &o, void *stream) {
  return s->LoadGraph(id, gert_to_map(o), stream);
}

/* The compile summary, flattened. ok == false: GetCompiledGraphSummary returned null. *_st: each getter's status
 * (GE's getters fail on a graph that is not static). */
struct gert_summary {
  bool ok = false;
  bool is_static = false;
  uint32_t const_st = 0, feature_st = 0, shapes_st = 0, dtypes_st = 0;
  size_t const_memory = 0, feature_memory = 0;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int> dtypes;
};
static inline gert_summary gert_get_summary(ge::Session *s, uint32_t id) {
  gert_summary out;
  ge::CompiledGraphSummaryPtr p = s->GetCompiledGraphSummary(id);
  if (!p) return out;
  out.ok = true;
  out.is_static = p->IsStatic();
  out.const_st = p->GetConstMemorySize(out.const_memory);
  out.feature_st = p->GetFeatureMemorySize(out.feature_memory);
  std::vector<ge::Shape> shapes;
  out.shapes_st = p->GetOutputShapes(shapes);
  for (auto &sh : shapes) out.shapes.push_back(sh.GetDims());
  std::vector<ge::DataType> dts;
  out.dtypes_st = p->GetOutputDtypes(dts);
  for (auto d : dts) out.dtypes.push_back(static_cast<int>(d));
  return out;
}

/* Appends a device tensor that points at caller-owned memory (no manager: GE never frees it). */
static inline void gert_push_device_tensor(gert_tensor_list &v, void *addr, size_t nbytes, int dtype,
                                           const std::vector<int64_t> &dims) {
  gert::StorageShape shape;
  for (int64_t d : dims) {
    shape.MutableStorageShape().AppendDim(d);
    shape.MutableOriginShape().AppendDim(d);
  }
  gert::Tensor t(shape, gert::StorageFormat(ge::FORMAT_ND, ge::FORMAT_ND, gert::ExpandDimsType()),
                 gert::kOnDeviceHbm, static_cast<ge::DataType>(dtype), nullptr);
  t.SetData(gert::TensorData(addr, nullptr, nbytes, gert::kOnDeviceHbm));
  v.emplace_back(std::move(t));
}

static inline std::vector<int64_t> gert_tensor_dims(const gert::Tensor &t) {
  std::vector<int64_t> d;
  const gert::Shape &s = t.GetStorageShape();
  for (size_t k = 0; k < s.GetDimNum(); ++k) d.push_back(s.GetDim(k));
  return d;
}
static inline int gert_tensor_dtype(const gert::Tensor &t) { return static_cast<int>(t.GetDataType()); }
/* Moves element i out to the heap: its owner (e.g. a DeviceBuffer) deletes it, which frees GE's memory. */
static inline gert::Tensor *gert_take_tensor(gert_tensor_list &v, size_t i) { return new gert::Tensor(std::move(v[i])); }

static inline ge::Status gert_run_graph(ge::Session *s, uint32_t id, const std::vector<const void *> &data,
                                        const std::vector<size_t> &sizes, const std::vector<int> &dtypes,
                                        const std::vector<std::vector<int64_t>> &dims, std::vector<ge::Tensor> *out) {
  std::vector<ge::Tensor> in;
  for (size_t i = 0; i < data.size(); ++i) {
    ge::TensorDesc desc(ge::Shape(dims[i]), ge::FORMAT_ND, static_cast<ge::DataType>(dtypes[i]));
    ge::Tensor t(desc);
    t.SetData(const_cast<uint8_t *>(static_cast<const uint8_t *>(data[i])), sizes[i], [](uint8_t *) {});
    in.push_back(t);
  }
  return s->RunGraph(id, in, *out);
}
/* RunGraphWithStreamAsync's ge::Tensor over device memory the caller owns (a no-op deleter: GE never frees it). */
static inline void gert_push_ge_device_tensor(std::vector<ge::Tensor> &v, void *addr, size_t nbytes, int dtype,
                                              const std::vector<int64_t> &dims) {
  ge::TensorDesc desc(ge::Shape(dims), ge::FORMAT_ND, static_cast<ge::DataType>(dtype));
  desc.SetPlacement(ge::kPlacementDevice);
  ge::Tensor t(desc);
  t.SetData(static_cast<uint8_t *>(addr), nbytes, [](uint8_t *) {});
  v.push_back(t);
}
/* A heap copy of handle i: its owner deletes it; the last handle frees GE's memory. */
static inline ge::Tensor *gert_take_ge_tensor(std::vector<ge::Tensor> &v, size_t i) { return new ge::Tensor(v[i]); }
static inline std::vector<int64_t> gert_ge_tensor_dims(const ge::Tensor &t) { return t.GetTensorDesc().GetShape().GetDims(); }
static inline int gert_ge_tensor_dtype(const ge::Tensor &t) { return static_cast<int>(t.GetTensorDesc().GetDataType()); }

/* One request of a static graph in one call: H2D copies and fills, the graph run, D2H copies, then a synchronize,
 * all without returning to Python (the stream's worker can take the GIL for the compute provider at once).
 * Returns 0; or the first failure's code with *kind = 1 (ACL) or 2 (GE) and *msg its runtime message. Work that was
 * queued before a failure is drained before returning. */
struct gert_copy {
  void *dst;
  size_t dmax;
  const void *src;
  size_t n;
  int kind;  /* aclrtMemcpyKind */
};
struct gert_fill {
  void *dst;
  size_t dmax;
  size_t n;
  int value;
};
/* What is left of a run_fused timeout (ms, at least 1) at this moment; -1: no timeout. */
static inline int32_t gert_ms_left(int32_t timeout_ms, std::chrono::steady_clock::time_point deadline) {
  if (timeout_ms < 0) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left < 1 ? 1 : static_cast<int32_t>(left);
}

static inline int gert_run_fused_impl(ge::Session *s, uint32_t graph_id, void *stream, const std::vector<gert_copy> &in,
                                      const std::vector<gert_fill> &fills, const gert_tensor_list &inputs,
                                      gert_tensor_list &outputs, const std::vector<gert_copy> &out, int32_t timeout_ms,
                                      int *kind, std::string *msg) {
  int code = 0;
  *kind = 0;
  /* timeout_ms bounds the whole call, every wait in it included (one deadline). */
  /* (no timeout: no deadline, and no clock read: gert_ms_left does not look at it then) */
  const auto deadline = timeout_ms < 0 ? std::chrono::steady_clock::time_point{}
                                       : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto acl_fail = [&](aclError e) {
    if (code == 0 && e != ACL_SUCCESS) {
      code = e;
      *kind = 1;
      const char *m = aclGetRecentErrMsg();
      *msg = m ? m : "";
    }
  };
  bool stream_busy = false; /* the stream did not go idle within the timeout: nothing is enqueued */
#ifdef GERT_HOSTNPU
  /* This thread would only wait for the work: on the host NPU let it run the work itself (no hand-offs), once the
   * stream is idle - waiting for that no longer than the timeout. */
  int begun = gertHostStreamBeginInlineFor(stream, gert_ms_left(timeout_ms, deadline));
  bool inline_mode = begun == 0;
  stream_busy = begun == 1;
  if (stream_busy) { /* as a synchronize that timed out: the stuck work is aborted, the stream usable again */
    code = ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
    *kind = 1;
    *msg = "run_fused: the work queued on the stream before this call did not finish within " +
           std::to_string(timeout_ms) + " ms; it was aborted (aclrtStreamAbort) and this request not run";
    aclrtStreamAbort(stream);
    return code;
  }
#else
  /* CANN 8.5: an upload from pageable memory synchronizes the stream with no timeout first: wait for the work
   * queued before this call here, with the caller's timeout. */
  if (timeout_ms >= 0 && !in.empty()) {
    aclError synced = aclrtSynchronizeStreamWithTimeout(stream, gert_ms_left(timeout_ms, deadline));
    acl_fail(synced);
    if (synced == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) aclrtStreamAbort(stream);
  }
#endif
  if (!stream_busy) {
    /* fills first: a zero fill of a whole buffer (a gathered batch's pad rows) precedes the copies into its rows;
     * an upload's pad fill covers only the rows past its copy */
    for (auto &f : fills) {
      if (code) break;
      acl_fail(aclrtMemsetAsync(f.dst, f.dmax, f.value, f.n, stream));
    }
    for (auto &c : in) {
      if (code) break;
      if (c.n == 0) continue; /* an empty tensor: nothing to copy (CANN refuses count 0 with 107000) */
      acl_fail(aclrtMemcpyAsync(c.dst, c.dmax, c.src, c.n, static_cast<aclrtMemcpyKind>(c.kind), stream));
    }
    if (code == 0) {
      ge::Status st = s->ExecuteGraphWithStreamAsync(graph_id, stream, inputs, outputs);
      if (st != ge::SUCCESS) {
        code = static_cast<int>(st);
        *kind = 2;
        *msg = ge::GEGetErrorMsgV2().GetString();
      }
    }
    if (code == 0 && timeout_ms >= 0 && !out.empty()) {
      /* CANN 8.5: a D2H copy into pageable memory first synchronizes the stream with no timeout, so wait for the
       * graph here, with the caller's timeout (aborting stuck work), before the downloads. */
#ifdef GERT_HOSTNPU
      if (inline_mode) gertHostStreamEndInline(stream);
      inline_mode = false;
#endif
      aclError synced = aclrtSynchronizeStreamWithTimeout(stream, gert_ms_left(timeout_ms, deadline));
      acl_fail(synced);
      if (synced == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) aclrtStreamAbort(stream);
    }
    for (auto &c : out) {
      if (code) break;
      if (c.n == 0) continue;
      acl_fail(aclrtMemcpyAsync(c.dst, c.dmax, c.src, c.n, static_cast<aclrtMemcpyKind>(c.kind), stream));
    }
  }
#ifdef GERT_HOSTNPU
  if (inline_mode) gertHostStreamEndInline(stream);
#endif
  /* timeout_ms < 0: wait forever. On a timeout the stuck work is aborted before this returns (the copies it
   * would still do target host memory the caller frees next); the stream is then usable again. */
  aclError synced = timeout_ms < 0 ? aclrtSynchronizeStream(stream)
                                   : aclrtSynchronizeStreamWithTimeout(stream, gert_ms_left(timeout_ms, deadline));
  acl_fail(synced);
  if (synced == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) aclrtStreamAbort(stream);
  return code;
}

/* Never throws (a std::bad_alloc becomes ACL_ERROR_BAD_ALLOC with *kind = 1): it runs without the GIL. */
static inline int gert_run_fused(ge::Session *s, uint32_t graph_id, void *stream, const std::vector<gert_copy> &in,
                                 const std::vector<gert_fill> &fills, const gert_tensor_list &inputs,
                                 gert_tensor_list &outputs, const std::vector<gert_copy> &out, int32_t timeout_ms,
                                 int *kind, std::string *msg) {
  try {
    return gert_run_fused_impl(s, graph_id, stream, in, fills, inputs, outputs, out, timeout_ms, kind, msg);
  } catch (const std::exception &e) {
    *kind = 1;
    try {
      *msg = std::string("run_fused: internal error: ") + e.what();
    } catch (...) {
    }
    return ACL_ERROR_BAD_ALLOC;
  }
}


#endif
