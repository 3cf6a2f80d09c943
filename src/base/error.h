// Lumen's single error type: every failure the user can cause (bad file, bad field, bad
// request) is reported as one line that names the file, field or request at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace lumen {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace lumen

#include <string_view>

namespace lumen {

// Names and paths come from files we do not trust; control bytes in them would break the
// one-line promise of lumen::Error, so they are written as \xNN.
inline std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

// 'text', made printable. Built by appending: GCC 12 -O2 warns falsely (-Wrestrict) on
// "'" + std::string.
inline std::string in_quotes(std::string_view text) {
  std::string out(1, '\'');
  out += printable(text);
  out += '\'';
  return out;
}

}  // namespace lumen
