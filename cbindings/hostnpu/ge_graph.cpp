// Host NPU GE: ge::Graph, GE's error texts and the ONNX parsing behind aclgrphParseONNX (onnx_parser.cpp).
// Parsing reads and validates the ONNX model and accepts only the parser_params keys real GE accepts.
// In the toolkit layout (build_toolkit.py) this is libgraph.so; the parser entry points are libfmk_onnx_parser.so.
#include <new>
#include <stdexcept>
#include <cstdarg>
#include <cstdlib>
#include <stdlib.h>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <functional>
#include <iterator>
#include <sstream>

#include "ge_state.h"

namespace hostnpu {

namespace {
thread_local std::string tls_ge_error, tls_ge_warning;

// ge::ir_option::ir_parser_suppported_options (GE parser/parser/common/acl_graph_parser_util.cc::CheckOptions)
const char *const kParserKeys[] = {
    "ge.INPUT_NODES_SET_FP16", "is_input_adjust_hw_layout", "is_output_adjust_hw_layout", "output",
    "ge.outputNodeName",       "enable_scope_fusion_passes", "input_data_names",          "input_shape",
};

}  // namespace

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

bool parse_i64(const std::string &s, int64_t &v) {
  if (s.empty()) return false;
  char *end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return end && *end == '\0';
}

ge::Status parse_shape_spec(const std::string &spec, const char *key, const char *api, ge::Status code,
                            std::vector<std::pair<std::string, std::vector<int64_t>>> &out) {
  for (auto &item : split(spec, ';')) {
    if (item.empty()) continue;
    size_t colon = item.rfind(':');
    if (colon == std::string::npos)
      return ge_fail(code, "%s: %s entry '%s' is not 'name:d0,d1,...'", api, key, item.c_str());
    std::string name = item.substr(0, colon), dims_text = item.substr(colon + 1);
    std::vector<int64_t> dims;
    if (!dims_text.empty()) {
      for (auto &d : split(dims_text, ',')) {
        int64_t v;
        if (!parse_i64(d, v) || v < -1)
          return ge_fail(code, "%s: %s for '%s' has a bad dim '%s'", api, key, name.c_str(), d.c_str());
        dims.push_back(v);
      }
    }
    out.emplace_back(std::move(name), std::move(dims));
  }
  return ge::SUCCESS;
}

std::string dims_str(const std::vector<int64_t> &dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

ge::DataType dtype_from_onnx(int32_t t) {
  switch (t) {
    case 1: return ge::DT_FLOAT;
    case 2: return ge::DT_UINT8;
    case 3: return ge::DT_INT8;
    case 4: return ge::DT_UINT16;
    case 5: return ge::DT_INT16;
    case 6: return ge::DT_INT32;
    case 7: return ge::DT_INT64;
    case 8: return ge::DT_STRING;
    case 9: return ge::DT_BOOL;
    case 10: return ge::DT_FLOAT16;
    case 11: return ge::DT_DOUBLE;
    case 12: return ge::DT_UINT32;
    case 13: return ge::DT_UINT64;
    case 14: return ge::DT_COMPLEX64;
    case 15: return ge::DT_COMPLEX128;
    case 16: return ge::DT_BF16;
    default: return ge::DT_UNDEFINED;
  }
}

const char *dtype_name(ge::DataType dt) {
  switch (dt) {
    case ge::DT_FLOAT: return "DT_FLOAT";
    case ge::DT_FLOAT16: return "DT_FLOAT16";
    case ge::DT_BF16: return "DT_BF16";
    case ge::DT_DOUBLE: return "DT_DOUBLE";
    case ge::DT_INT8: return "DT_INT8";
    case ge::DT_INT16: return "DT_INT16";
    case ge::DT_INT32: return "DT_INT32";
    case ge::DT_INT64: return "DT_INT64";
    case ge::DT_UINT8: return "DT_UINT8";
    case ge::DT_UINT16: return "DT_UINT16";
    case ge::DT_UINT32: return "DT_UINT32";
    case ge::DT_UINT64: return "DT_UINT64";
    case ge::DT_BOOL: return "DT_BOOL";
    case ge::DT_STRING: return "DT_STRING";
    case ge::DT_COMPLEX64: return "DT_COMPLEX64";
    case ge::DT_COMPLEX128: return "DT_COMPLEX128";
    default: return "DT_UNDEFINED";
  }
}

ge::Status ge_fail(ge::Status code, const char *fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tls_ge_error = buf;
  return code;
}

ge::Status ge_internal_failure(const char *api) {
  try {
    throw;  // the exception being handled
  } catch (const std::bad_alloc &) {
    return ge_fail(ge::FAILED, "%s: the host ran out of memory (std::bad_alloc)", api);
  } catch (const std::exception &x) {
    return ge_fail(ge::FAILED, "%s: internal error: %s", api, x.what());
  } catch (...) {
    return ge_fail(ge::FAILED, "%s: internal error (a C++ exception)", api);
  }
}

void ge_warn(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tls_ge_warning = buf;
  if (std::getenv("GERT_HOST_GE_LOG")) std::fprintf(stderr, "[hostnpu GE] W %s\n", buf);
}

const std::string &ge_error_text() { return tls_ge_error; }
const std::string &ge_warning_text() { return tls_ge_warning; }

// What CANN 8.5's ONNX parser refuses by design (ge-shapes-and-cache.md A3-A5), with its error codes. aclgrphParseONNX
// returns ge::FAILED for each; the E-code leads the message, as GE's error manager reports it.
static ge::graphStatus refuse_like_cann(const onnx::ModelInfo &info, const char *api) {
  if (info.declared_inputs == 0)  // OnnxModelParser::ParseInput: a root graph with input_size() == 0
    return ge_fail(ge::GRAPH_FAILED, "%s: E16001: the ONNX graph '%s' has no input; GE's ONNX parser needs a root graph "
                   "with at least one input", api, info.graph_name.c_str());
  if (info.outputs.empty())  // OnnxModelParser::ParseOutput
    return ge_fail(ge::GRAPH_FAILED, "%s: E16001: the ONNX graph '%s' has no output", api, info.graph_name.c_str());
  for (auto *list : {&info.inputs, &info.outputs})
    for (auto &v : *list)
      if (!v.kind.empty() && v.kind != "tensor")  // ParseInput / infershape read tensor types only
        return ge_fail(ge::GRAPH_FAILED, "%s: graph %s '%s' is a%s %s, not a tensor: GE graphs take and give tensors "
                       "only", api, list == &info.inputs ? "input" : "output", v.name.c_str(),
                       v.kind == "optional" ? "n" : "", v.kind.c_str());
  for (auto &n : info.nodes) {
    // No Loop / Scan plugin and no subgraph adapter for them in the 8.5 parser: its pre-check refuses the node.
    if ((n.domain.empty() || n.domain == "ai.onnx") && (n.op_type == "Loop" || n.op_type == "Scan")) {
      int64_t version = 0;
      for (auto &o : info.opsets)
        if (o.first.empty() || o.first == "ai.onnx") version = o.second;
      return ge_fail(ge::GRAPH_FAILED, "%s: E13010: No operator plugin is registered for Op: %s, optype: "
                     "ai.onnx::%lld::%s (CANN's ONNX parser has no %s; unroll it or move it out of the model)", api,
                     n.name.empty() ? n.op_type.c_str() : n.name.c_str(), static_cast<long long>(version),
                     n.op_type.c_str(), n.op_type.c_str());
    }
  }
  if (!info.string_tensor.empty())
    return ge_fail(ge::GRAPH_FAILED, "%s: %s is a string (DT_STRING) tensor: NPU kernels do not compute strings, so "
                   "GE cannot run this graph on the device (keep string processing on the host)", api,
                   info.string_tensor.c_str());
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus parse_onnx(const std::string &bytes, ModelBytesPtr model, const char *api,
                           const std::map<ge::AscendString, ge::AscendString> &params, ge::Graph &graph) {
  std::map<std::string, std::string> opts;
  for (auto &kv : params) {
    std::string k = kv.first.GetString();
    bool known = false;
    for (const char *key : kParserKeys) known = known || k == key;
    if (!known) {
      std::string all;
      for (const char *key : kParserKeys) all += std::string(all.empty() ? "" : ", ") + key;
      return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: parser_params key '%s' is not supported; supported keys: %s", api,
                     k.c_str(), all.c_str());
    }
    opts[k] = kv.second.GetString();
  }
  onnx::ModelInfo info;
  std::string err;
  if (!onnx::parse_model(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), info, err))
    return ge_fail(ge::GRAPH_FAILED, "%s: %s", api, err.c_str());
  if (auto st = refuse_like_cann(info, api)) return st;
  if (info.node_count == 0) return ge_fail(ge::GRAPH_FAILED, "%s: the ONNX graph has no nodes", api);
  auto impl = std::make_shared<ge::GraphImpl>();
  impl->model = std::move(model);
  impl->node_count = info.node_count;
  impl->name = opts.count("output") ? opts["output"] : info.graph_name;
  // Inputs: dim_param or a missing value is -1, no shape at all is [] (onnx_data_parser.cc). Outputs: GE's parser
  // keeps only their names (ParseOutput); dtype and shape come from shape inference at compile (A5).
  auto to_spec = [&](const onnx::ValueInfo &v, const char *what, IOSpec &s) -> ge::graphStatus {
    const bool output = std::strcmp(what, "output") == 0;
    s.name = v.name;
    s.onnx_type = v.elem_type;
    s.dtype = dtype_from_onnx(v.elem_type);
    if (output && v.elem_type == 0) return ge::GRAPH_SUCCESS;  // no type: known after compile
    if (s.dtype == ge::DT_UNDEFINED)
      return ge_fail(ge::GRAPH_FAILED, "%s: %s '%s' has ONNX element type %s (%d), which the host NPU does not support",
                     api, what, v.name.c_str(), onnx::elem_type_name(v.elem_type), v.elem_type);
    if (output) {
      s.dims = {-2};  // UNKNOWN_DIM_NUM until CompileGraph infers it
      return ge::GRAPH_SUCCESS;
    }
    // GE's runtime tensors hold at most gert::Shape::kMaxDimNum (25) dims (exe_graph/runtime/shape.h); so does the
    // host NPU's tensor reference (GERT_HOST_MAX_DIMS).
    if (v.dims.size() > GERT_HOST_MAX_DIMS)
      return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: input '%s' has rank %zu; GE supports at most %d dims", api,
                     v.name.c_str(), v.dims.size(), GERT_HOST_MAX_DIMS);
    for (auto &d : v.dims) {
      s.dims.push_back(d.value >= 0 ? d.value : -1);
      s.dim_names.push_back(d.value >= 0 ? std::string() : d.param);
    }
    return ge::GRAPH_SUCCESS;
  };
  for (auto &v : info.inputs) {
    IOSpec s;
    if (auto st = to_spec(v, "input", s)) return st;
    impl->inputs.push_back(std::move(s));
  }
  for (auto &v : info.outputs) {
    IOSpec s;
    if (auto st = to_spec(v, "output", s)) return st;
    impl->outputs.push_back(std::move(s));
  }
  if (opts.count("ge.outputNodeName") && !opts["ge.outputNodeName"].empty()) {
    // "name:index;name:index" or "name;name": keep those graph outputs, in that order.
    std::vector<IOSpec> kept;
    for (auto &item : split(opts["ge.outputNodeName"], ';')) {
      std::string name = item.substr(0, item.find(':'));
      bool found = false;
      for (auto &o : impl->outputs) {
        if (o.name == name) {
          kept.push_back(o);
          found = true;
        }
      }
      if (!found)
        return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: ge.outputNodeName names '%s', which is not a graph output", api,
                       name.c_str());
    }
    impl->outputs = kept;
  }
  if (opts.count("input_shape") && !opts["input_shape"].empty()) {
    // "x:1,3,224,224;y:1,10": fixes dims (-1 keeps a dim dynamic).
    std::vector<std::pair<std::string, std::vector<int64_t>>> entries;
    if (auto st = parse_shape_spec(opts["input_shape"], "input_shape", api, ge::GRAPH_PARAM_INVALID, entries))
      return st;
    for (auto &[name, dims] : entries) {
      IOSpec *in = nullptr;
      for (auto &i : impl->inputs) in = i.name == name ? &i : in;
      if (!in) return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: input_shape names '%s', which is not a graph input", api,
                              name.c_str());
      if (dims.size() != in->dims.size())
        return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: input_shape gives '%s' rank %zu but the model says %s (rank %zu)",
                       api, name.c_str(), dims.size(), dims_str(in->dims).c_str(), in->dims.size());
      for (size_t i = 0; i < dims.size(); ++i) {
        if (in->dims[i] >= 0 && dims[i] != in->dims[i])
          return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: input_shape sets '%s' axis %zu to %lld but the model fixes it at %lld",
                         api, name.c_str(), i, static_cast<long long>(dims[i]), static_cast<long long>(in->dims[i]));
        if (dims[i] >= 0) in->dims[i] = dims[i];
      }
    }
  }
  ge::GraphUtilsEx::SetImpl(graph, impl);
  return ge::GRAPH_SUCCESS;
}

