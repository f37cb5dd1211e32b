// Host NPU GE: GEInitialize / GEFinalize, ge::Session (AddGraph, CompileGraph, LoadGraph,
// ExecuteGraphWithStreamAsync, RunGraph, RemoveGraph) and the compute provider registry.
// Rules follow real GE: static graphs take only their compiled shapes and caller-allocated outputs, inputs must be
// device memory, a graph loads once, launches through one Session are serialized.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "ge_cache.h"
#include "ge_state.h"
#include "runtime.h"

namespace hostnpu {

const std::string &ge_error_text();
const std::string &ge_warning_text();
aclError device_alloc(int32_t device, size_t size, void **out, const char *api);

namespace {

std::mutex g_provider_mu;
std::shared_ptr<const gertHostGraphProvider> g_provider;

// A model's weights on a device, charged once against the device's memory (aclrtGetMemInfo) while any graph of the
// model is loaded on it. On a device a loaded graph's weights (its const memory) live in device memory; on the host
// NPU every graph of one model runs on the provider's one session per model and its one copy of the weights
// (gert/hostnpu/ort_provider.py), so the model's graphs on every stream (gears, hot sizes) share one charge. The
// bytes are the summary's const memory (the model's size); a run's intermediates (the provider's arena) and
// aclrtMalloc'd buffers are not part of it. See docs/host-memory.md.
struct WeightsCharge {
  int32_t device = 0;
  uint64_t bytes = 0;
  // The models charged (one per parse of the same bytes: each gert.load parses its own): held, so that no other
  // model takes one's address while the charge is found by it.
  std::vector<ModelBytesPtr> models;
  ~WeightsCharge() {
    if (Device *d = find_device(device)) d->in_use.fetch_sub(bytes);
  }
};

struct ChargeRegistry {
  std::mutex mu;
  // (device, model address) -> its charge: the graphs of one parsed model find it without reading the bytes
  std::map<std::pair<int32_t, const ModelBytes *>, std::weak_ptr<WeightsCharge>> by_model;
  // (device, size, digests of the bytes: ModelBytes::key) -> the charge of those bytes: another parse of the same
  // model (the provider shares its session by the bytes too) finds it once per parse
  std::map<std::tuple<int32_t, std::tuple<size_t, size_t, size_t>>, std::weak_ptr<WeightsCharge>> by_bytes;
};
ChargeRegistry &charges() {
  static ChargeRegistry *r = new ChargeRegistry();
  return *r;
}

// The charge of `model`'s weights on `device`: the one the loaded graphs of the same bytes hold, or a new one when
// the device has `bytes` free (else null, with the error set).
std::shared_ptr<WeightsCharge> charge_weights(Device &d, const ModelBytesPtr &model, uint64_t bytes,
                                              uint32_t graph_id, ge::Status *st) {
  ChargeRegistry &reg = charges();
  std::lock_guard<std::mutex> lk(reg.mu);
  std::shared_ptr<WeightsCharge> held;
  auto by_model = std::make_pair(d.id, model.get());
  std::tuple<int32_t, std::tuple<size_t, size_t, size_t>> by_bytes{d.id, {0, 0, 0}};
  if (model) {
    auto it = reg.by_model.find(by_model);
    if (it != reg.by_model.end() && (held = it->second.lock())) return held;
    by_bytes = {d.id, model->key()};  // two 64-bit digests of the bytes: not read again to compare them
    auto same = reg.by_bytes.find(by_bytes);
    if (same != reg.by_bytes.end() && (held = same->second.lock())) {
      held->models.push_back(model);
      reg.by_model[by_model] = held;
      return held;
    }
  }
  for (auto it = reg.by_model.begin(); it != reg.by_model.end();)  // forget released charges
    it = it->second.expired() ? reg.by_model.erase(it) : std::next(it);
  for (auto it = reg.by_bytes.begin(); it != reg.by_bytes.end();)
    it = it->second.expired() ? reg.by_bytes.erase(it) : std::next(it);
  uint64_t used = d.in_use.load();
  do {
    if (used + bytes > d.capacity) {
      *st = ge_fail(ACL_ERROR_GE_MEMORY_ALLOCATION,
                    "LoadGraph: graph %u: device %d is out of memory for the graph's weights: %llu bytes needed, "
                    "%llu of %llu bytes in use", graph_id, d.id, static_cast<unsigned long long>(bytes),
                    static_cast<unsigned long long>(used), static_cast<unsigned long long>(d.capacity));
      return nullptr;
    }
  } while (!d.in_use.compare_exchange_weak(used, used + bytes));
  auto charge = std::make_shared<WeightsCharge>();
  charge->device = d.id;
  charge->bytes = bytes;
  if (model) {  // (a graph without a model's bytes shares nothing)
    charge->models.push_back(model);
    reg.by_model[by_model] = charge;
    if (!held) reg.by_bytes[by_bytes] = charge;  // (a hash collision keeps the first bytes' entry)
  }
  return charge;
}

// The last launch of a graph whose tensors passed ExecuteGraphWithStreamAsync's checks, with what the checks made of
// them (the provider's refs, the allocations found). A launch of the same tensors (address, size, dtype, placement,
// shape), while no device memory left the runtime since (Runtime::device_frees) and each allocation found is alive,
// passes the same checks by construction: a graph's inputs, outputs and gears are fixed once it is compiled, and an
// allocation goes only by aclrtFree or a device reset. It takes the refs without running them again (the executor's
// steady state: the same device buffers every run). Any difference runs the checks; what they pass replaces the entry.
// What can change between launches is checked per launch as before: the graph loaded, the stream alive, the device's
// faults and aborts (Stream::launch).
class CheckedLaunch {
 public:
  // The refs and held allocations of `inputs` / `outputs` when they are the entry's; false: check them.
  bool take(const std::vector<gert::Tensor> &inputs, const std::vector<gert::Tensor> &outputs, uint64_t frees,
            std::vector<gertHostTensorRef> &run_in, std::vector<gertHostTensorRef> &run_out,
            std::vector<AllocationPtr> &held) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!valid_ || frees != frees_ || inputs.size() != in_.size() || outputs.size() != out_.size()) return false;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!in_[i].same(inputs[i])) return false;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!out_[i].same(outputs[i])) return false;
    held.clear();
    for (auto &[weak, found] : held_) {
      AllocationPtr a = weak.lock();
      if (found && !a) return false;
      held.push_back(std::move(a));
    }
    run_in = run_in_;
    run_out = run_out_;
    return true;
  }
  // Remember the tensors that just passed the checks (`frees`: read before the checks began).
  void keep(const std::vector<gert::Tensor> &inputs, const std::vector<gert::Tensor> &outputs, uint64_t frees,
            const std::vector<gertHostTensorRef> &run_in, const std::vector<gertHostTensorRef> &run_out,
            const std::vector<AllocationPtr> &held) {
    std::lock_guard<std::mutex> lk(mu_);
    in_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) in_[i].set(inputs[i]);
    out_.resize(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) out_[i].set(outputs[i]);
    held_.resize(held.size());
    for (size_t i = 0; i < held.size(); ++i) held_[i] = {held[i], held[i] != nullptr};
    run_in_ = run_in;
    run_out_ = run_out;
    frees_ = frees;
    valid_ = true;
  }

 private:
  struct Key {
    const void *addr = nullptr;
    size_t size = 0;
    ge::DataType dtype = ge::DT_UNDEFINED;
    gert::TensorPlacement placement = gert::kTensorPlacementEnd;
    std::vector<int64_t> dims;
    void set(const gert::Tensor &t) {
      addr = t.GetAddr();
      size = t.GetSize();
      dtype = t.GetDataType();
      placement = t.GetPlacement();
      const gert::Shape &s = t.GetStorageShape();
      dims.resize(s.GetDimNum());
      for (size_t k = 0; k < dims.size(); ++k) dims[k] = s.GetDim(k);
    }
    bool same(const gert::Tensor &t) const {
      if (t.GetAddr() != addr || t.GetSize() != size || t.GetDataType() != dtype || t.GetPlacement() != placement)
        return false;
      const gert::Shape &s = t.GetStorageShape();
      if (s.GetDimNum() != dims.size()) return false;
      for (size_t k = 0; k < dims.size(); ++k)
        if (s.GetDim(k) != dims[k]) return false;
      return true;
    }
  };
  std::mutex mu_;
  bool valid_ = false;
  uint64_t frees_ = 0;
  std::vector<Key> in_, out_;
  std::vector<gertHostTensorRef> run_in_, run_out_;
  std::vector<std::pair<std::weak_ptr<Allocation>, bool>> held_;  // (allocation, one was found: not a 0-byte tensor)
};

