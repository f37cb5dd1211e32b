// onnx_model_dump: prints what hostnpu::onnx::parse_model reads from ONNX model files, as JSON.
// A test and debugging driver for cbindings/hostnpu/onnx_model.cpp (not part of the extension).
//
//   g++ -std=c++17 -O1 -fsanitize=address,undefined -Icbindings/hostnpu
//       cbindings/hostnpu/tools/onnx_model_dump.cpp cbindings/hostnpu/onnx_model.cpp -o onnx_model_dump
//   onnx_model_dump model.onnx        # one JSON object; {"error": "..."} and exit code 1 if it does not parse
//   onnx_model_dump a.onnx b.onnx ... # one JSON object per line, in order; exit code 1 if any failed
//   onnx_model_dump -                 # reads the model from standard input
//
// Exit codes: 0 all parsed, 1 some model did not parse, 2 usage error or unreadable file.
// JSON: {"ir_version", "opsets": [[domain, version], ...], "graph_name", "inputs"/"outputs": [{"name",
// "elem_type", "elem_type_name", "has_shape", "dims": [int for a fixed dim, string (dim_param, maybe "") for a
// symbolic one]}], "node_count", "initializer_names"}. Strings are UTF-8; bytes that are not valid UTF-8
// are written as \udcXX (Python's "surrogateescape"), so nothing is lost.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "../onnx_model.h"

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 if none starts there.
size_t utf8_len(const std::string &s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const size_t left = s.size() - i;
  const auto cont = [&](size_t k) { return (b(k) & 0xC0) == 0x80; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && cont(i + 1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !cont(i + 1) || !cont(i + 2)) return 0;
    if (c == 0xE0 && b(i + 1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(i + 1) >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    if (c == 0xF0 && b(i + 1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(i + 1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

std::string json_str(const std::string &s) {
  std::string o = "\"";
  char buf[8];
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_len(s, i);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\udc%02x", c);
      o += buf;
      i += 1;
    } else if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
      i += 1;
    } else if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
      i += 1;
    } else {
      o.append(s, i, n);
      i += n;
    }
  }
  return o + "\"";
}

std::string json_value_info(const hostnpu::onnx::ValueInfo &v) {
  std::string o = "{\"name\": " + json_str(v.name) + ", \"elem_type\": " + std::to_string(v.elem_type) +
                  ", \"elem_type_name\": " + json_str(hostnpu::onnx::elem_type_name(v.elem_type)) +
                  ", \"has_shape\": " + (v.has_shape ? "true" : "false") + ", \"dims\": [";
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (i) o += ", ";
    o += v.dims[i].value >= 0 ? std::to_string(v.dims[i].value) : json_str(v.dims[i].param);
  }
  return o + "]}";
}

std::string json_model(const hostnpu::onnx::ModelInfo &m) {
  std::string o = "{\"ir_version\": " + std::to_string(m.ir_version) + ", \"opsets\": [";
  for (size_t i = 0; i < m.opsets.size(); ++i)
    o += (i ? ", [" : "[") + json_str(m.opsets[i].first) + ", " + std::to_string(m.opsets[i].second) + "]";
  o += "], \"graph_name\": " + json_str(m.graph_name);
  for (int io = 0; io < 2; ++io) {
    const auto &list = io == 0 ? m.inputs : m.outputs;
    o += io == 0 ? ", \"inputs\": [" : ", \"outputs\": [";
    for (size_t i = 0; i < list.size(); ++i) o += (i ? ", " : "") + json_value_info(list[i]);
    o += "]";
  }
  o += ", \"node_count\": " + std::to_string(m.node_count) + ", \"initializer_names\": [";
  for (size_t i = 0; i < m.initializer_names.size(); ++i) o += (i ? ", " : "") + json_str(m.initializer_names[i]);
  return o + "]}";
}

bool read_all(const char *path, std::vector<uint8_t> &buf) {
  if (std::strcmp(path, "-") == 0) {
    buf.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return !std::cin.bad();
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  buf.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !f.bad();
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx|- [MODEL.onnx ...]\n", argv[0]);
    return 2;
  }
  int rc = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<uint8_t> buf;
    if (!read_all(argv[a], buf)) {
      std::printf("{\"error\": %s}\n", json_str(std::string("cannot read ") + argv[a]).c_str());
      return 2;
    }
    // Parse from an exact-size heap copy so AddressSanitizer flags any read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[buf.empty() ? 1 : buf.size()]);
    if (!buf.empty()) std::memcpy(exact.get(), buf.data(), buf.size());
    hostnpu::onnx::ModelInfo info;
    std::string err;
    if (hostnpu::onnx::parse_model(buf.empty() ? nullptr : exact.get(), buf.size(), info, err)) {
      std::printf("%s\n", json_model(info).c_str());
    } else {
      std::printf("{\"error\": %s}\n", json_str(err).c_str());
      rc = 1;
    }
  }
  return rc;
}
