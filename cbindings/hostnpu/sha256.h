// SHA-256 (FIPS 180-4) of a byte range: the host NPU's check that a model file read again is the one parsed
// (ModelBytes, ge_graph.cpp), where a digest a writer could aim at would not do.
#ifndef GERT_HOSTNPU_SHA256_H_
#define GERT_HOSTNPU_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace hostnpu {

using Sha256 = std::array<uint8_t, 32>;
Sha256 sha256(const void *data, size_t size);

}  // namespace hostnpu

#endif