struct GraphRecord {
  uint32_t id = 0;
  ge::GraphImplPtr graph;
  std::vector<IOSpec> inputs;                 // after ge.inputShape
  std::vector<std::vector<int64_t>> gears;    // ge.dynamicDims: values of the -1 dims, per gear
  std::map<std::string, std::string> options;
  bool compiled = false, is_static = false;
  std::vector<IOSpec> outputs;                // compiled dtypes and shapes
  size_t const_memory = 0;                    // the summary's: the provider keeps the weights (the model's size)
  std::shared_ptr<const gertHostGraphProvider> provider;
  void *exe = nullptr;
  std::atomic<uint64_t> loaded_stream{0};    // 0: not loaded
  std::shared_ptr<WeightsCharge> weights;    // once loaded: the model's weights on the device (shared per model)
  std::atomic<int> in_flight{0};
  // How long the compute provider's last run of this graph took (ns; -1 before its first run): the inline launch
  // takes only graphs that run about as long as a hand-off to the stream's worker costs (kInlineMaxNs).
  std::atomic<int64_t> last_run_ns{-1};
  CheckedLaunch checked;  // the last launch's tensors that passed the checks
  // Compiling and loading one graph. Not the Session's launch lock: GE's CompileGraph and LoadGraph take no
  // InnerSession::build_run_mutex_, so a graph compiles while other graphs of the Session execute.
  std::mutex compile_mu;
  // RunGraph of a static graph stages its host tensors in buffers of the graph's own, as GE copies them to device
  // memory and back: a repeated run hands the provider the same tensors, so that it replays its binding.
  // One RunGraph at a time uses them (try-locked: a concurrent one runs on its own memory, as before).
  std::mutex staging_mu;
  std::vector<std::vector<uint8_t>> staged_in, staged_out;
  ~GraphRecord() {
    if (exe && provider && provider->release) provider->release(exe);
  }
};
using GraphRecordPtr = std::shared_ptr<GraphRecord>;

// The longest last run (ns) of a graph that ExecuteGraphWithStreamAsync still runs on the launching thread: about
// what handing the run to the stream's worker costs, so the launch takes at most that much longer than on a device.
constexpr int64_t kInlineMaxNs = 100000;

struct SessionState {
  uint64_t id = 0;
  int32_t device = 0;
  uint32_t aicore_cube = 0, aicore_vector = 0;  // ge.aicoreNum, 0 = unset
  std::map<std::string, std::string> options;
  std::mutex mu;         // graphs
  std::mutex launch_mu;  // GE serializes launches inside one Session (InnerSession::build_run_mutex_)
  std::map<uint32_t, GraphRecordPtr> graphs;
};
using SessionPtr = std::shared_ptr<SessionState>;

struct GeState {
  std::mutex mu;
  bool initialized = false;
  std::map<std::string, std::string> options;
  uint32_t aicore_cube = 0, aicore_vector = 0;
  std::unordered_map<uint64_t, SessionPtr> sessions;
  uint64_t next_session = 1;
};
GeState &ge_state() {
  static GeState *s = new GeState();
  return *s;
}

const char *const kPrecisionModes[] = {"force_fp16",          "force_fp32",           "cube_fp16in_fp32out",
                                       "allow_mix_precision", "allow_fp32_to_fp16",   "must_keep_origin_dtype",
                                       "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16"};
const char *const kPrecisionModesV2[] = {"fp16",           "origin",     "cube_fp16in_fp32out", "mixed_float16",
                                         "mixed_bfloat16", "cube_hif8",  "mixed_hif8"};
// Keys the host NPU gives a meaning to, or accepts as GE does without effect on the CPU.
const char *const kKnownKeys[] = {
    "ge.graphRunMode", "ge.exec.deviceId", "ge.session_device_id", "ge.socVersion", "ge.exec.precision_mode",
    "ge.exec.precision_mode_v2", "ge.inputShape", "ge.dynamicDims", "ge.dynamicNodeType", "ge.aicoreNum",
    "ge.vectorcoreNum", "ge.exec.staticMemoryPolicy", "ge.exec.memoryOptimizationPolicy", "ge.featureBaseRefreshable",
    "ge.constLifecycle", "ge.streamNum", "ge.streamMaxParallelNum", "ge.outputDatatype", "ge.oo.level",
    "ge.jit_compile", "ge.exec.enableDump", "ge.exec.dumpPath", "ge.exec.dumpMode",
    "ge.exec.dynamicGraphExecuteMode", "ge.exec.dataInputsShapeRange", "ge.inputHintShape", "ge.exec.dynamicInput",
    "ge.dynamicBatchSize", "ge.dynamicImageSize", "ge.graph_compiler_cache_dir", "ge.graph_key"};

template <class M>
std::map<std::string, std::string> to_std(const M &m) {
  std::map<std::string, std::string> out;
  for (auto &kv : m) out[std::string(kv.first.GetString())] = kv.second.GetString();
  return out;
}

uint32_t hw_cube_cores(int32_t device) {
  if (Device *d = find_device(device)) return d->cube_cores;
  unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1;
}

// Validates options common to every level; fills aicore numbers if present.
ge::Status check_options(const std::map<std::string, std::string> &opts, const char *api, const char *level,
                         uint32_t *cube, uint32_t *vector) {
  bool p1 = opts.count("ge.exec.precision_mode") != 0, p2 = opts.count("ge.exec.precision_mode_v2") != 0;
  if (p1 && p2)
    return ge_fail(ge::FAILED,
                   "%s: E10056: ge.exec.precision_mode and ge.exec.precision_mode_v2 cannot both be set", api);
  if (p1) {
    bool ok = false;
    for (auto *m : kPrecisionModes) ok = ok || opts.at("ge.exec.precision_mode") == m;
    if (!ok)
      return ge_fail(ge::FAILED, "%s: ge.exec.precision_mode '%s' is not one of force_fp16, force_fp32, "
                     "cube_fp16in_fp32out, allow_mix_precision, allow_fp32_to_fp16, must_keep_origin_dtype, "
                     "allow_mix_precision_fp16, allow_mix_precision_bf16, allow_fp32_to_bf16",
                     api, opts.at("ge.exec.precision_mode").c_str());
  }
  if (p2) {
    bool ok = false;
    for (auto *m : kPrecisionModesV2) ok = ok || opts.at("ge.exec.precision_mode_v2") == m;
    if (!ok)
      return ge_fail(ge::FAILED, "%s: ge.exec.precision_mode_v2 '%s' is not one of fp16, origin, "
                     "cube_fp16in_fp32out, mixed_float16, mixed_bfloat16, cube_hif8, mixed_hif8",
                     api, opts.at("ge.exec.precision_mode_v2").c_str());
  }
  auto it = opts.find("ge.aicoreNum");
  if (it != opts.end()) {
    // "<cube>|<vector>", "<cube>|" or "<cube>" (GE PlatformInfoUtil::parseAicoreNumOption)
    std::string v = it->second;
    size_t bar = v.find('|');
    std::string c = v.substr(0, bar), ve = bar == std::string::npos ? "" : v.substr(bar + 1);
    int64_t cv = 0, vv = 0;
    if (!parse_i64(c, cv) || cv <= 0 || (!ve.empty() && (!parse_i64(ve, vv) || vv <= 0)))
      return ge_fail(ge::FAILED, "%s: ge.aicoreNum '%s' must be '<cube>|<vector>' with positive counts", api,
                     v.c_str());
    if (cube) *cube = static_cast<uint32_t>(cv);
    if (vector) *vector = static_cast<uint32_t>(vv);
  }
  for (auto &kv : opts) {
    bool known = false;
    for (auto *k : kKnownKeys) known = known || kv.first == k;
    if (!known) ge_warn("%s: %s option '%s' is not known to GE; ignored", api, level, kv.first.c_str());
  }
  return ge::SUCCESS;
}

SessionPtr find_session(uint64_t id, const char *api, ge::Status *st) {
  auto &g = ge_state();
  std::lock_guard<std::mutex> lk(g.mu);
  if (!g.initialized) {
    *st = ge_fail(ACL_ERROR_GE_EXEC_NOT_INIT, "%s: GEInitialize has not been called (or GEFinalize was)", api);
    return nullptr;
  }
  auto it = g.sessions.find(id);
  if (it == g.sessions.end()) {
    *st = ge_fail(ge::FAILED, "%s: the session is not valid (it was created before GEInitialize or GE was finalized)",
                  api);
    return nullptr;
  }
  return it->second;
}

