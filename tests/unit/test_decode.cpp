// The decode path (issue 4, decode speed): the AVX-512 Q4 matrix-vector kernel against the
// scalar reference (exact integer block sums bit for bit, f32 results within 1e-5 of the
// largest output), fused dispatch of matrices sharing an input against separate calls, the
// thread pool's shrinking pieces, and the SIMD softcap / rms_norm / argmax against scalar.
// Every check runs on every ISA this CPU has (forced with set_isa / the *_isa entry points).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include <unistd.h>

#include "formats/mapped_file.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qmatmul.h"
#include "kernels/qmatmul_decode.h"
#include "kernels/thread_pool.h"
#include "quant/repack.h"
#include "quant/weight_matrix.h"
#include "test_helpers.h"

using lumen::test_support::randn;
using lumen::test_support::X4Matrix;

using namespace lumen;
using kernels::Isa;

namespace {

X4Matrix make_q4(int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = randn(size_t(rows * cols), seed);
  X4Matrix m;
  m.bytes.resize(quant::format_storage_bytes(quant::WeightFormat::Q4_0X4, rows, cols));
  quant::quantize_q4_0x4(f.data(), rows, cols, m.bytes.data());
  m.w = {quant::WeightFormat::Q4_0X4, rows, cols, m.bytes.data()};
  return m;
}

X4Matrix make_q8(int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = randn(size_t(rows * cols), seed);
  X4Matrix m;
  m.bytes.resize(quant::format_storage_bytes(quant::WeightFormat::Q8_0X4, rows, cols));
  quant::quantize_q8_0x4(f.data(), rows, cols, m.bytes.data());
  m.w = {quant::WeightFormat::Q8_0X4, rows, cols, m.bytes.data()};
  return m;
}

struct DecodeShape {
  int64_t rows, cols;
};
// Odd sizes: rows not a multiple of 4, columns not a multiple of 128 (or of 32), an odd
// number of chunks (the kernel takes chunks in pairs), and one larger than a pool piece.
const DecodeShape kShapes[] = {{1, 32}, {5, 48}, {7, 130}, {13, 256}, {4, 385}, {37, 640}, {130, 1000}, {403, 1153}};

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

}  // namespace

