// Host NPU GE: graphs, sessions and the compute provider, shared by the GE entry points.
#pragma once

#include "sha256.h"
#include <atomic>
#include <cxxabi.h>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ge/ge_api.h"
#include "gert_host/graph_provider.h"
#include "onnx_model.h"

namespace hostnpu {

class ModelBytes;
using ModelBytesPtr = std::shared_ptr<const ModelBytes>;

// One graph input or output as GE sees it: dims < 0 are dynamic.
struct IOSpec {
  std::string name;
  ge::DataType dtype = ge::DT_UNDEFINED;
  int32_t onnx_type = 0;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;  // ONNX dim_param per axis ("" when fixed or unnamed)
};

std::string dims_str(const std::vector<int64_t> &dims);

// "a;b;" -> {"a", "b", ""}: a trailing separator leaves an empty last item, so "1,2," has a bad (empty) dim.
std::vector<std::string> split(const std::string &s, char sep);
bool parse_i64(const std::string &s, int64_t &v);
// A shape spec "name:d0,d1,...;name:..." (parser input_shape, option ge.inputShape): dims >= -1, -1 dynamic.
// Fails with `code`, naming `key` and the bad entry.
ge::Status parse_shape_spec(const std::string &spec, const char *key, const char *api, ge::Status code,
                            std::vector<std::pair<std::string, std::vector<int64_t>>> &out);
ge::DataType dtype_from_onnx(int32_t onnx_type);
const char *dtype_name(ge::DataType dt);

// Sets the calling thread's GEGetErrorMsgV2 / GEGetWarningMsgV2 text.
ge::Status ge_fail(ge::Status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ge_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The status a GE entry point returns for a C++ exception it caught (call it from a catch block): ge::FAILED, with
// the exception's text as GEGetErrorMsgV2. Entry points called from Cython never let an exception escape.
ge::Status ge_internal_failure(const char *api);
// Ends a GE entry point's function-try-block: `Status f(args) try { ... } HOSTNPU_GE_GUARD`.
#define HOSTNPU_GE_GUARD \
  catch (abi::__forced_unwind &) { throw; } catch (...) { return ::hostnpu::ge_internal_failure(__func__); }

ge::CompiledGraphSummaryPtr make_summary(bool is_static, size_t const_memory, size_t feature_memory,
                                         const std::vector<std::vector<int64_t>> &shapes,
                                         const std::vector<ge::DataType> &dtypes);

// Builds a Graph from a serialized ONNX model (or a model file) and parser_params; `api` names the caller in errors.
// Bytes of serialized models held now (ModelBytes: held, or read again for a compile), gertHostModelBytesHeld.
uint64_t model_bytes_held();
// `bytes` are what `model` holds or read from its file (parse_onnx_file reads them once for both).
ge::graphStatus parse_onnx(const std::string &bytes, ModelBytesPtr model, const char *api,
                           const std::map<ge::AscendString, ge::AscendString> &params, ge::Graph &graph);
ge::graphStatus parse_onnx_file(const char *path, const char *api,
                                const std::map<ge::AscendString, ge::AscendString> &params, ge::Graph &graph);
// All of the file `fd` from its start (pread: the descriptor's offset is not used); false if it cannot be read.
bool read_all(int fd, std::string &out);

// A parsed model's serialized ONNX bytes (GraphImpl::model). A model parsed from memory (aclgrphParseONNXFromMem)
// holds them. A model parsed from a file (aclgrphParseONNX) holds the open file (a descriptor: a file replaced by a
// rename since stays the one parsed), its size and two digests of its bytes, and reads them again for each compile
// (hot sizes, gears, each stream, recovery) and each other reader, checked against the parse: a file written over
// since fails that reader with an error naming it. So between compiles a process holds no copy of a model file's
// bytes (the compute provider's session holds its own, optimized one); before, every parsed model kept one for the
// process's life (PP-OCR rec 10.6 MB per Triton stub; issue 41, docs/host-memory.md).
// What fstat says of a file that only a write to it (or root) changes: its identity, size, and modification and
// change times (the change time cannot be set by a user: any write or chmod moves it to now).
struct FileStamp {
  uint64_t dev = 0, ino = 0;
  int64_t size = -1, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp &o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
  }
  bool operator!=(const FileStamp &o) const { return !(*this == o); }
};
// fstat of `fd` as a FileStamp; false if fstat fails.
bool stamp_of(int fd, FileStamp &out);

class ModelBytes {
 public:
  static std::shared_ptr<const ModelBytes> held(std::shared_ptr<const std::string> bytes);
  // `fd` (owned from now on, closed with this) is the file `path` was opened as; `bytes` what was read from it,
  // `stamp` the file's FileStamp, the same before and after that read.
  static std::shared_ptr<const ModelBytes> file(int fd, const std::string &path, const std::string &bytes,
                                                const FileStamp &stamp);
  ~ModelBytes();
  ModelBytes(const ModelBytes &) = delete;
  ModelBytes &operator=(const ModelBytes &) = delete;
  size_t size() const { return size_; }
  bool from_file() const { return fd_ >= 0; }
  // The bytes: the held ones, else read from the file now (one read shared by the readers meanwhile); null with
  // GE's error set (ge::FAILED, naming `api` and the file) when it cannot be read or is not what was parsed.
  std::shared_ptr<const std::string> bytes(const char *api, ge::Status *st) const;
  // The file the provider reads the model from again ("/proc/self/fd/N": the parsed file, even replaced), or "".
  std::string reopen_path() const;
  // (size, digest, digest): equal for equal bytes, so parses of one model share the charge of its weights.
  std::tuple<size_t, size_t, size_t> key() const { return {size_, hash_[0], hash_[1]}; }