GraphRecordPtr find_graph(SessionState &s, uint32_t graph_id, const char *api, ge::Status *st) {
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.graphs.find(graph_id);
  if (it == s.graphs.end()) {
    *st = ge_fail(ge::FAILED, "%s: graph %u was not added to this session (or was removed)", api, graph_id);
    return nullptr;
  }
  return it->second;
}

ge::Status apply_graph_options(GraphRecord &r, const char *api) {
  auto &o = r.options;
  auto it = o.find("ge.inputShape");
  std::vector<std::pair<IOSpec *, size_t>> dyn;  // the -1 dims ge.inputShape leaves, in order
  if (it != o.end() && !it->second.empty()) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> entries;
    if (ge::Status st = parse_shape_spec(it->second, "ge.inputShape", api, ACL_ERROR_GE_PARAM_INVALID, entries))
      return st;
    for (auto &[name, dims] : entries) {
      IOSpec *in = nullptr;
      for (auto &i : r.inputs) in = i.name == name ? &i : in;
      if (!in)
        return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: ge.inputShape names '%s', which is not an input of graph %u",
                       api, name.c_str(), r.id);
      if (dims.size() != in->dims.size())
        return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: ge.inputShape gives '%s' rank %zu, the graph has %s", api,
                       name.c_str(), dims.size(), dims_str(in->dims).c_str());
      for (size_t i = 0; i < dims.size(); ++i) {
        if (in->dims[i] >= 0 && dims[i] >= 0 && dims[i] != in->dims[i])
          return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: ge.inputShape sets '%s' axis %zu to %lld, the graph fixes %lld",
                         api, name.c_str(), i, static_cast<long long>(dims[i]), static_cast<long long>(in->dims[i]));
        if (dims[i] >= 0) in->dims[i] = dims[i];
        if (dims[i] < 0) dyn.push_back({in, i});
      }
    }
  }
  it = o.find("ge.dynamicDims");
  if (it != o.end() && !it->second.empty()) {
    if (dyn.empty())
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID,
                     "%s: ge.dynamicDims needs ge.inputShape with -1 for the dims the gears set", api);
    for (auto &gear_text : split(it->second, ';')) {
      if (gear_text.empty()) continue;
      std::vector<int64_t> gear;
      for (auto &d : split(gear_text, ',')) {
        int64_t v;
        if (!parse_i64(d, v) || v <= 0)
          return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: ge.dynamicDims gear '%s' has a bad value '%s'", api,
                         gear_text.c_str(), d.c_str());
        gear.push_back(v);
      }
      if (gear.size() != dyn.size())
        return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: ge.dynamicDims gear '%s' has %zu values; ge.inputShape has %zu -1 dims",
                       api, gear_text.c_str(), gear.size(), dyn.size());
      r.gears.push_back(gear);
    }
    if (r.gears.size() < 2 || r.gears.size() > 100)
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: ge.dynamicDims has %zu gears; GE takes 2 to 100", api,
                     r.gears.size());
  }
  return ge::SUCCESS;
}

// Checks one run's input shapes against the graph (and its gears). Returns a failure status or SUCCESS.
ge::Status check_input_shape(const GraphRecord &r, size_t i, const std::vector<int64_t> &dims, const char *api) {
  const IOSpec &spec = r.inputs[i];
  if (dims.size() != spec.dims.size())
    return ge_fail(ACL_ERROR_GE_SHAPE_INVALID, "%s: graph %u input %zu '%s' has shape %s (rank %zu), the graph takes %s (rank %zu)",
                   api, r.id, i, spec.name.c_str(), dims_str(dims).c_str(), dims.size(), dims_str(spec.dims).c_str(),
                   spec.dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0 || (spec.dims[k] >= 0 && dims[k] != spec.dims[k]))
      return ge_fail(ACL_ERROR_GE_SHAPE_INVALID,
                     "%s: graph %u input %zu '%s' has shape %s, the %s graph takes %s", api, r.id, i,
                     spec.name.c_str(), dims_str(dims).c_str(), r.is_static ? "static" : "compiled",
                     dims_str(spec.dims).c_str());
  }
  return ge::SUCCESS;
}

ge::Status check_gears(const GraphRecord &r, const std::vector<std::vector<int64_t>> &all_dims, const char *api) {
  if (r.gears.empty()) return ge::SUCCESS;
  std::vector<int64_t> actual;
  for (size_t i = 0; i < r.inputs.size(); ++i)
    for (size_t k = 0; k < r.inputs[i].dims.size(); ++k)
      if (r.inputs[i].dims[k] < 0) actual.push_back(all_dims[i][k]);
  for (auto &g : r.gears)
    if (g == actual) return ge::SUCCESS;
  std::string gears;
  for (auto &g : r.gears) gears += (gears.empty() ? "" : " ") + dims_str(g);
  return ge_fail(ACL_ERROR_GE_SHAPE_INVALID, "%s: graph %u: the dynamic dims %s match none of its gears %s", api, r.id,
                 dims_str(actual).c_str(), gears.c_str());
}

// Callers pass at most GERT_HOST_MAX_DIMS dims (the parser refuses larger ranks, runs are checked against the
// graph's, providers' results are checked by rank_error); a larger rank is cut, never written past ref.dims.
void fill_ref(gertHostTensorRef &ref, void *data, uint64_t nbytes, ge::DataType dt, const std::vector<int64_t> &dims) {
  ref.data = data;
  ref.nbytes = nbytes;
  ref.dtype = static_cast<int32_t>(dt);
  size_t n = std::min<size_t>(dims.size(), GERT_HOST_MAX_DIMS);
  ref.ndim = static_cast<int32_t>(n);
  for (size_t k = 0; k < n; ++k) ref.dims[k] = dims[k];
}

// The bytes a tensor of `dims` and `dt` takes; false when the element count or the byte count overflows int64
// (Shape::GetShapeSize gives 0 then, which would pass every size check).
bool tensor_bytes(const std::vector<int64_t> &dims, ge::DataType dt, int64_t &out) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      out = -1;
      return true;
    }
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  out = ge::GetSizeInBytes(n, dt);
  return !(out < 0 && n > 0 && ge::GetSizeInBytes(1, dt) > 0);
}

std::vector<int64_t> ref_dims(const gertHostTensorRef &ref) {
  int32_t n = ref.ndim < 0 ? 0 : std::min<int32_t>(ref.ndim, GERT_HOST_MAX_DIMS);
  return std::vector<int64_t>(ref.dims, ref.dims + n);
}

std::vector<int64_t> shape_dims(const gert::Shape &s) {
  std::vector<int64_t> d;
  for (size_t k = 0; k < s.GetDimNum(); ++k) d.push_back(s.GetDim(k));
  return d;
}

ge::graphStatus free_device_tensor(gert::TensorAddress addr, gert::TensorOperateType op, void **out) {
  if (op == gert::kGetTensorAddress) {
    if (out) *out = addr;
    return ge::GRAPH_SUCCESS;
  }
  if (op == gert::kFreeTensor) {
    if (addr) aclrtFree(addr);
    return ge::GRAPH_SUCCESS;
  }
  return ge::GRAPH_FAILED;
}

struct DeviceAllocCtx {
  int32_t device;
  std::vector<void *> allocated;
  std::string error;
};
void *device_alloc_cb(void *ctx, uint64_t nbytes) {
  auto *c = static_cast<DeviceAllocCtx *>(ctx);
  void *p = nullptr;
  aclError e = device_alloc(c->device, nbytes ? nbytes : 1, &p, "ExecuteGraphWithStreamAsync (output)");
  if (e != ACL_SUCCESS) {
    c->error = "cannot allocate an output of " + std::to_string(nbytes) + " bytes on device " +
               std::to_string(c->device);
    return nullptr;
  }
  c->allocated.push_back(p);
  return p;
}

// After a successful run: frees the outputs the provider allocated but returned none of (a provider may allocate for
// a shape it expected, then find another one and allocate again: gert.hostnpu.ort_provider's learned shapes).
void release_unused(DeviceAllocCtx &c, const std::vector<gertHostTensorRef> &outs) {
  if (c.allocated.empty()) return;
  size_t kept = 0;
  for (void *p : c.allocated) {
    bool used = std::any_of(outs.begin(), outs.end(), [p](const gertHostTensorRef &o) { return o.data == p; });
    if (used)
      c.allocated[kept++] = p;
    else
      aclrtFree(p);
  }
  c.allocated.resize(kept);
}

struct HostAllocCtx {
  std::vector<std::vector<uint8_t>> buffers;
};
void *host_alloc_cb(void *ctx, uint64_t nbytes) {
  auto *c = static_cast<HostAllocCtx *>(ctx);
  c->buffers.emplace_back(nbytes ? nbytes : 1);
  return c->buffers.back().data();
}