TEST(DecodeKernel, Avx512BlockSumsEqualTheScalarIntegersBitForBit) {
  if (!kernels::cpu_supports(Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (DecodeShape s : kShapes) {
    X4Matrix m = make_q4(s.rows, s.cols, 31);
    const auto x = randn(size_t(s.cols), 32, 3.0f);
    const int64_t chunks = quant::padded_cols(s.cols) / quant::kChunk;
    const int64_t groups = quant::padded_rows(s.rows) / quant::kRowGroup;
    std::vector<kernels::ActChunk> act(static_cast<size_t>(chunks));
    kernels::quantize_activations(x.data(), s.cols, act.data(), Isa::Scalar);
    const size_t group_bytes = size_t(chunks) * quant::kQ4x4ChunkBytes;
    std::vector<int32_t> simd(size_t(chunks * 16));
    for (int64_t g = 0; g < groups; ++g) {
      const std::byte* group = m.bytes.data() + size_t(g) * group_bytes;
      kernels::detail::q4_decode_block_sums_avx512(group, chunks, act.data(), simd.data());
      for (int64_t c = 0; c < chunks; ++c) {
        const auto* qs = reinterpret_cast<const uint8_t*>(group + size_t(c) * quant::kQ4x4ChunkBytes + 32);
        const kernels::ActChunk& a = act[size_t(c)];
        for (int r = 0; r < 4; ++r)
          for (int b = 0; b < 4; ++b) {
            int32_t ref = 0;
            for (int i = 0; i < 16; ++i) {
              const uint8_t byte = qs[r * 64 + b * 16 + i];
              ref += (int(byte & 0x0f) - 8) * a.q[b * 16 + i] + (int(byte >> 4) - 8) * a.q[64 + b * 16 + i];
            }
            ASSERT_EQ(simd[size_t(c * 16 + b * 4 + r)], ref)
                << "rows=" << s.rows << " cols=" << s.cols << " group " << g << " chunk " << c << " row " << r
                << " block " << b;
          }
      }
    }
  }
}

TEST(DecodeKernel, MatvecOnEveryIsaMatchesTheScalarReferenceOnOddSizes) {
  for (DecodeShape s : kShapes) {
    X4Matrix m = make_q4(s.rows, s.cols, 41);
    const auto x = randn(size_t(s.cols), 42, 2.0f);
    // The reference: the general kernel's scalar tile (qmatmul_isa, scalar) and a double sum.
    std::vector<float> scalar(size_t(s.rows)), wrow(size_t(s.cols));
    kernels::qmatmul_isa(x.data(), 1, m.w, scalar.data(), Isa::Scalar);
    const int64_t chunks = quant::padded_cols(s.cols) / quant::kChunk;
    std::vector<kernels::ActChunk> act(static_cast<size_t>(chunks));
    kernels::quantize_activations(x.data(), s.cols, act.data(), Isa::Scalar);
    std::vector<float> exact(size_t(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) {
      quant::dequantize_row(m.w, r, wrow.data());
      double sum = 0;
      for (int64_t c = 0; c < s.cols; ++c) {
        const auto& a = act[size_t(c / 128)];
        const int64_t i = c % 128, b = i / 32, e = i % 32;
        sum += double(wrow[size_t(c)]) * double(a.q[(e < 16 ? 0 : 64) + b * 16 + e % 16]) * double(a.dx[b * 4]);
      }
      exact[size_t(r)] = float(sum);
    }
    const double tol = 1e-5 * max_abs(exact);
    for (size_t r = 0; r < exact.size(); ++r) ASSERT_NEAR(scalar[r], exact[r], tol) << r;
    for (Isa isa : lumen::test_support::all_isas()) {
      std::vector<float> y(size_t(s.rows), -1.0f);
      const quant::WeightMatrix* ws[] = {&m.w};
      float* ys[] = {y.data()};
      kernels::qmatvec_q4(x.data(), ws, ys, isa);
      for (size_t r = 0; r < y.size(); ++r)
        EXPECT_NEAR(y[r], scalar[r], tol) << kernels::isa_name(isa) << " rows=" << s.rows << " cols=" << s.cols
                                          << " r=" << r;
    }
  }
}

TEST(DecodeKernel, FusedDispatchEqualsSeparateCalls) {
  // q/k/v-like: three matrices with different (odd) row counts sharing one input.
  const int64_t K = 515;
  X4Matrix a = make_q4(37, K, 51), b = make_q4(9, K, 52), c = make_q4(130, K, 53);
  const auto x = randn(size_t(K), 54);
  for (Isa isa : lumen::test_support::all_isas()) {
    std::vector<float> ya(37), yb(9), yc(130), sa(37), sb(9), sc(130);
    const quant::WeightMatrix* ws[] = {&a.w, &b.w, &c.w};
    float* ys[] = {ya.data(), yb.data(), yc.data()};
    kernels::qmatvec_q4(x.data(), ws, ys, isa);
    kernels::qmatmul_isa(x.data(), 1, a.w, sa.data(), isa);
    kernels::qmatmul_isa(x.data(), 1, b.w, sb.data(), isa);
    kernels::qmatmul_isa(x.data(), 1, c.w, sc.data(), isa);
    // Same kernel, same activations, same order per row: identical floats.
    EXPECT_EQ(ya, sa) << kernels::isa_name(isa);
    EXPECT_EQ(yb, sb) << kernels::isa_name(isa);
    EXPECT_EQ(yc, sc) << kernels::isa_name(isa);
  }
}

TEST(DecodeKernel, SharedInputMatmulFallsBackToSeparateCallsOutsideDecodeQ4) {
  const Isa saved = kernels::active_isa();
  const int64_t K = 300;
  X4Matrix a = make_q4(11, K, 61), q8 = make_q8(6, K, 62);
  for (Isa isa : lumen::test_support::all_isas()) {
    kernels::set_isa(isa);
    for (int64_t T : {1, 3}) {
      const auto x = randn(size_t(T * K), 63 + uint32_t(T));
      std::vector<float> ya(size_t(T * 11)), yq(size_t(T * 6)), sa(ya.size()), sq(yq.size());
      const quant::WeightMatrix* ws[] = {&a.w, &q8.w};
      float* ys[] = {ya.data(), yq.data()};
      kernels::matmul_shared_input(x.data(), T, ws, ys);  // a Q8 matrix in the set: separate calls
      kernels::matmul(x.data(), T, a.w, sa.data());
      kernels::matmul(x.data(), T, q8.w, sq.data());
      EXPECT_EQ(ya, sa) << kernels::isa_name(isa) << " T=" << T;
      EXPECT_EQ(yq, sq) << kernels::isa_name(isa) << " T=" << T;
      // Q4 alone at T = 1 takes the fused path; at T = 3 the general kernel.
      std::vector<float> y1(size_t(T * 11));
      const quant::WeightMatrix* w1[] = {&a.w};
      float* o1[] = {y1.data()};
      kernels::matmul_shared_input(x.data(), T, w1, o1);
      EXPECT_EQ(y1, sa) << kernels::isa_name(isa) << " T=" << T;
    }
  }
  kernels::set_isa(saved);
  // Mismatched inputs are refused, not read out of bounds.
  const auto x = randn(size_t(K), 64);
  std::vector<float> y(11);
  const quant::WeightMatrix* ws[] = {&a.w, &a.w};
  float* ys[] = {y.data()};
  EXPECT_THROW(kernels::matmul_shared_input(x.data(), 1, ws, ys), std::exception);
  X4Matrix other = make_q4(4, K + 1, 65);
  const quant::WeightMatrix* mixed[] = {&a.w, &other.w};
  float* two[] = {y.data(), y.data()};
  EXPECT_THROW(kernels::qmatvec_q4(x.data(), mixed, two, Isa::Scalar), std::exception);
}

TEST(DecodePool, PiecesCoverTheRangeOnceAndShrinkTowardTheEnd) {
  kernels::ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 5, 47, 48, 49, 100, 1000, 4097, 65536}) {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      std::lock_guard lock(mu);
      pieces.emplace_back(b, e);
    });
    std::sort(pieces.begin(), pieces.end());
    int64_t next = 0;
    for (auto [b, e] : pieces) {
      ASSERT_EQ(b, next) << "n=" << n;
      ASSERT_LT(b, e) << "n=" << n;
      next = e;
    }
    ASSERT_EQ(next, n);
    if (n >= 1000) {
      // Guided: the first piece is the longest, the last one among the shortest.
      const int64_t first = pieces.front().second - pieces.front().first;
      const int64_t last = pieces.back().second - pieces.back().first;
      EXPECT_GT(first, 2 * last) << "n=" << n;
      EXPECT_LE(int64_t(pieces.size()), 64) << "n=" << n;
    }
  }
}

