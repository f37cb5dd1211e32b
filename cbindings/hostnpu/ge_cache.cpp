// Host NPU GE: the graph compile cache's files (see ge_cache.h).
#include "ge_cache.h"

#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <regex>

#include "gert_host/host_npu.h"

namespace hostnpu {

namespace {

thread_local int tls_last_outcome = 0;

constexpr char kMagic[8] = {'G', 'E', 'R', 'T', 'O', 'M', '0', '1'};

bool exists(const std::string &path) { return ::access(path.c_str(), F_OK) == 0; }

bool read_file(const std::string &path, std::string &out) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  struct stat st {};
  bool ok = ::fstat(::fileno(f), &st) == 0;
  if (ok) {
    out.resize(static_cast<size_t>(st.st_size));
    ok = std::fread(&out[0], 1, out.size(), f) == out.size();
  }
  std::fclose(f);
  return ok;
}

// Writes all of data to fd; false on an error (errno set).
bool write_all(int fd, const std::string &data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Flushes a directory's entries (a rename in it) to disk.
bool fsync_dir(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// An unpredictable suffix for a temporary file's name (as mkstemp's): getrandom, else the clock and the pid.
std::string random_suffix() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v))
    v = static_cast<uint64_t>(std::time(nullptr)) * 6364136223846793005ULL ^ reinterpret_cast<uintptr_t>(&v) ^
        static_cast<uint64_t>(::getpid()) << 32;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Creates a new file beside ``path`` as mkstemp does: O_CREAT | O_EXCL | O_NOFOLLOW under an unpredictable name
// ({path}.tmp{pid}.{random}: the pid lets remove_stale_temps tell a dead writer's file), never opening what someone
// else put there (a symlink, a hard link to another file). Returns the fd (tmp set) or -1 (errno set).
int create_temp(const std::string &path, mode_t mode, std::string &tmp) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp = path + ".tmp" + std::to_string(::getpid()) + "." + random_suffix();
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}

// Writes through a new temporary file (create_temp) and a rename, so a reader never sees half a file and no name
// another user can plant in a shared directory is ever opened for writing (GE writes in place; the lock already keeps
// GE's readers out, the rename also survives a crash mid-write). The data is fsync'ed before the rename and the
// directory after it: after a power loss the name refers to the whole file or is absent, never to a truncated one (an
// index naming a truncated .om would fail the key's every compile). rename() replaces a symlink at ``path``, never
// follows it.
bool write_file(const std::string &dir, const std::string &path, const std::string &data) {
  std::string tmp;
  int fd = create_temp(path, 0644, tmp);
  if (fd < 0) return false;
  bool ok = write_all(fd, data) && ::fsync(fd) == 0;
  int saved = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    return false;
  }
  return fsync_dir(dir);
}

// Opens (creating it if missing) the lock file ``path`` for flock: O_NOFOLLOW, so a planted symlink is never followed
// (ELOOP: removed, then tried again); a missing one is created as a new temporary file (create_temp) and linked into
// place, so that no one else's file is ever created or opened through the name. Returns the fd or -1 (errno set).
int open_lock(const std::string &path) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) return fd;
      ::close(fd);
      errno = EINVAL;  // a directory, a FIFO...: not a lock file
      return -1;
    }
    if (errno == ELOOP) {  // a symlink in its place: someone else's, removed (the directory is one gert checked)
      ::unlink(path.c_str());
      continue;
    }
    if (errno != ENOENT) return -1;
    std::string tmp;
    int tfd = create_temp(path, 0644, tmp);  // readable by a group sharing the cache (under the umask)
    if (tfd < 0) return -1;
    ::close(tfd);
    int rc = ::link(tmp.c_str(), path.c_str());  // never replaces an existing lock file (someone may hold it)
    int saved = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && saved != EEXIST) {
      errno = saved;
      return -1;
    }
  }
  errno = ELOOP;
  return -1;
}

// Removes the {key}*.tmp<pid>[.<random>] files of writers that died before their rename (the caller holds the key's
// lock, so no live writer of this key is mid-write; a temp file of a live process of another key is left alone).
void remove_stale_temps(const std::string &dir, const std::string &key) {
  DIR *d = ::opendir(dir.c_str());
  if (!d) return;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, key.size(), key) != 0) continue;
    size_t at = name.rfind(".tmp");
    if (at == std::string::npos || at + 4 >= name.size()) continue;
    std::string pid_text = name.substr(at + 4);
    size_t dot = pid_text.find('.');  // {pid}.{random} (create_temp)
    if (dot != std::string::npos) pid_text = pid_text.substr(0, dot);
    if (pid_text.empty()) continue;
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid <= 0 || pid == ::getpid()) continue;
    bool alive = ::kill(pid, 0) == 0 || errno == EPERM;
    if (alive) continue;  // a live writer's (of another key: this one's are held off by the lock)
    ::unlink((dir + name).c_str());
  }
  ::closedir(d);
}

