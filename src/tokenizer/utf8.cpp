#include "tokenizer/utf8.h"

#include "base/error.h"

namespace lumen::tokenizer::utf8 {

size_t sequence_length(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t length;
  unsigned char low = 0x80, high = 0xbf;  // allowed range of the first continuation byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // overlong
    if (lead == 0xed) high = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;   // overlong
    if (lead == 0xf4) high = 0x8f;  // > U+10FFFF
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  if (byte(pos + 1) < low || byte(pos + 1) > high) return 0;
  for (size_t i = 2; i < length; ++i)
    if ((byte(pos + i) & 0xc0) != 0x80) return 0;
  return length;
}

std::optional<size_t> first_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII runs are the common case; skip them eight bytes at a time would be premature.
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::nullopt;
}

void require_valid(std::string_view text, const std::string& what) {
  if (auto bad = first_invalid(text)) throw Error(what + ": invalid UTF-8 at byte " + std::to_string(*bad));
}

char32_t decode(std::string_view text, size_t pos, size_t length) {
  const auto byte = [&](size_t i) { return char32_t(static_cast<unsigned char>(text[pos + i])); };
  switch (length) {
    case 1: return byte(0);
    case 2: return ((byte(0) & 0x1f) << 6) | (byte(1) & 0x3f);
    case 3: return ((byte(0) & 0x0f) << 12) | ((byte(1) & 0x3f) << 6) | (byte(2) & 0x3f);
    default: return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3f) << 12) | ((byte(2) & 0x3f) << 6) | (byte(3) & 0x3f);
  }
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

size_t incomplete_tail(std::string_view bytes) {
  // A sequence is at most 4 bytes, so its start is among the last 3 bytes.
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const size_t pos = bytes.size() - back;
    const unsigned char c = static_cast<unsigned char>(bytes[pos]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: the start is further back
    size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (need <= back) return 0;  // complete (or an ASCII byte)
    // It is waiting for more bytes if what is there is a valid beginning: pad with the
    // smallest continuation the lead allows and check the result.
    std::string probe(bytes.substr(pos));
    while (probe.size() < need) probe += char(0x80);
    for (unsigned char fill = 0x80; fill <= 0xbf; ++fill) {
      for (size_t i = back; i < need; ++i) probe[i] = char(fill);
      if (sequence_length(probe, 0) == need) return back;
    }
    return 0;
  }
  return 0;
}

std::string replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t length = sequence_length(bytes, pos);
    if (length == 0) {
      out += "\xef\xbf\xbd";
      ++pos;
    } else {
      out.append(bytes.substr(pos, length));
      pos += length;
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t length = sequence_length(text, begin);
    if (length == 0 || !is_python_space(decode(text, begin, length))) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
    const size_t length = sequence_length(text, start);
    if (length != end - start || !is_python_space(decode(text, start, length))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

}  // namespace lumen::tokenizer::utf8