ge::graphStatus parse_onnx_file(const char *path, const char *api,
                                const std::map<ge::AscendString, ge::AscendString> &params, ge::Graph &graph) {
  if (!path) return ge_fail(ge::GRAPH_PARAM_INVALID, "%s: model_file is null", api);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ge_fail(ge::GRAPH_FAILED, "%s: cannot open '%s'", api, path);
  std::string bytes;
  FileStamp before, after;
  if (!stamp_of(fd, before) || !read_all(fd, bytes) || !stamp_of(fd, after)) {
    ::close(fd);
    return ge_fail(ge::GRAPH_FAILED, "%s: cannot read '%s'", api, path);
  }
  if (before != after) {  // written while read: what was read may be neither version
    ::close(fd);
    return ge_fail(ge::GRAPH_FAILED, "%s: '%s' changed while it was read; load it again once it is written", api,
                   path);
  }
  auto model = ModelBytes::file(fd, path, bytes, before);  // owns fd from here
  if (auto st = parse_onnx(bytes, std::move(model), api, params, graph)) return st;
  // CANN's file-based parser resolves external data next to the model file: keep its (canonical) directory
  char *real = ::realpath(path, nullptr);
  if (real) {
    std::string dir(real);
    std::free(real);
    auto slash = dir.rfind('/');
    ge::GraphUtilsEx::Impl(graph)->model_dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  return ge::GRAPH_SUCCESS;
}

// ---- ModelBytes -----------------------------------------------------------------------------------------------------
namespace {
std::atomic<uint64_t> g_model_bytes{0};

// `bytes`, counted in g_model_bytes while they live.
std::shared_ptr<const std::string> counted(std::shared_ptr<const std::string> bytes) {
  struct Held {
    std::shared_ptr<const std::string> bytes;
    ~Held() {
      if (bytes) g_model_bytes.fetch_sub(bytes->size());
    }
  };
  if (!bytes) return bytes;
  auto h = std::make_shared<Held>();
  g_model_bytes.fetch_add(bytes->size());
  h->bytes = std::move(bytes);
  return std::shared_ptr<const std::string>(h, h->bytes.get());
}
}  // namespace

uint64_t model_bytes_held() { return g_model_bytes.load(); }

bool read_all(int fd, std::string &out) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < 0) return false;
  out.assign(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, &out[done], out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  char extra;  // grown since the fstat: not the size read
  for (;;) {
    ssize_t n = ::pread(fd, &extra, 1, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    return n == 0;
  }
}

ModelBytesPtr ModelBytes::held(std::shared_ptr<const std::string> bytes) {
  std::shared_ptr<ModelBytes> m(new ModelBytes());
  if (bytes) m->digest(*bytes);
  m->held_ = counted(std::move(bytes));
  return m;
}

bool stamp_of(int fd, FileStamp &out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  out.dev = static_cast<uint64_t>(st.st_dev);
  out.ino = static_cast<uint64_t>(st.st_ino);
  out.size = static_cast<int64_t>(st.st_size);
  out.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  out.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return true;
}

ModelBytesPtr ModelBytes::file(int fd, const std::string &path, const std::string &bytes, const FileStamp &stamp) {
  std::shared_ptr<ModelBytes> m(new ModelBytes());
  m->fd_ = fd;
  m->path_ = path;
  m->stamp_ = stamp;
  m->sha_ = sha256(bytes.data(), bytes.size());
  m->digest(bytes);
  return m;
}

ModelBytes::~ModelBytes() {
  if (fd_ >= 0) ::close(fd_);
}

void ModelBytes::digest(const std::string &bytes) {
  size_ = bytes.size();
  hash_[0] = std::_Hash_bytes(bytes.data(), bytes.size(), static_cast<size_t>(0xc70f6907UL));
  hash_[1] = std::_Hash_bytes(bytes.data(), bytes.size(), static_cast<size_t>(0x9e3779b97f4a7c15ULL));
}

std::shared_ptr<const std::string> ModelBytes::bytes(const char *api, ge::Status *st) const {
  if (fd_ < 0) return held_ ? held_ : std::make_shared<const std::string>();
  std::lock_guard<std::mutex> lk(mu_);
  if (auto shared = read_.lock()) return shared;
  // A file whose stamp (what only a write, a chmod or root changes) is the parse's is checked by the digests below;
  // one with another stamp by SHA-256 too, since those digests are not made to resist a writer aiming at them
  FileStamp now_stamp;
  bool touched = !stamp_of(fd_, now_stamp) || now_stamp != stamp_;
  auto out = std::make_shared<std::string>();
  if (!read_all(fd_, *out)) {
    *st = ge_fail(ge::FAILED, "%s: cannot read the model file '%s' again (it was parsed from it; a model file must "
                  "stay readable while its graphs compile)", api, path_.c_str());
    return nullptr;
  }
  ModelBytes now;
  now.digest(*out);
  if (now.key() != key() || (touched && sha256(out->data(), out->size()) != sha_)) {
    *st = ge_fail(ge::FAILED, "%s: the model file '%s' changed since it was parsed (%zu bytes then, %zu now, other "
                  "content): its graphs compile from the bytes parsed; replace a model file by a new one (rename) and "
                  "load that, do not write over it", api, path_.c_str(), size_, out->size());
    return nullptr;
  }
  auto shared = counted(std::move(out));
  read_ = shared;
  return shared;
}

std::string ModelBytes::reopen_path() const { return fd_ >= 0 ? "/proc/self/fd/" + std::to_string(fd_) : ""; }

}  // namespace hostnpu

namespace ge {

Graph::Graph(const std::string &name) : impl_(std::make_shared<GraphImpl>()) { impl_->name = name; }
Graph::Graph(const char_t *name) : impl_(std::make_shared<GraphImpl>()) { impl_->name = name ? name : ""; }
bool Graph::IsValid() const { return impl_ && impl_->model && impl_->model->size() != 0; }
graphStatus Graph::SaveToFile(const char_t *file_name) const {
  if (!IsValid() || !file_name) return GRAPH_FAILED;
  Status st = GRAPH_SUCCESS;
  auto bytes = impl_->model->bytes("Graph::SaveToFile", &st);
  if (!bytes) return st;
  std::ofstream f(file_name, std::ios::binary);
  f.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  return f ? GRAPH_SUCCESS : GRAPH_FAILED;
}
graphStatus Graph::LoadFromFile(const char_t *file_name) {
  return hostnpu::parse_onnx_file(file_name, "Graph::LoadFromFile", {}, *this);
}
graphStatus Graph::GetName(AscendString &name) const {
  name = AscendString(impl_ ? impl_->name.c_str() : "");
  return GRAPH_SUCCESS;
}

}  // namespace ge