// RunGraph on a static graph (the caller holds r.staging_mu): the inputs copied into the graph's staging buffers and
// the outputs pointed at its own, each of the size its compiled shape needs, written in place by the provider. Leaves
// the refs as they are when a tensor is empty (nothing to stage).
void stage_run_graph(GraphRecord &r, std::vector<gertHostTensorRef> &ins, std::vector<gertHostTensorRef> &outs) {
  std::vector<int64_t> out_bytes(outs.size());
  for (auto &ref : ins)
    if (ref.nbytes == 0) return;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!tensor_bytes(r.outputs[i].dims, r.outputs[i].dtype, out_bytes[i]) || out_bytes[i] <= 0) return;
  }
  r.staged_in.resize(ins.size());
  r.staged_out.resize(outs.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    auto &buf = r.staged_in[i];
    if (buf.size() != ins[i].nbytes) buf.assign(ins[i].nbytes, 0);
    std::memcpy(buf.data(), ins[i].data, ins[i].nbytes);
    ins[i].data = buf.data();
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    auto &buf = r.staged_out[i];
    if (buf.size() != static_cast<size_t>(out_bytes[i])) buf.assign(static_cast<size_t>(out_bytes[i]), 0);
    fill_ref(outs[i], buf.data(), static_cast<uint64_t>(out_bytes[i]), r.outputs[i].dtype, r.outputs[i].dims);
  }
}

// The graph this thread's provider->compile call is compiling, for gertHostCompileOption.
thread_local const SessionState *tls_compiling_session = nullptr;
thread_local const GraphRecord *tls_compiling_graph = nullptr;
thread_local std::string tls_compile_option;

struct CompilingScope {
  CompilingScope(const SessionState &s, const GraphRecord &r) {
    tls_compiling_session = &s;
    tls_compiling_graph = &r;
  }
  ~CompilingScope() {
    tls_compiling_session = nullptr;
    tls_compiling_graph = nullptr;
  }
};

// An option as GE's thread-local context sees it during a compile: the graph's, else the session's, else global.
std::string context_option(const SessionState &s, const GraphRecord &r, const char *key) {
  auto it = r.options.find(key);
  if (it != r.options.end()) return it->second;
  it = s.options.find(key);
  if (it != s.options.end()) return it->second;
  auto &g = ge_state();
  std::lock_guard<std::mutex> lk(g.mu);
  it = g.options.find(key);
  return it != g.options.end() ? it->second : std::string();
}

// A cache hit: GE loads the .om and replaces the user's graph with the cached one (graph_node->SetGraph) with its
// gears; nothing is compared with the graph that was added.
ge::Status load_cached(SessionState &s, GraphRecord &r, const gertHostGraphProvider &provider, const std::string &path,
                       const char *api) {
  CachedModel m;
  if (ge::Status e = ModelCache::read(path, m, api)) return e;
  if (!provider.load)
    return ge_fail(ge::FAILED, "%s: the compute provider cannot load cached models", api);
  char err[2048] = {0};
  void *exe = nullptr;
  if (provider.load(provider.ctx, s.id, m.provider_blob.data(), m.provider_blob.size(), &exe, err, sizeof err) != 0)
    return ge_fail(ge::FAILED, "%s: failed to load the cached model '%s': %s", api, path.c_str(), err);
  auto impl = std::make_shared<ge::GraphImpl>();
  impl->name = m.graph_name;
  impl->model = ModelBytes::held(nullptr);  // the compiled graph needs no ONNX bytes any more
  impl->inputs = std::move(m.graph_inputs);
  impl->outputs = std::move(m.graph_outputs);
  r.graph = impl;
  r.inputs = std::move(m.inputs);
  r.gears = std::move(m.gears);
  r.outputs = std::move(m.outputs);
  r.is_static = m.is_static;
  r.const_memory = static_cast<size_t>(m.const_memory);
  r.exe = exe;
  r.compiled = true;
  return ge::SUCCESS;
}

ge::Status save_cached(const ModelCache &cache, const GraphRecord &r, const gertHostGraphProvider &provider,
                       const char *api) {
  if (!provider.save) return ge_fail(ge::FAILED, "%s: the compute provider cannot save compiled models", api);
  HostAllocCtx alloc;
  void *data = nullptr;
  uint64_t nbytes = 0;
  char err[2048] = {0};
  if (provider.save(r.exe, host_alloc_cb, &alloc, &data, &nbytes, err, sizeof err) != 0)
    return ge_fail(ge::FAILED, "%s: graph %u: failed to serialize the compiled model for the cache: %s", api, r.id, err);
  CachedModel m;
  m.graph_name = r.graph->name;
  m.const_memory = r.const_memory;
  m.graph_inputs = r.graph->inputs;
  m.graph_outputs = r.graph->outputs;
  m.inputs = r.inputs;
  m.gears = r.gears;
  m.outputs = r.outputs;
  m.is_static = r.is_static;
  m.provider_blob.assign(static_cast<const char *>(data), static_cast<size_t>(nbytes));
  return cache.save(m, api);
}

// CompileGraph: shape inference and constant folding by the provider, never a run (ge-shapes-and-cache.md A1). The
// graph is static when every input dim is fixed, it has no gears and no tensor's shape depends on input values.
ge::Status compile(SessionState &s, GraphRecord &r, const char *api) {
  std::lock_guard<std::mutex> lk(r.compile_mu);
  set_last_compile_cache(0);
  if (r.compiled) return ge::SUCCESS;
  auto provider = graph_provider();
  if (!provider)
    return ge_fail(ge::FAILED, "%s: no compute provider is registered with the host NPU (import gert first)", api);
  // GE's compile cache: the lookup happens before any optimization, and the lock is held to the end of the save.
  ModelCache cache;
  if (ge::Status e = cache.init(context_option(s, r, ge::OPTION_GRAPH_COMPILER_CACHE_DIR),
                                context_option(s, r, ge::OPTION_GRAPH_KEY), api))
    return e;
  if (cache.enabled()) {
    std::string path;
    if (ge::Status e = cache.lookup(path, api)) return e;
    if (!path.empty()) {
      if (ge::Status e = load_cached(s, r, *provider, path, api)) return e;
      r.provider = provider;
      set_last_compile_cache(1);
      return ge::SUCCESS;
    }
  }
  std::vector<const char *> in_names, out_names;
  std::vector<gertHostTensorRef> ins(r.inputs.size()), outs(r.graph->outputs.size());
  bool inputs_fixed = true;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    in_names.push_back(r.inputs[i].name.c_str());
    fill_ref(ins[i], nullptr, 0, r.inputs[i].dtype, r.inputs[i].dims);
    for (int64_t d : r.inputs[i].dims) inputs_fixed = inputs_fixed && d >= 0;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    out_names.push_back(r.graph->outputs[i].name.c_str());
    fill_ref(outs[i], nullptr, 0, r.graph->outputs[i].dtype, r.graph->outputs[i].dims);
  }
  char err[2048] = {0};
  void *exe = nullptr;
  int32_t unknown_shape = 0;
  // The model's bytes, held by this compile to its end (a model file's are read again: ModelBytes)
  ge::Status read_st = ge::SUCCESS;
  auto model = r.graph->model->bytes(api, &read_st);
  if (!model) return read_st;
  CompilingScope compiling(s, r);  // the provider may read the compile's options (gertHostCompileOption)
  int rc = provider->compile(provider->ctx, s.id, model->data(), model->size(),
                             static_cast<int32_t>(ins.size()), in_names.data(), ins.data(),
                             static_cast<int32_t>(outs.size()), out_names.data(), outs.data(), &unknown_shape, &exe,
                             err, sizeof err);
  if (rc != 0) return ge_fail(ge::FAILED, "%s: graph %u (%s) failed to compile: %s", api, r.id, r.graph->name.c_str(), err);
  r.exe = exe;
  r.provider = provider;
  r.outputs = r.graph->outputs;
  bool outputs_known = true;
  for (size_t i = 0; i < outs.size(); ++i) {
    r.outputs[i].dtype = static_cast<ge::DataType>(outs[i].dtype);
    r.outputs[i].dims = ref_dims(outs[i]);
    for (int64_t d : r.outputs[i].dims) outputs_known = outputs_known && d >= 0;
  }
  r.is_static = inputs_fixed && r.gears.empty() && outputs_known && !unknown_shape;
  r.const_memory = r.graph->model->size();
  if (cache.enabled()) {
    if (ge::Status e = save_cached(cache, r, *provider, api)) {
      provider->release(exe);
      r.exe = nullptr;
      return e;
    }
    set_last_compile_cache(2);
  }
  r.compiled = true;
  return ge::SUCCESS;
}

