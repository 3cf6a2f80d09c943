// A minimal protobuf wire-format reader (protobuf.dev/programming-guides/encoding): enough to
// decode the small metadata protos LiteRT-LM packages carry, without libprotobuf. Every read
// is bounds-checked; defects throw lumen::Error naming `where` and the field path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "base/error.h"

namespace lumen::formats::pb {

enum class WireType : uint8_t { Varint = 0, Fixed64 = 1, Len = 2, StartGroup = 3, EndGroup = 4, Fixed32 = 5 };

struct Field {
  uint32_t number = 0;
  WireType type = WireType::Varint;
  uint64_t varint = 0;          // Varint, Fixed64 and Fixed32 values (raw bits)
  std::string_view bytes;       // Len payload
};

class Reader {
 public:
  Reader(std::string_view data, std::string where) : data_(data), where_(std::move(where)) {}

  bool done() const { return pos_ >= data_.size(); }

  // Reads the next field (tag and value); unknown fields are simply returned to be skipped.
  Field next() {
    Field f;
    const uint64_t tag = varint("tag");
    f.number = uint32_t(tag >> 3);
    const uint64_t wt = tag & 7;
    if (f.number == 0 || tag >> 3 > 0x1fffffff) fail("bad field number " + std::to_string(tag >> 3));
    f.type = WireType(wt);
    switch (f.type) {
      case WireType::Varint: f.varint = varint("varint"); break;
      case WireType::Fixed64: f.varint = fixed(8); break;
      case WireType::Fixed32: f.varint = fixed(4); break;
      case WireType::Len: {
        const uint64_t n = varint("length");
        if (n > data_.size() - pos_) {
          fail("field " + std::to_string(f.number) + ": length " + std::to_string(n) +
               " runs past the end (" + std::to_string(data_.size() - pos_) + " bytes left)");
        }
        f.bytes = data_.substr(pos_, size_t(n));
        pos_ += size_t(n);
        break;
      }
      default:
        fail("field " + std::to_string(f.number) + ": unsupported wire type " + std::to_string(wt));
    }
    return f;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(where_ + ": byte " + std::to_string(pos_) + ": " + what);
  }
  const std::string& where() const { return where_; }

 private:
  uint64_t varint(const char* what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ >= data_.size()) fail(std::string("truncated ") + what);
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      if (shift == 63 && byte > 1) fail(std::string("overlong ") + what);
      v |= uint64_t(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    fail(std::string("overlong ") + what);
  }
  uint64_t fixed(size_t n) {
    if (n > data_.size() - pos_) fail("truncated fixed-width value");
    uint64_t v = 0;
    std::memcpy(&v, data_.data() + pos_, n);  // little-endian host
    pos_ += n;
    return v;
  }

  std::string_view data_;
  std::string where_;
  size_t pos_ = 0;
};

inline float as_float(const Field& f) {
  uint32_t bits = uint32_t(f.varint);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

}  // namespace lumen::formats::pb
