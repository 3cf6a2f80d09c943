// Shared by the fuzz targets (tests/fuzz/fuzz_*.cpp). Each target feeds one reader or parser
// bytes from libFuzzer (or, in the ordinary builds, the committed corpus through
// standalone_main.cpp) and holds it to the project's promise about bad input: it either
// works or throws one lumen::Error of one non-empty line. Anything else escaping (a
// std::out_of_range, a json::type_error, std::bad_alloc) is a bug, and so is a sanitizer
// report, a hang or an allocation past libFuzzer's -malloc_limit_mb.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>

#include "base/error.h"

namespace lumen::fuzz {

[[noreturn]] inline void crash(const std::string& what) {
  std::fprintf(stderr, "fuzz target: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void check_one_line(const char* kind, std::string_view message) {
  if (message.empty()) crash(std::string(kind) + " with an empty message");
  if (message.find('\n') != std::string_view::npos || message.find('\r') != std::string_view::npos)
    crash(std::string(kind) + " of more than one line: " + std::string(message));
}

// Runs `body`; a lumen::Error (one line) is the expected answer to bad input.
template <class Body>
void expect_clean(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    check_one_line("lumen::Error", e.what());
  } catch (const std::exception& e) {
    crash(std::string("escaped ") + typeid(e).name() + ": " + e.what());
  }
}

// Reads every byte of [data, data + n): under ASan a view that points outside the input
// is reported here rather than wherever a model would first use it.
inline uint64_t touch(const void* data, size_t n) {
  const auto* p = static_cast<const volatile unsigned char*>(data);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  return sum;
}

// A little structure out of unstructured bytes (libFuzzer's FuzzedDataProvider is clang-only;
// the ordinary builds compile these targets with GCC).
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  uint8_t byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(byte()) << (8 * i);
    return v;
  }
  bool flag() { return byte() & 1; }
  // Up to `max` bytes, ended early by a NUL byte (so mutations can move the boundary).
  std::string text(size_t max) {
    std::string out;
    while (size_ > 0 && out.size() < max) {
      const char c = char(byte());
      if (c == '\0') break;
      out += c;
    }
    return out;
  }
  std::string_view rest() {
    std::string_view out(reinterpret_cast<const char*>(data_), size_);
    data_ += size_;
    size_ = 0;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace lumen::fuzz