// ExecuteGraphWithStreamAsync's checks of a launch's tensors against graph `r`: inputs (dtype, shape, gears, device
// memory large enough) and outputs (static graphs: allocated by the caller, large enough; device memory). Fills the
// provider's refs and the allocations the run holds.
ge::Status check_launch(GraphRecord &r, uint32_t graph_id, const std::vector<gert::Tensor> &inputs,
                        std::vector<gert::Tensor> &outputs, const char *api, std::vector<gertHostTensorRef> &run_in,
                        std::vector<gertHostTensorRef> &run_out, std::vector<AllocationPtr> &held) {
  run_in.resize(inputs.size());
  // Validate inputs: dtype, shape, device memory large enough.
  std::vector<std::vector<int64_t>> in_dims;
  in_dims.reserve(inputs.size());
  held.reserve(inputs.size() + outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const gert::Tensor &t = inputs[i];
    const IOSpec &spec = r.inputs[i];
    if (t.GetDataType() != spec.dtype)
      return ge_fail(ACL_ERROR_GE_DATATYPE_INVALID, "%s: graph %u input %zu '%s' has dtype %s, the graph takes %s", api,
                     graph_id, i, spec.name.c_str(), dtype_name(t.GetDataType()), dtype_name(spec.dtype));
    auto dims = shape_dims(t.GetStorageShape());
    if (ge::Status e = check_input_shape(r, i, dims, api)) return e;
    int64_t need = 0;
    if (!tensor_bytes(dims, spec.dtype, need))
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u input %zu '%s': shape %s holds more bytes than int64 "
                     "counts", api, graph_id, i, spec.name.c_str(), dims_str(dims).c_str());
    const void *addr = t.GetAddr();
    if (!gert::TensorPlacementUtils::IsOnDevice(t.GetPlacement()))
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u input %zu '%s' is placed on the host; inputs must be "
                     "device memory (copy them with aclrtMemcpy first)", api, graph_id, i, spec.name.c_str());
    AllocationPtr a;
    if (need > 0) {
      std::lock_guard<std::mutex> lk(rt().mem_mu);
      a = find_allocation(addr, static_cast<size_t>(need), false);
    }
    if (need > 0 && !a)
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u input %zu '%s' at %p is not %lld bytes of device memory "
                     "(a host pointer, freed memory, or a buffer too small for shape %s)", api, graph_id, i,
                     spec.name.c_str(), addr, static_cast<long long>(need), dims_str(dims).c_str());
    if (t.GetSize() < static_cast<size_t>(need < 0 ? 0 : need))
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u input %zu '%s' holds %zu bytes, shape %s needs %lld", api,
                     graph_id, i, spec.name.c_str(), t.GetSize(), dims_str(dims).c_str(), static_cast<long long>(need));
    fill_ref(run_in[i], const_cast<void *>(addr), static_cast<uint64_t>(need < 0 ? 0 : need), spec.dtype, dims);
    held.push_back(std::move(a));
    in_dims.push_back(std::move(dims));
  }
  if (ge::Status e = check_gears(r, in_dims, api)) return e;
  // Outputs: static graphs need them allocated by the caller; dynamic graphs may leave them to GE.
  const bool allocate_outputs = outputs.empty();
  if (allocate_outputs && r.is_static)
    return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u is static: allocate its %zu output(s) and pass them (GE "
                   "allocates outputs only for dynamic graphs)", api, graph_id, r.outputs.size());
  run_out.resize(r.outputs.size());
  if (allocate_outputs) {  // GE allocates them: the provider still needs each output's dtype (and the dims known)
    for (size_t i = 0; i < r.outputs.size(); ++i)
      fill_ref(run_out[i], nullptr, 0, r.outputs[i].dtype, r.outputs[i].dims);
  } else {
    if (outputs.size() != r.outputs.size())
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u has %zu output(s), got %zu", api, graph_id,
                     r.outputs.size(), outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      gert::Tensor &t = outputs[i];
      const IOSpec &spec = r.outputs[i];
      if (t.GetDataType() != spec.dtype)
        return ge_fail(ACL_ERROR_GE_DATATYPE_INVALID, "%s: graph %u output %zu '%s' has dtype %s, the graph produces %s",
                       api, graph_id, i, spec.name.c_str(), dtype_name(t.GetDataType()), dtype_name(spec.dtype));
      void *addr = t.GetAddr();
      size_t have = t.GetSize();
      if (r.is_static) {
        int64_t need = 0;
        if (!tensor_bytes(spec.dims, spec.dtype, need) || need < 0)
          return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u output %zu '%s': shape %s holds more bytes than "
                         "int64 counts", api, graph_id, i, spec.name.c_str(), dims_str(spec.dims).c_str());
        if (have < static_cast<size_t>(need))
          return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u output %zu '%s' holds %zu bytes, its shape %s needs %lld",
                         api, graph_id, i, spec.name.c_str(), have, dims_str(spec.dims).c_str(),
                         static_cast<long long>(need));
      }
      AllocationPtr a;
      if (have > 0) {
        std::lock_guard<std::mutex> lk(rt().mem_mu);
        a = find_allocation(addr, have, false);
      }
      if (have > 0 && !a)
        return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u output %zu '%s' at %p is not %zu bytes of device memory",
                       api, graph_id, i, spec.name.c_str(), addr, have);
      // Unknown-shape graphs: GE computes each output's shape (the caller's is overwritten) and copies into the
      // caller's buffer, failing if it is too small (rt2 TensorToOut).
      fill_ref(run_out[i], addr, have, spec.dtype, spec.dims);
      held.push_back(a);
    }
  }
  return ge::SUCCESS;
}

}  // namespace

std::shared_ptr<const gertHostGraphProvider> graph_provider() {
  std::lock_guard<std::mutex> lk(g_provider_mu);
  return g_provider;
}

}  // namespace hostnpu

using namespace hostnpu;

extern "C" const char *gertHostCompileOption(const char *key) try {
  if (!key || !tls_compiling_session || !tls_compiling_graph) return nullptr;
  if (std::strcmp(key, kModelDirOption) == 0) {  // where the graph's model file was: its external data's directory
    tls_compile_option = tls_compiling_graph->graph ? tls_compiling_graph->graph->model_dir : std::string();
    return tls_compile_option.c_str();
  }
  if (std::strcmp(key, kModelFileOption) == 0) {  // where the provider reads the graph's model again ("": it holds it)
    auto &g = tls_compiling_graph->graph;
    tls_compile_option = g && g->model ? g->model->reopen_path() : std::string();
    return tls_compile_option.c_str();
  }
  tls_compile_option = context_option(*tls_compiling_session, *tls_compiling_graph, key);
  return tls_compile_option.c_str();
} HOSTNPU_PASS_UNWIND catch (...) {  // out of memory copying the option: as if it were not set
  return nullptr;
}

extern "C" uint64_t gertHostModelBytesHeld(void) { return model_bytes_held(); }

extern "C" void gertHostSetGraphProvider(const gertHostGraphProvider *provider) try {
  std::lock_guard<std::mutex> lk(g_provider_mu);
  g_provider = provider ? std::make_shared<gertHostGraphProvider>(*provider) : nullptr;
} HOSTNPU_PASS_UNWIND catch (...) {  // out of memory: the previous provider stays registered
}

namespace ge {

Status GEInitialize(const std::map<AscendString, AscendString> &options) try {
  auto opts = to_std(options);
  uint32_t cube = 0, vector = 0;
  if (Status st = check_options(opts, "GEInitialize", "global", &cube, &vector)) return st;
  auto &g = ge_state();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.initialized) return SUCCESS;  // as GE: a repeated GEInitialize is accepted
  g.initialized = true;
  g.options = opts;
  g.aicore_cube = cube;
  g.aicore_vector = vector;
  return SUCCESS;
} HOSTNPU_GE_GUARD

// The deprecated std::string overloads forward to the AscendString ones.
static std::map<AscendString, AscendString> to_ascend(const std::map<std::string, std::string> &options) {
  std::map<AscendString, AscendString> o;
  for (auto &kv : options) o[AscendString(kv.first.c_str())] = AscendString(kv.second.c_str());
  return o;
}

Status GEInitialize(const std::map<std::string, std::string> &options) { return GEInitialize(to_ascend(options)); }