 private:
  ModelBytes() = default;
  void digest(const std::string &bytes);
  int fd_ = -1;
  std::string path_;
  FileStamp stamp_;  // the file's at the parse: a later read with another stamp is checked by sha_ (a chmod passes)
  Sha256 sha_{};     // of the file's bytes at the parse (file-backed only)
  size_t size_ = 0;
  size_t hash_[2] = {0, 0};
  std::shared_ptr<const std::string> held_;
  mutable std::mutex mu_;
  mutable std::weak_ptr<const std::string> read_;
};

// gertHostCompileOption's key for the compiled graph's model directory (GraphImpl::model_dir), not a GE option.
constexpr const char *kModelDirOption = "gert.host.model_dir";
// gertHostCompileOption's key for the file the compiled graph's model can be read from again
// (ModelBytes::reopen_path), "" for a model parsed from memory; not a GE option.
constexpr const char *kModelFileOption = "gert.host.model_file";

// The provider registered by gertHostSetGraphProvider (a copy), or null.
std::shared_ptr<const gertHostGraphProvider> graph_provider();

}  // namespace hostnpu

namespace ge {
// A parsed ONNX model. Immutable after parsing, so Graph copies share it.
class GraphImpl {
 public:
  std::string name;
  hostnpu::ModelBytesPtr model;  // the serialized ONNX ModelProto (held, or read from its file again)
  // The directory of the model file it was parsed from (aclgrphParseONNX: its external data resolves there), "" when
  // parsed from memory. Canonical (symlinks resolved), so the provider checks external data paths against it.
  std::string model_dir;
  std::vector<hostnpu::IOSpec> inputs, outputs;
  size_t node_count = 0;
};

// The host NPU's access to a Graph's implementation (CANN's graph.h befriends GraphUtilsEx).
class GraphUtilsEx {
 public:
  static const GraphImplPtr &Impl(const Graph &g) { return g.impl_; }
  static void SetImpl(Graph &g, GraphImplPtr impl) { g.impl_ = std::move(impl); }
};
}  // namespace ge
