#include "runtime/utf8.h"

#include <algorithm>

namespace lumen::runtime {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Whether the first `have` bytes of a `len`-byte sequence can start a valid encoded
// character (no overlong forms, no surrogates, nothing above U+10FFFF).
bool valid_prefix(const unsigned char* b, int have, int len) {
  for (int i = 1; i < have; ++i)
    if (!is_continuation(b[i])) return false;
  if (have >= 2) {
    if (len == 3 && b[0] == 0xE0 && b[1] < 0xA0) return false;  // overlong
    if (len == 3 && b[0] == 0xED && b[1] >= 0xA0) return false;  // surrogate
    if (len == 4 && b[0] == 0xF0 && b[1] < 0x90) return false;   // overlong
    if (len == 4 && b[0] == 0xF4 && b[1] >= 0x90) return false;  // > U+10FFFF
  }
  return true;
}
}  // namespace

int utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

std::string Utf8Assembler::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  const auto* b = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  while (i < n) {
    const int len = utf8_sequence_length(b[i]);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    const int have = int(std::min(n - i, size_t(len)));
    if (!valid_prefix(b + i, have, len)) {
      out += kReplacement;
      ++i;
      continue;
    }
    if (have < len) break;  // incomplete at the end: hold it until more bytes come
    out.append(pending_, i, size_t(len));
    i += size_t(len);
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Assembler::flush() {
  std::string out;
  if (!pending_.empty()) out = std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace lumen::runtime