Status GEFinalize() try {
  auto &g = ge_state();
  std::unordered_map<uint64_t, hostnpu::SessionPtr> sessions;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.initialized) return SUCCESS;
    g.initialized = false;
    sessions.swap(g.sessions);
  }
  sessions.clear();  // graphs are released (in-flight runs keep theirs alive until they ran)
  return SUCCESS;
} HOSTNPU_GE_GUARD

AscendString GEGetErrorMsgV2() { return AscendString(ge_error_text().c_str()); }
AscendString GEGetWarningMsgV2() { return AscendString(ge_warning_text().c_str()); }

Session::Session(const std::map<AscendString, AscendString> &options) {
  try {  // a failure leaves the session invalid (sessionId_ 0: its calls fail), as a failed option check does
    auto opts = to_std(options);
    auto s = std::make_shared<hostnpu::SessionState>();
    if (check_options(opts, "Session", "session", &s->aicore_cube, &s->aicore_vector) != SUCCESS) return;
    for (const char *k : {"ge.session_device_id", "ge.exec.deviceId"}) {
      auto it = opts.find(k);
      int64_t v;
      if (it != opts.end() && parse_i64(it->second, v)) s->device = static_cast<int32_t>(v);
    }
    s->options = opts;
    auto &g = ge_state();
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.initialized) {
      ge_fail(ACL_ERROR_GE_EXEC_NOT_INIT, "Session: GEInitialize has not been called");
      return;
    }
    if (!s->aicore_cube) s->aicore_cube = g.aicore_cube;
    if (!s->aicore_vector) s->aicore_vector = g.aicore_vector;
    s->id = g.next_session++;
    g.sessions[s->id] = s;
    sessionId_ = s->id;
  } HOSTNPU_PASS_UNWIND catch (...) {
    ge_internal_failure("Session");
  }
}

Session::Session(const std::map<std::string, std::string> &options) : Session(to_ascend(options)) {}

Session::~Session() {
  auto &g = ge_state();
  hostnpu::SessionPtr s;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    auto it = g.sessions.find(sessionId_);
    if (it == g.sessions.end()) return;
    s = std::move(it->second);
    g.sessions.erase(it);
  }
}

uint64_t Session::GetSessionId() const { return sessionId_; }

Status Session::AddGraph(uint32_t graph_id, const Graph &graph) try {
  return AddGraph(graph_id, graph, std::map<AscendString, AscendString>());
} HOSTNPU_GE_GUARD

Status Session::AddGraph(uint32_t graph_id, const Graph &graph, const std::map<std::string, std::string> &options) try {
  return AddGraph(graph_id, graph, to_ascend(options));
} HOSTNPU_GE_GUARD

Status Session::AddGraph(uint32_t graph_id, const Graph &graph, const std::map<AscendString, AscendString> &options) try {
  Status st = SUCCESS;
  auto s = find_session(sessionId_, "AddGraph", &st);
  if (!s) return st;
  const GraphImplPtr &impl = GraphUtilsEx::Impl(graph);
  if (!impl || !impl->model)
    return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "AddGraph: graph %u is empty (parse a model into it first)", graph_id);
  auto r = std::make_shared<GraphRecord>();
  r->id = graph_id;
  r->graph = impl;
  r->inputs = impl->inputs;
  r->options = to_std(options);
  if (Status e = check_options(r->options, "AddGraph", "graph", nullptr, nullptr)) return e;
  if (Status e = apply_graph_options(*r, "AddGraph")) return e;
  std::lock_guard<std::mutex> lk(s->mu);
  if (s->graphs.count(graph_id))
    return ge_fail(ge::FAILED, "AddGraph: graph id %u is already in this session; remove it first", graph_id);
  s->graphs[graph_id] = r;
  return SUCCESS;
} HOSTNPU_GE_GUARD

Status Session::AddGraphWithCopy(uint32_t graph_id, const Graph &graph) { return AddGraph(graph_id, graph); }
Status Session::AddGraphWithCopy(uint32_t graph_id, const Graph &graph,
                                 const std::map<AscendString, AscendString> &options) try {
  return AddGraph(graph_id, graph, options);  // parsed graphs are immutable: sharing is a copy
} HOSTNPU_GE_GUARD

Status Session::RemoveGraph(uint32_t graph_id) try {
  Status st = SUCCESS;
  auto s = find_session(sessionId_, "RemoveGraph", &st);
  if (!s) return st;
  std::lock_guard<std::mutex> launch(s->launch_mu);
  std::lock_guard<std::mutex> lk(s->mu);
  auto it = s->graphs.find(graph_id);
  if (it == s->graphs.end()) return ge_fail(ge::FAILED, "RemoveGraph: graph %u is not in this session", graph_id);
  int pending = it->second->in_flight.load();
  if (pending > 0)
    return ge_fail(ge::FAILED,
                   "RemoveGraph: graph %u has %d run(s) in flight on its stream; synchronize the stream first",
                   graph_id, pending);
  s->graphs.erase(it);
  return SUCCESS;
} HOSTNPU_GE_GUARD

Status Session::CompileGraph(uint32_t graph_id) try {
  Status st = SUCCESS;
  auto s = find_session(sessionId_, "CompileGraph", &st);
  if (!s) return st;
  auto r = find_graph(*s, graph_id, "CompileGraph", &st);
  if (!r) return st;
  return compile(*s, *r, "CompileGraph");  // other graphs of the Session keep launching meanwhile, as in GE
} HOSTNPU_GE_GUARD

CompiledGraphSummaryPtr Session::GetCompiledGraphSummary(uint32_t graph_id) try {
  Status st = SUCCESS;
  auto s = find_session(sessionId_, "GetCompiledGraphSummary", &st);
  if (!s) return nullptr;
  auto r = find_graph(*s, graph_id, "GetCompiledGraphSummary", &st);
  if (!r) return nullptr;
  std::lock_guard<std::mutex> lk(r->compile_mu);
  if (!r->compiled) {
    ge_fail(ge::FAILED, "GetCompiledGraphSummary: graph %u is not compiled; call CompileGraph first", graph_id);
    return nullptr;
  }
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DataType> dtypes;
  size_t io_bytes = 0;
  for (auto &o : r->outputs) {
    shapes.push_back(o.dims);
    dtypes.push_back(o.dtype);
    int64_t n = Shape(o.dims).GetShapeSize();
    if (n > 0) io_bytes += static_cast<size_t>(GetSizeInBytes(n, o.dtype));
  }
  // The host NPU keeps weights inside the provider: the const memory is the model's size.
  return make_summary(r->is_static, r->const_memory, r->is_static ? io_bytes : 0, shapes, dtypes);
} HOSTNPU_PASS_UNWIND catch (...) {
  ge_internal_failure("GetCompiledGraphSummary");
  return nullptr;
}

Status Session::LoadGraph(const uint32_t graph_id, const std::map<AscendString, AscendString> &options,
                          void *stream) const try {
  Status st = SUCCESS;
  auto s = find_session(sessionId_, "LoadGraph", &st);
  if (!s) return st;
  auto r = find_graph(*s, graph_id, "LoadGraph", &st);
  if (!r) return st;
  std::lock_guard<std::mutex> lk(r->compile_mu);  // not the launch lock: loading one graph holds up no other's runs
  if (!r->compiled)
    return ge_fail(ge::FAILED, "LoadGraph: graph %u is not compiled; call CompileGraph first", graph_id);
  StreamPtr sp = find_stream(stream);
  if (!sp) return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "LoadGraph: stream %p is not a live stream", stream);
  auto opts = to_std(options);
  if (Status e = check_options(opts, "LoadGraph", "load", nullptr, nullptr)) return e;
  if (r->loaded_stream)
    return ge_fail(ge::FAILED, "LoadGraph: graph %u is already loaded; a graph loads once (add it again under another id "
                   "to run it on another stream)", graph_id);
  Device *d = find_device(sp->device());
  uint32_t threads = s->aicore_cube ? s->aicore_cube : effective_limit(*d, sp.get(), ACL_RT_DEV_RES_CUBE_CORE);
  auto weights = charge_weights(*d, r->graph->model, r->const_memory, graph_id, &st);
  if (!weights) return st;
  if (r->provider->prepare) {
    // What its runs get (ComputeShare): the whole limit alone on the device, a share beside one other run.
    uint32_t shared = std::max<uint32_t>(1, std::min(threads, d->cube_cores / 2));
    const std::pair<uint32_t, int32_t> shares[] = {{threads, 1}, {shared, 0}};
    for (const auto &[t, alone] : shares) {
      char err[2048] = {0};
      if (r->provider->prepare(r->exe, static_cast<int32_t>(t), alone, err, sizeof err) != 0)
        return ge_fail(ACL_ERROR_GE_LOAD_MODEL, "LoadGraph: graph %u: %s", graph_id, err);
    }
  }
  r->weights = std::move(weights);
  r->loaded_stream = sp->id();
  return SUCCESS;
} HOSTNPU_GE_GUARD