TEST(DecodeOps, SoftcapSimdMatchesScalar) {
  if (!kernels::cpu_supports(Isa::Avx2)) GTEST_SKIP();
  std::vector<float> x = randn(262144 + 5, 71, 20.0f);
  // Exercise both tanh branches and the clamp: tiny, around the 0.25 switch, huge, signed zero.
  const float special[] = {0.0f, -0.0f, 1e-30f, -1e-7f, 7.49f, -7.51f, 7.5f, 1e4f, -1e4f, 3e38f, -3e38f};
  std::copy(std::begin(special), std::end(special), x.begin());
  for (float cap : {30.0f, 50.0f}) {
    std::vector<float> a = x, b = x;
    kernels::detail::softcap_scalar(a.data(), int64_t(a.size()), cap);
    kernels::detail::softcap_avx2(b.data(), int64_t(b.size()), cap);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(b[i], a[i], 2e-6 * std::fabs(a[i]) + 1e-30) << "i=" << i << " x=" << x[i] << " cap=" << cap;
  }
}

TEST(DecodeOps, RmsNormSimdMatchesScalar) {
  if (!kernels::cpu_supports(Isa::Avx2)) GTEST_SKIP();
  for (int64_t n : {1, 7, 8, 9, 255, 256, 3843}) {
    const auto x = randn(size_t(n), 81 + uint32_t(n), 3.0f), w = randn(size_t(n), 82);
    for (int mode = 0; mode < 3; ++mode) {
      const float* g = mode == 0 ? nullptr : w.data();
      const bool offset = mode == 2;
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), in_place = x;
      kernels::detail::rms_norm_scalar(x.data(), n, g, offset, 1e-6f, a.data());
      kernels::detail::rms_norm_avx2(x.data(), n, g, offset, 1e-6f, b.data());
      kernels::detail::rms_norm_avx2(in_place.data(), n, g, offset, 1e-6f, in_place.data());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_NEAR(b[i], a[i], 1e-6 * std::fabs(a[i])) << "n=" << n << " mode=" << mode << " i=" << i;
        ASSERT_EQ(in_place[i], b[i]) << "aliased output, n=" << n;
      }
    }
  }
}

