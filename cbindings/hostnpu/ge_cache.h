// Host NPU GE: the graph compile cache (session option ge.graph_compiler_cache_dir + graph/session option
// ge.graph_key), with GE's own semantics (ModelCache, compiler/graph/build/model_cache.cc; ge-shapes-and-cache.md B):
// on only when both are non-empty; the key must match ^[A-Za-z0-9_-]{1,128}$ and the directory must exist
// (PARAM_INVALID, E13026); {key}.lock is held with flock(LOCK_EX) for the whole lookup or compile + save;
// {key}.idx is JSON {"cache_file_list":[{"graph_key","cache_file_name"}]}; the model is {key}_{YYYYmmddHHMMSS}.om.
// A hit takes the cached graph as it is (no graph, option or version comparison); a listed file that is missing or
// corrupt fails the compile.
#pragma once

#include <string>
#include <vector>

#include "ge_state.h"

namespace hostnpu {

// What a host NPU .om holds: the graph GE compiled (it replaces the user's graph on a hit), its compiled I/O and
// the compute provider's own serialized executable.
struct CachedModel {
  std::string graph_name;
  uint64_t const_memory = 0;               // the summary's const memory (the parsed model's size)
  std::vector<IOSpec> graph_inputs, graph_outputs;  // as parsed
  std::vector<IOSpec> inputs;              // after ge.inputShape
  std::vector<std::vector<int64_t>> gears;  // ge.dynamicDims
  std::vector<IOSpec> outputs;             // compiled dtypes and shapes
  bool is_static = false;
  std::string provider_blob;               // gertHostGraphProvider.save's bytes
};

class ModelCache {
 public:
  ModelCache() = default;
  ModelCache(const ModelCache &) = delete;
  ModelCache &operator=(const ModelCache &) = delete;
  ~ModelCache();  // releases the lock

  // Off (SUCCESS, enabled() false) unless both are non-empty; else checks the key and the directory and locks.
  ge::Status init(const std::string &dir, const std::string &key, const char *api);
  bool enabled() const { return fd_ >= 0; }
  const std::string &key() const { return key_; }
  // The cached model's path for the key, or "" (a miss). FAILED for an unreadable index or a listed missing file.
  ge::Status lookup(std::string &path, const char *api) const;
  // Reads and checks a .om; FAILED when it is not a complete host NPU model.
  static ge::Status read(const std::string &path, CachedModel &out, const char *api);
  // Writes {key}_{time}.om and appends it to {key}.idx.
  ge::Status save(const CachedModel &m, const char *api) const;

 private:
  std::string dir_, key_;
  int fd_ = -1;
};

// The calling thread's last CompileGraph outcome: 0 the cache was not used, 1 a hit, 2 a miss (compiled, saved).
void set_last_compile_cache(int outcome);

}  // namespace hostnpu
