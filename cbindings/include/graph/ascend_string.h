/* gert: CANN 8.5 graph/ascend_string.h (METADEF) -- ge::AscendString, the ABI-neutral string that GE's
 * option maps, names and messages use.  Members are defined by the library (libgraph / the host NPU). */
#ifndef INC_EXTERNAL_GRAPH_ASCEND_STRING_H_
#define INC_EXTERNAL_GRAPH_ASCEND_STRING_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include "graph/types.h"

namespace ge {
class AscendStringImpl;

class AscendString {
 public:
  AscendString() = default;
  ~AscendString() = default;

  /* Implicit on purpose (as in CANN): {"ge.exec.deviceId", "0"} builds an option map entry. */
  AscendString(const char_t *const name);
  AscendString(const char_t *const name, size_t length);

  const char_t *GetString() const;  /* never nullptr: "" when empty */
  size_t GetLength() const;
  size_t Find(const AscendString &ascend_string) const;
  size_t Hash() const;

  bool operator<(const AscendString &d) const;
  bool operator>(const AscendString &d) const;
  bool operator<=(const AscendString &d) const;
  bool operator>=(const AscendString &d) const;
  bool operator==(const AscendString &d) const;
  bool operator!=(const AscendString &d) const;
  bool operator==(const char_t *const d) const;
  bool operator!=(const char_t *const d) const;

 private:
  std::shared_ptr<std::string> name_;
  friend class AscendStringImpl;
};
}  // namespace ge

namespace std {
template <>
struct hash<ge::AscendString> {
  size_t operator()(const ge::AscendString &s) const { return s.Hash(); }
};
}  // namespace std

#endif  // INC_EXTERNAL_GRAPH_ASCEND_STRING_H_