TEST(DecodeOps, ArgmaxSimdMatchesScalarIncludingTiesAndNaN) {
  if (!kernels::cpu_supports(Isa::Avx2)) GTEST_SKIP();
  auto check = [](const std::vector<float>& v, const char* what) {
    const int64_t n = int64_t(v.size());
    EXPECT_EQ(kernels::detail::argmax_avx2(v.data(), n), kernels::detail::argmax_scalar(v.data(), n)) << what;
  };
  for (int64_t n : {1, 5, 15, 16, 17, 31, 1000, 262144, 262147}) {
    auto v = randn(size_t(n), 91 + uint32_t(n));
    check(v, "random");
    v.back() = 100.0f;  // maximum in the scalar tail
    check(v, "max last");
    if (n > 3) {
      v[size_t(n / 3)] = 200.0f;
      v[size_t(n / 2)] = 200.0f;  // a tie: the lower index
      check(v, "tie");
      v[size_t(n - 2)] = std::numeric_limits<float>::quiet_NaN();
      check(v, "NaN");
    }
  }
  check(std::vector<float>(100, -3.0f), "all equal");
  std::vector<float> zeros(40, -1.0f);
  zeros[17] = -0.0f;
  zeros[23] = 0.0f;
  check(zeros, "signed zeros");
  std::vector<float> negative_inf(33, -std::numeric_limits<float>::infinity());
  check(negative_inf, "all -inf");
}

TEST(DecodeWeights, HugePageCopyHoldsExactlyTheFileBytes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lumen_decode_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // Sizes around the 2 MiB page: smaller, exactly one, one and a bit.
  for (size_t n : {size_t(1), size_t(4097), size_t(2) << 20, (size_t(2) << 20) + 12345}) {
    std::vector<char> bytes(static_cast<size_t>(n));
    std::mt19937 rng(static_cast<uint32_t>(n));
    for (auto& b : bytes) b = char(rng());
    const fs::path file = dir / ("w" + std::to_string(n));
    std::ofstream(file, std::ios::binary).write(bytes.data(), std::streamsize(n));
    formats::MappedFile mapped(file.string());
    formats::MappedFile copied(file.string(), formats::MappedFile::Backing::HugePageCopy);
    ASSERT_EQ(copied.size(), n);
    EXPECT_EQ(std::memcmp(copied.data(), bytes.data(), n), 0) << n;
    EXPECT_EQ(std::memcmp(copied.data(), mapped.data(), n), 0) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copied.data()) % (uintptr_t(2) << 20), 0u) << "2 MiB aligned";
    formats::MappedFile moved(std::move(copied));  // the region moves with it, freed once
    EXPECT_EQ(std::memcmp(moved.data(), bytes.data(), n), 0) << n;
  }
  EXPECT_THROW(formats::MappedFile((dir / "missing").string(), formats::MappedFile::Backing::HugePageCopy),
               std::exception);
  fs::remove_all(dir);
}
