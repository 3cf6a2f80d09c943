// SHA-256 (FIPS 180-4), for the content hashes of parity receipts and map files. Small and
// dependency-free: hashing a package is I/O-bound, so no SIMD.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lumen::formats {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits; the object must not be updated afterwards.
  std::string hex();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view bytes);
// The hash of a file's bytes (memory-mapped). Throws lumen::Error naming the path.
std::string sha256_file(const std::string& path);

}  // namespace lumen::formats