// FNV-1a over 8-byte words (then the tail bytes): catches a truncated or overwritten file at memory speed.
uint64_t checksum(const std::string &s) {
  uint64_t h = 1469598103934665603ULL;
  size_t n = s.size() / 8;
  for (size_t k = 0; k < n; ++k) {
    uint64_t w;
    std::memcpy(&w, s.data() + 8 * k, 8);
    h = (h ^ w) * 1099511628211ULL;
  }
  for (size_t k = 8 * n; k < s.size(); ++k) h = (h ^ static_cast<unsigned char>(s[k])) * 1099511628211ULL;
  return h;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// ---- a small JSON reader for the index: objects, arrays, strings, and skipped scalars ----
struct Json {
  const std::string &s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  bool str(std::string &out) {
    ws();
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    out.clear();
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (c == '\\') {
        if (i >= s.size()) return false;
        char e = s[i++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'r': c = '\r'; break;
          case 'b': c = '\b'; break;
          case 'f': c = '\f'; break;
          case 'u': {  // four hex digits (JSON); anything else makes the index malformed, never an exception
            if (i + 4 > s.size()) return false;
            unsigned v = 0;
            for (size_t k = 0; k < 4; ++k) {
              int h = hex_value(s[i + k]);
              if (h < 0) return false;
              v = v * 16 + static_cast<unsigned>(h);
            }
            c = static_cast<char>(v & 0x7f);
            i += 4;
            break;
          }
          default: c = e;
        }
      }
      out.push_back(c);
    }
    return i < s.size() && s[i++] == '"';
  }
  bool skip() {  // any value
    ws();
    if (i >= s.size()) return false;
    std::string tmp;
    if (s[i] == '"') return str(tmp);
    if (s[i] == '{' || s[i] == '[') {
      char close = s[i] == '{' ? '}' : ']';
      bool obj = s[i] == '{';
      ++i;
      if (eat(close)) return true;
      do {
        if (obj && (!str(tmp) || !eat(':'))) return false;
        if (!skip()) return false;
      } while (eat(','));
      return eat(close);
    }
    size_t start = i;
    while (i < s.size() && (isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '+' || s[i] == '.'))
      ++i;
    return i > start;
  }
};

struct IdxEntry {
  std::string graph_key, cache_file_name;
};

// {"cache_file_list":[{"graph_key":..., "cache_file_name":..., ...}, ...]}; false if malformed.
bool parse_index(const std::string &text, std::vector<IdxEntry> &out) {
  Json j{text};
  if (!j.eat('{')) return false;
  bool found = false;
  if (j.eat('}')) return false;
  do {
    std::string name;
    if (!j.str(name) || !j.eat(':')) return false;
    if (name != "cache_file_list") {
      if (!j.skip()) return false;
      continue;
    }
    found = true;
    if (!j.eat('[')) return false;
    if (j.eat(']')) continue;
    do {
      if (!j.eat('{')) return false;
      IdxEntry e;
      bool has_key = false, has_file = false;
      if (!j.eat('}')) {
        do {
          std::string field, value;
          if (!j.str(field) || !j.eat(':')) return false;
          if (field == "graph_key" || field == "cache_file_name" || field == "var_desc_file_name") {
            if (!j.str(value)) return false;
            if (field == "graph_key") e.graph_key = value, has_key = true;
            if (field == "cache_file_name") e.cache_file_name = value, has_file = true;
          } else if (!j.skip()) {
            return false;
          }
        } while (j.eat(','));
        if (!j.eat('}')) return false;
      }
      if (!has_key || !has_file) return false;  // GE's from_json: both fields are required
      out.push_back(e);
    } while (j.eat(','));
    if (!j.eat(']')) return false;
  } while (j.eat(','));
  if (!j.eat('}')) return false;
  j.ws();
  return found && j.i == text.size();
}

std::string json_str(const std::string &s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    o.push_back(c);
  }
  return o + "\"";
}

