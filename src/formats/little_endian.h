// Unaligned loads of little-endian values from file bytes (every format Lumen reads is
// little-endian, as is every CPU it runs on).
#pragma once

#include <cstddef>
#include <cstring>

namespace lumen::formats {

template <class T>
T read_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace lumen::formats