Status Session::ExecuteGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<gert::Tensor> &inputs,
                                            std::vector<gert::Tensor> &outputs) try {
  const char *api = "ExecuteGraphWithStreamAsync";
  Status st = SUCCESS;
  auto s = find_session(sessionId_, api, &st);
  if (!s) return st;
  auto r = find_graph(*s, graph_id, api, &st);
  if (!r) return st;
  if (!r->loaded_stream)
    return ge_fail(ge::FAILED, "%s: graph %u is not loaded; call CompileGraph and LoadGraph(%u, options, stream) first",
                   api, graph_id, graph_id);
  StreamPtr sp = find_stream(stream);
  if (!sp) return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: stream %p is not a live stream", api, stream);
  if (inputs.size() != r->inputs.size()) {
    std::string names;
    for (auto &i : r->inputs) names += (names.empty() ? "" : ", ") + i.name;
    return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u takes %zu input(s) (%s), got %zu", api, graph_id,
                   r->inputs.size(), names.c_str(), inputs.size());
  }
  struct Done {  // the run's tensors and its end, shared by the caller and the task (one allocation)
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    ge::Status status = SUCCESS;
    std::string msg;
    DeviceAllocCtx alloc;
    std::vector<gertHostTensorRef> in, out;  // what the provider runs on
  };
  auto done = std::make_shared<Done>();
  std::vector<gertHostTensorRef> &run_in = done->in;
  std::vector<gertHostTensorRef> &run_out = done->out;
  std::vector<AllocationPtr> held;
  const bool allocate_outputs = outputs.empty();
  // The checks, unless the last launch's tensors passed them and nothing they found changed since (CheckedLaunch).
  const uint64_t frees = rt().device_frees.load(std::memory_order_acquire);
  if (!r->checked.take(inputs, outputs, frees, run_in, run_out, held)) {
    held.clear();
    if (Status e = check_launch(*r, graph_id, inputs, outputs, api, run_in, run_out, held)) return e;
    r->checked.keep(inputs, outputs, frees, run_in, run_out, held);
  }

  // Enqueue. Launches through one Session are serialized, as in GE; the lock is released once the run is queued,
  // before a dynamic run's wait: a host function queued before it (it runs first) may need the lock (RemoveGraph).
  std::unique_lock<std::mutex> launch(s->launch_mu);
  Device *d = find_device(sp->device());
  if (s->aicore_cube) {  // as GE's rt2 executor: the session's core numbers become the stream's limits
    sp->limit[ACL_RT_DEV_RES_CUBE_CORE] = std::min(s->aicore_cube, d->cube_cores);
    if (s->aicore_vector) sp->limit[ACL_RT_DEV_RES_VECTOR_CORE] = std::min(s->aicore_vector, d->vector_cores);
  }
  done->alloc.device = sp->device();
  // An unknown-shape graph's output shapes are known once it ran: the call waits for the run (GE syncs the stream
  // for DEPEND_COMPUTE operators) and writes them into the output tensors.
  const bool wait = !r->is_static;
  r->in_flight.fetch_add(1);
  Stream *raw_stream = sp.get();
  // (held: moved in, released with the task once it ran, as a device releases a kernel's arguments)
  Task task{[r, held = std::move(held), done, wait, raw_stream, d](std::string &msg) -> aclError {
    ComputeShare share(*d, effective_limit(*d, raw_stream, ACL_RT_DEV_RES_CUBE_CORE));  // (reads the clock: t0)
    char err[2048];  // a provider that fails writes its message, NUL-terminated (no 2 KB zero fill per run)
    err[0] = 0;
    int rc = r->provider->run(r->exe, static_cast<int32_t>(share.threads()), share.alone() ? 1 : 0,
                              static_cast<int32_t>(done->in.size()),
                              done->in.data(), static_cast<int32_t>(done->out.size()), done->out.data(),
                              device_alloc_cb, &done->alloc, err, sizeof err);
    err[sizeof err - 1] = 0;  // (a message that fills the buffer is cut, never read past it)
    r->last_run_ns.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
                .count() - share.start_ns(),
        std::memory_order_relaxed);
    r->in_flight.fetch_sub(1);
    aclError result = ACL_SUCCESS;
    if (rc == 0) release_unused(done->alloc, done->out);
    if (rc != 0) {
      msg = "graph " + std::to_string(r->id) + " (" + r->graph->name + ") failed: " + err;
      if (!done->alloc.error.empty()) msg += " (" + done->alloc.error + ")";
      for (void *p : done->alloc.allocated) aclrtFree(p);
      done->alloc.allocated.clear();
      result = ACL_ERROR_RT_AICORE_EXCEPTION;
    }
    if (wait) {  // the caller waits for this run: report to it, not to the stream
      std::lock_guard<std::mutex> lk(done->mu);
      done->done = true;
      done->status = rc == 0 ? SUCCESS : FAILED;
      done->msg = msg;
      done->cv.notify_all();
      return ACL_SUCCESS;
    }
    return result;
  }};
  // The task does not run (an injected fault, or an abort dropped it): as a failed run.
  task.drop = [r, done, wait](aclError code, const std::string &msg) -> aclError {
    r->in_flight.fetch_sub(1);
    if (!wait) return code;
    std::lock_guard<std::mutex> lk(done->mu);
    done->done = true;
    done->status = static_cast<ge::Status>(code);
    done->msg = msg;
    done->cv.notify_all();
    return ACL_SUCCESS;
  };
  task.fault = draw_fault(FaultSite::Kernel, sp->device());
  // Inline launch: on an idle stream the run goes ahead on this thread, before the launch returns, instead of being
  // handed to the stream's worker thread. The stream's order holds (nothing is queued before it; work other threads
  // queue meanwhile waits behind it, stream.cpp Stream::enqueue), and so do its faults (reported by the next
  // synchronize, as from the worker). A device runs a kernel whatever the host thread does; on the host NPU a worker
  // would only start it once this thread gave up the GIL the compute provider needs (gert/hostnpu/ort_provider.py),
  // so the caller would wait for the run anyway, plus two thread hand-offs. An injected hang still runs on the worker
  // (the launch returns, a synchronize can time out). The session's launch lock is not held during the run.
  // Only a short run goes inline (its last run took at most kInlineMaxNs, or it has not run yet), or one the caller
  // waits for anyway (an unknown-shape graph): a longer one is launched on the worker as on a device, so that one
  // thread launching on two streams gets them to overlap, and a synchronize with a timeout can time out.
  struct InlineClaim {  // ends the stream's inline mode however the launch leaves
    Stream *s = nullptr;
    ~InlineClaim() {
      if (s) s->end_inline();
    }
  } claim;
  const int64_t last_ns = r->last_run_ns.load(std::memory_order_relaxed);
  const bool short_run = wait || last_ns <= kInlineMaxNs;  // -1: not run yet
  if (task.fault.hang_ms == 0 && short_run && inline_launches() && sp->begin_inline_if_idle()) {
    claim.s = sp.get();
    launch.unlock();
  }
  aclError launched = sp->launch(std::move(task), api);
  if (claim.s) {
    claim.s = nullptr;
    sp->end_inline();
  }
  if (launched != ACL_SUCCESS) {
    r->in_flight.fetch_sub(1);
    return ge_fail(static_cast<ge::Status>(launched), "%s", aclGetRecentErrMsg());
  }
  if (launch.owns_lock()) launch.unlock();
  if (!wait) return SUCCESS;

  // Unknown-shape graph: the output shapes are known once the run finished.
  {
    std::unique_lock<std::mutex> lk(done->mu);
    done->cv.wait(lk, [&] { return done->done; });
  }
  if (done->status != SUCCESS)  // FAILED for a failed run; a runtime code (a device fault, an abort) passes through
    return ge_fail(done->status, "%s: %s", api, done->msg.c_str());
  if (!allocate_outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      const gertHostTensorRef &ref = run_out[i];
      gert::Shape shape;
      for (int32_t k = 0; k < ref.ndim; ++k) shape.AppendDim(ref.dims[k]);
      outputs[i].MutableStorageShape() = shape;
      outputs[i].MutableOriginShape() = shape;
    }
    return SUCCESS;
  }
  outputs.clear();
  outputs.reserve(run_out.size());
  for (auto &ref : run_out) {
    gert::StorageShape shape;
    for (int32_t k = 0; k < ref.ndim; ++k) {
      shape.MutableStorageShape().AppendDim(ref.dims[k]);
      shape.MutableOriginShape().AppendDim(ref.dims[k]);
    }
    gert::Tensor t(shape, gert::StorageFormat(FORMAT_ND, FORMAT_ND, gert::ExpandDimsType()), gert::kOnDeviceHbm,
                   static_cast<DataType>(ref.dtype), nullptr);
    t.SetData(gert::TensorData(ref.data, free_device_tensor, static_cast<size_t>(ref.nbytes), gert::kOnDeviceHbm));
    outputs.emplace_back(std::move(t));
  }
  return SUCCESS;
} HOSTNPU_GE_GUARD