// ---- the .om payload ----
struct Writer {
  std::string b;
  void u64(uint64_t v) { b.append(reinterpret_cast<const char *>(&v), sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void str(const std::string &s) {
    u64(s.size());
    b.append(s);
  }
  void dims(const std::vector<int64_t> &d) {
    u64(d.size());
    for (int64_t x : d) i64(x);
  }
  void specs(const std::vector<IOSpec> &v) {
    u64(v.size());
    for (auto &s : v) {
      str(s.name);
      i64(s.dtype);
      i64(s.onnx_type);
      dims(s.dims);
      u64(s.dim_names.size());
      for (auto &n : s.dim_names) str(n);
    }
  }
};

struct Reader {
  const std::string &b;
  size_t i = 0;
  bool ok = true;
  uint64_t u64() {
    uint64_t v = 0;
    if (i + sizeof v > b.size()) return ok = false, 0;
    std::memcpy(&v, b.data() + i, sizeof v);
    i += sizeof v;
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  uint64_t count(uint64_t limit) {
    uint64_t n = u64();
    if (n > limit) ok = false;
    return ok ? n : 0;
  }
  std::string str() {
    uint64_t n = u64();
    if (!ok || n > b.size() - i) return ok = false, std::string();
    std::string s = b.substr(i, n);
    i += n;
    return s;
  }
  std::vector<int64_t> dims() {
    std::vector<int64_t> d(count(GERT_HOST_MAX_DIMS));
    for (auto &x : d) x = i64();
    return d;
  }
  std::vector<IOSpec> specs() {
    std::vector<IOSpec> v(count(1u << 20));
    for (auto &s : v) {
      s.name = str();
      s.dtype = static_cast<ge::DataType>(i64());
      s.onnx_type = static_cast<int32_t>(i64());
      s.dims = dims();
      s.dim_names.resize(count(GERT_HOST_MAX_DIMS));
      for (auto &n : s.dim_names) n = str();
    }
    return v;
  }
};

std::string current_time_str() {  // GE's CurrentTimeInStr: local time, YYYYmmddHHMMSS
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d%H%M%S", &tm);
  return buf;
}

}  // namespace

void set_last_compile_cache(int outcome) { tls_last_outcome = outcome; }

ModelCache::~ModelCache() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

ge::Status ModelCache::init(const std::string &dir, const std::string &key, const char *api) {
  if (dir.empty() || key.empty()) return ge::SUCCESS;  // GE: the cache is silently off
  dir_ = dir.back() == '/' ? dir : dir + "/";
  key_ = key;
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: E13026: the path '%s' is invalid: The cache directory does not "
                   "exist (ge.graph_compiler_cache_dir; GE does not create it)", api, dir.c_str());
  static const std::regex kPattern(R"(^[A-Za-z0-9_\-]{1,128}$)");
  if (!std::regex_match(key, kPattern))
    return ge_fail(ACL_ERROR_GE_PARAM_INVALID, "%s: the graph_key '%s' can't be used as a file name: it must match "
                   "^[A-Za-z0-9_\\-]{1,128}$ (ge.graph_key)", api, key.c_str());
  std::string lock = dir_ + key_ + ".lock";
  int fd = open_lock(lock);
  if (fd < 0)
    return ge_fail(ge::FAILED, "%s: cannot open the cache lock file '%s': %s", api, lock.c_str(), strerror(errno));
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX);  // held until this object dies: the whole lookup, or compile + save
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    ::close(fd);
    return ge_fail(ge::FAILED, "%s: cannot lock the cache lock file '%s': %s", api, lock.c_str(), strerror(errno));
  }
  fd_ = fd;
  remove_stale_temps(dir_, key_);
  return ge::SUCCESS;
}

ge::Status ModelCache::lookup(std::string &path, const char *api) const {
  path.clear();
  std::string idx = dir_ + key_ + ".idx";
  if (!exists(idx)) {  // no index: an existing {key}.om is taken as it is
    std::string om = dir_ + key_ + ".om";
    if (exists(om)) path = om;
    return ge::SUCCESS;
  }
  std::string text;
  std::vector<IdxEntry> entries;
  if (!read_file(idx, text) || !parse_index(text, entries))
    return ge_fail(ge::FAILED, "%s: failed to read the cache index file '%s' (ge.graph_key '%s'): not a "
                   "{\"cache_file_list\": [...]} JSON file", api, idx.c_str(), key_.c_str());
  for (auto &e : entries) {
    if (e.graph_key != key_) continue;
    // A file name in the cache directory (GE writes only those): a path would resolve against the working directory
    // or escape the directory.
    if (e.cache_file_name.empty() || e.cache_file_name.find('/') != std::string::npos || e.cache_file_name == "." ||
        e.cache_file_name == "..")
      return ge_fail(ge::FAILED, "%s: cache index file '%s' lists cache_file_name '%s', which is not a file name in the "
                     "cache directory (ge.graph_key '%s')", api, idx.c_str(), e.cache_file_name.c_str(), key_.c_str());
    std::string file = dir_ + e.cache_file_name;
    if (!exists(file))
      return ge_fail(ge::FAILED, "%s: cache file '%s' in cache index file '%s' does not exist (ge.graph_key '%s')",
                     api, file.c_str(), idx.c_str(), key_.c_str());
    if (path.empty()) path = file;  // the first entry (graphs without Variables)
  }
  return ge::SUCCESS;
}

