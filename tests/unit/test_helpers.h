// Small helpers several unit-test files share (one definition each, so the test files can be
// compiled in unity batches without clashing names).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <list>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "base/error.h"
#include "kernels/cpu_features.h"
#include "quant/weight_matrix.h"

namespace lumen::test_support {

// A folder for this test process's files, under the system's temp folder, named `prefix` and
// the process id; removed with everything in it when the process exits, so no run leaves
// files behind.
inline std::filesystem::path process_temp_dir(const std::string& prefix) {
  struct Owned {
    std::filesystem::path path;
    ~Owned() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  // Destroyed, and the folders removed, at exit; a list never copies (and so never destroys)
  // an element when it grows.
  static std::list<Owned> dirs;
  for (const Owned& d : dirs)
    if (d.path.filename() == prefix + std::to_string(::getpid())) return d.path;
  std::filesystem::path path = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  std::filesystem::create_directories(path);
  dirs.emplace_back().path = path;
  return path;
}

// The message of the lumen::Error `fn` throws, or "" when it throws none. Lumen's errors are
// one line naming the file, field or request at fault: a newline in one fails the test.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  return "";
}

// n values drawn from N(0, scale²), the same for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Largest |a[i] - b[i]|; the sizes must match.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

// Writes `bytes` to `path` (binary).
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Every instruction set this CPU runs, the scalar reference first.
inline std::vector<kernels::Isa> all_isas() {
  std::vector<kernels::Isa> out;
  for (auto isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512})
    if (kernels::cpu_supports(isa)) out.push_back(isa);
  return out;
}

// The SIMD instruction sets this CPU runs (the scalar reference is always there).
inline std::vector<kernels::Isa> simd_isas() {
  std::vector<kernels::Isa> out;
  for (auto isa : {kernels::Isa::Avx2, kernels::Isa::Avx512})
    if (kernels::cpu_supports(isa)) out.push_back(isa);
  return out;
}

// A matrix in one of Lumen's interleaved layouts with the bytes it points into.
struct X4Matrix {
  std::vector<std::byte> bytes;
  quant::WeightMatrix w;
};

}  // namespace lumen::test_support