namespace {
// The session and graph of a call that compiles on first use (RunGraph, RunGraphWithStreamAsync), compiled under the
// Session's launch lock as GE's PreRun is.
Status find_compiled(uint64_t session_id, uint32_t graph_id, const char *api, SessionPtr *s, GraphRecordPtr *r) {
  Status st = SUCCESS;
  *s = find_session(session_id, api, &st);
  if (!*s) return st;
  *r = find_graph(**s, graph_id, api, &st);
  if (!*r) return st;
  std::lock_guard<std::mutex> launch((*s)->launch_mu);
  return compile(**s, **r, api);
}
}  // namespace

// GE: "used to compile, load, and run graphs": compiles and loads (on this stream) on first use, then runs as
// ExecuteGraphWithStreamAsync does, with ge::Tensor handles over device memory. Outputs left empty on a dynamic graph
// are allocated by GE; each returned ge::Tensor owns its memory (freed when the last handle goes).
Status Session::RunGraphWithStreamAsync(uint32_t graph_id, void *stream, const std::vector<Tensor> &inputs,
                                        std::vector<Tensor> &outputs) try {
  const char *api = "RunGraphWithStreamAsync";
  SessionPtr s;
  GraphRecordPtr r;
  if (Status st = find_compiled(sessionId_, graph_id, api, &s, &r)) return st;
  Status st = SUCCESS;
  if (!r->loaded_stream) {
    if (Status e = LoadGraph(graph_id, {}, stream)) return e;
  }
  auto to_gert = [](const Tensor &t) {
    TensorDesc desc = t.GetTensorDesc();
    gert::StorageShape shape;
    for (int64_t d : desc.GetShape().GetDims()) {
      shape.MutableStorageShape().AppendDim(d);
      shape.MutableOriginShape().AppendDim(d);
    }
    gert::Tensor g(shape, gert::StorageFormat(FORMAT_ND, FORMAT_ND, gert::ExpandDimsType()), gert::kOnDeviceHbm,
                   desc.GetDataType(), nullptr);
    g.SetData(gert::TensorData(const_cast<uint8_t *>(t.GetData()), nullptr, t.GetSize(), gert::kOnDeviceHbm));
    return g;
  };
  std::vector<gert::Tensor> gin, gout;
  for (auto &t : inputs) gin.push_back(to_gert(t));
  for (auto &t : outputs) gout.push_back(to_gert(t));
  bool allocated_by_ge = outputs.empty();
  st = ExecuteGraphWithStreamAsync(graph_id, stream, gin, gout);
  if (st != SUCCESS) {  // the same checks and messages, under this API's name
    std::string msg = ge_error_text();
    const std::string other = "ExecuteGraphWithStreamAsync";
    if (msg.compare(0, other.size(), other) == 0) msg = api + msg.substr(other.size());
    return ge_fail(st, "%s", msg.c_str());
  }
  if (!allocated_by_ge) return SUCCESS;
  outputs.clear();
  for (auto &g : gout) {
    std::vector<int64_t> dims = shape_dims(g.GetStorageShape());
    TensorDesc desc(Shape(dims), FORMAT_ND, g.GetDataType());
    desc.SetPlacement(kPlacementDevice);
    Tensor t(desc);
    auto *data = static_cast<uint8_t *>(g.GetAddr());
    size_t size = g.GetSize();
    auto keep = std::make_shared<gert::Tensor>(std::move(g));  // owns GE's memory until the ge::Tensor lets go
    t.SetData(data, size, [keep](uint8_t *) mutable { keep.reset(); });
    outputs.push_back(t);
  }
  return SUCCESS;
} HOSTNPU_GE_GUARD

Status Session::RunGraph(uint32_t graph_id, const std::vector<Tensor> &inputs, std::vector<Tensor> &outputs) try {
  const char *api = "RunGraph";
  SessionPtr s;
  GraphRecordPtr r;
  if (Status st = find_compiled(sessionId_, graph_id, api, &s, &r)) return st;  // compiles on first use, as GE
  if (inputs.size() != r->inputs.size())
    return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u takes %zu input(s), got %zu", api, graph_id,
                   r->inputs.size(), inputs.size());
  std::vector<gertHostTensorRef> ins(inputs.size()), outs(r->outputs.size());
  std::vector<std::vector<int64_t>> in_dims;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorDesc desc = inputs[i].GetTensorDesc();
    const IOSpec &spec = r->inputs[i];
    if (desc.GetDataType() != spec.dtype)
      return ge_fail(ACL_ERROR_GE_DATATYPE_INVALID, "%s: graph %u input %zu '%s' has dtype %s, the graph takes %s", api,
                     graph_id, i, spec.name.c_str(), dtype_name(desc.GetDataType()), dtype_name(spec.dtype));
    auto dims = desc.GetShape().GetDims();
    if (Status e = check_input_shape(*r, i, dims, api)) return e;
    int64_t need = 0;
    if (!tensor_bytes(dims, spec.dtype, need) || need < 0)
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u input %zu '%s': shape %s holds more bytes than int64 "
                     "counts", api, graph_id, i, spec.name.c_str(), dims_str(dims).c_str());
    if (inputs[i].GetSize() < static_cast<size_t>(need))
      return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: graph %u input %zu '%s' holds %zu bytes, shape %s needs %lld", api,
                     graph_id, i, spec.name.c_str(), inputs[i].GetSize(), dims_str(dims).c_str(),
                     static_cast<long long>(need));
    fill_ref(ins[i], const_cast<uint8_t *>(inputs[i].GetData()), static_cast<uint64_t>(need), spec.dtype, dims);
    in_dims.push_back(dims);
  }
  if (Status e = check_gears(*r, in_dims, api)) return e;
  for (size_t i = 0; i < outs.size(); ++i) fill_ref(outs[i], nullptr, 0, r->outputs[i].dtype, r->outputs[i].dims);
  std::unique_lock<std::mutex> staging(r->staging_mu, std::defer_lock);
  if (r->is_static && staging.try_lock()) stage_run_graph(*r, ins, outs);
  HostAllocCtx alloc;
  uint32_t threads = s->aicore_cube ? s->aicore_cube : hw_cube_cores(s->device);
  Device *dev = find_device(s->device);
  std::optional<ComputeShare> share;
  if (dev) threads = share.emplace(*dev, threads).threads();
  int32_t alone = share && share->alone() ? 1 : 0;
  char err[2048] = {0};
  r->in_flight.fetch_add(1);
  int rc = r->provider->run(r->exe, static_cast<int32_t>(threads), alone, static_cast<int32_t>(ins.size()), ins.data(),
                            static_cast<int32_t>(outs.size()), outs.data(), host_alloc_cb, &alloc, err, sizeof err);
  r->in_flight.fetch_sub(1);
  if (rc != 0) return ge_fail(FAILED, "%s: graph %u (%s) failed: %s", api, graph_id, r->graph->name.c_str(), err);
  outputs.clear();
  for (size_t i = 0; i < outs.size(); ++i) {
    TensorDesc desc(Shape(ref_dims(outs[i])), FORMAT_ND, static_cast<DataType>(outs[i].dtype));
    outputs.emplace_back(desc, static_cast<const uint8_t *>(outs[i].data), static_cast<size_t>(outs[i].nbytes));
  }
  return SUCCESS;
} HOSTNPU_GE_GUARD

}  // namespace ge

extern "C" {
ge::Status GeSessionLoadGraph(ge::Session &session, uint32_t graph_id,
                              const std::map<ge::AscendString, ge::AscendString> &options, void *stream) try {
  return session.LoadGraph(graph_id, options, stream);
} HOSTNPU_GE_GUARD
ge::Status GeSessionExecuteGraphWithStreamAsync(ge::Session &session, uint32_t graph_id, void *stream,
                                                const std::vector<gert::Tensor> &inputs,
                                                std::vector<gert::Tensor> &outputs) try {
  return session.ExecuteGraphWithStreamAsync(graph_id, stream, inputs, outputs);
} HOSTNPU_GE_GUARD
}