ge::Status ModelCache::read(const std::string &path, CachedModel &m, const char *api) {
  std::string data;
  if (!read_file(path, data))
    return ge_fail(ge::FAILED, "%s: failed to load the cached model '%s': cannot read it", api, path.c_str());
  const size_t head = sizeof kMagic + 16;
  uint64_t size = 0, sum = 0;
  if (data.size() >= head) {
    std::memcpy(&size, data.data() + sizeof kMagic, 8);
    std::memcpy(&sum, data.data() + sizeof kMagic + 8, 8);
  }
  std::string payload = data.size() >= head ? data.substr(head) : std::string();
  if (data.size() < head || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0 || size != payload.size() ||
      sum != checksum(payload))
    return ge_fail(ge::FAILED, "%s: failed to load the cached model '%s': it is not a complete host NPU model (bad "
                   "header, size or checksum)", api, path.c_str());
  Reader r{payload};
  m.graph_name = r.str();
  m.const_memory = r.u64();
  m.graph_inputs = r.specs();
  m.graph_outputs = r.specs();
  m.inputs = r.specs();
  m.gears.resize(r.count(1000));
  for (auto &g : m.gears) g = r.dims();
  m.outputs = r.specs();
  m.is_static = r.u64() != 0;
  m.provider_blob = r.str();
  if (!r.ok || r.i != payload.size() || m.graph_outputs.size() != m.outputs.size() ||
      m.graph_inputs.size() != m.inputs.size())
    return ge_fail(ge::FAILED, "%s: failed to load the cached model '%s': its contents are malformed", api,
                   path.c_str());
  return ge::SUCCESS;
}

ge::Status ModelCache::save(const CachedModel &m, const char *api) const {
  Writer w;
  w.str(m.graph_name);
  w.u64(m.const_memory);
  w.specs(m.graph_inputs);
  w.specs(m.graph_outputs);
  w.specs(m.inputs);
  w.u64(m.gears.size());
  for (auto &g : m.gears) w.dims(g);
  w.specs(m.outputs);
  w.u64(m.is_static ? 1 : 0);
  w.str(m.provider_blob);
  std::string file(kMagic, sizeof kMagic);
  uint64_t size = w.b.size(), sum = checksum(w.b);
  file.append(reinterpret_cast<const char *>(&size), 8);
  file.append(reinterpret_cast<const char *>(&sum), 8);
  file += w.b;
  std::string name = key_ + "_" + current_time_str() + ".om";
  if (!write_file(dir_, dir_ + name, file))
    return ge_fail(ge::FAILED, "%s: failed to save the cached model '%s': %s", api, (dir_ + name).c_str(),
                   strerror(errno));
  // Append to the index (read again under the lock: another process may have added entries for other keys).
  std::string idx = dir_ + key_ + ".idx", text;
  std::vector<IdxEntry> entries;
  if (exists(idx) && (!read_file(idx, text) || !parse_index(text, entries)))
    return ge_fail(ge::FAILED, "%s: failed to read the cache index file '%s'", api, idx.c_str());
  entries.push_back({key_, name});
  std::string out = "{\n    \"cache_file_list\": [";
  for (size_t i = 0; i < entries.size(); ++i)
    out += std::string(i ? "," : "") + "\n        {\n            \"cache_file_name\": " +
           json_str(entries[i].cache_file_name) + ",\n            \"graph_key\": " + json_str(entries[i].graph_key) +
           "\n        }";
  out += "\n    ]\n}";
  if (!write_file(dir_, idx, out))
    return ge_fail(ge::FAILED, "%s: failed to write the cache index file '%s': %s", api, idx.c_str(), strerror(errno));
  return ge::SUCCESS;
}

}  // namespace hostnpu

extern "C" int gertHostLastCompileCache(void) { return hostnpu::tls_last_outcome; }
