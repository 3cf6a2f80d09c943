// The tiled online-softmax ("flash") attention against the plain full-score-vector version
// on random inputs: causal and sliding masks, GQA groups, tile sizes that do and do not
// divide the key range, softcap, and the split-KV merge; plus the f16 row conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"

using namespace lumen;

namespace {

struct Case {
  int head_dim, q_heads, kv_heads, window, first_query, queries, tile;
  float softcap;
};

// Relative error of a against the reference b: max |a - b| / max |b|.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, mag = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    mag = std::max(mag, double(std::fabs(b[i])));
  }
  return diff / mag;
}

void run_case(const Case& c, int splits, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int hd = c.head_dim, keys = c.first_query + c.queries;
  const int group = c.q_heads / c.kv_heads;
  // Keys/values as a cache row layout [pos][kv_head][hd]; queries [t][q_head][hd].
  std::vector<float> k(size_t(keys * c.kv_heads * hd)), v(k.size()), q(size_t(c.queries * c.q_heads * hd));
  for (auto& x : k) x = nd(rng) * 1.5f;  // large enough that the softmax is far from uniform
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng) * 1.5f;
  kernels::AttentionParams p;
  p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(float(hd)) * 3.0f;
  p.softcap = c.softcap;
  p.window = c.window;
  const int64_t row = int64_t(c.kv_heads) * hd;

  std::vector<float> naive(q.size()), flash(q.size());
  for (int t = 0; t < c.queries; ++t)
    for (int h = 0; h < c.q_heads; ++h)
      kernels::attention_naive(p, &q[size_t((t * c.q_heads + h) * hd)], c.first_query + t, k.data() + (h / group) * hd,
                               v.data() + (h / group) * hd, row, 0, keys, &naive[size_t((t * c.q_heads + h) * hd)]);

  // Flash: per KV head, all its query heads and all query rows together, tiles of keys.
  for (int kvh = 0; kvh < c.kv_heads; ++kvh) {
    std::vector<const float*> qp;
    std::vector<float*> op;
    std::vector<int32_t> qpos;
    for (int t = 0; t < c.queries; ++t)
      for (int g = 0; g < group; ++g) {
        const int h = kvh * group + g;
        qp.push_back(&q[size_t((t * c.q_heads + h) * hd)]);
        op.push_back(&flash[size_t((t * c.q_heads + h) * hd)]);
        qpos.push_back(c.first_query + t);
      }
    const int n = int(qp.size());
    std::vector<std::vector<float>> buf(static_cast<size_t>(splits));
    std::vector<kernels::OnlineSoftmaxState> parts(static_cast<size_t>(splits));
    for (int s = 0; s < splits; ++s) {
      buf[size_t(s)].assign(size_t(n * (hd + 2)), 0.0f);
      float* b = buf[size_t(s)].data();
      parts[size_t(s)] = {b, b + n, b + 2 * n, n};
      kernels::online_softmax_reset(p, parts[size_t(s)]);
      const int lo = keys * s / splits, hi = keys * (s + 1) / splits;
      for (int first = lo; first < hi; first += c.tile) {
        const int count = std::min(c.tile, hi - first);
        kernels::online_softmax_tile(p, qp.data(), qpos.data(), k.data() + int64_t(first) * row + kvh * hd,
                                     v.data() + int64_t(first) * row + kvh * hd, row, first, count, parts[size_t(s)]);
      }
    }
    if (splits == 1) kernels::online_softmax_finish(p, parts[0], op.data());
    else kernels::online_softmax_merge(p, parts.data(), splits, op.data());
  }
  EXPECT_LT(rel_error(flash, naive), 1e-5) << "hd " << c.head_dim << " heads " << c.q_heads << "/" << c.kv_heads
                                           << " window " << c.window << " tile " << c.tile << " splits " << splits;
}

}  // namespace

TEST(FlashAttention, EqualsNaiveWithMasksWindowsAndGqa) {
  const std::vector<Case> cases = {
      {16, 4, 4, 0, 0, 37, 8, 0.0f},     // causal prefill from position 0, MHA
      {16, 4, 2, 0, 10, 23, 5, 0.0f},    // chunk after cached keys, GQA 2
      {32, 8, 1, 0, 3, 17, 7, 0.0f},     // MQA (Gemma 4 full layers: 16 q heads on 1 KV head)
      {16, 4, 2, 5, 0, 40, 3, 0.0f},     // sliding window smaller than the tile walk
      {16, 4, 2, 1, 4, 12, 4, 0.0f},     // window 1: each query sees only itself
      {8, 2, 1, 16, 20, 30, 64, 0.0f},   // window, one tile holding everything
      {24, 6, 3, 9, 7, 25, 6, 50.0f},    // softcap
      {16, 2, 2, 0, 200, 1, 16, 0.0f},   // decode: one query, long cache
      {16, 16, 1, 64, 300, 1, 32, 0.0f}, // decode on a sliding layer past its window
  };
  uint32_t seed = 1;
  for (const Case& c : cases)
    for (int splits : {1, 3}) run_case(c, splits, seed++);
}

TEST(FlashAttention, ScalarAndAvx2Agree) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2";
  const kernels::Isa saved = kernels::active_isa();
  kernels::set_isa(kernels::Isa::Scalar);
  run_case({32, 4, 2, 7, 5, 20, 6, 0.0f}, 2, 99);
  kernels::set_isa(kernels::Isa::Avx2);
  run_case({32, 4, 2, 7, 5, 20, 6, 0.0f}, 2, 99);
  kernels::set_isa(saved);
}

TEST(HalfConversion, ScalarAndAvx2RoundTheSameWay) {
  std::mt19937 rng(3);
  std::vector<float> x(1027);
  std::uniform_real_distribution<float> expo(-30.0f, 17.0f);
  for (auto& v : x) v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), int(expo(rng)));
  x[0] = 65519.0f;  // rounds down to the largest half
  x[1] = 65520.0f;  // rounds to infinity
  x[2] = 5.9604645e-08f;  // smallest subnormal half
  x[3] = 0.0f;
  x[4] = -0.0f;
  x[5] = 1.0009765625f;  // exactly representable
  x[6] = 1.00048828125f; // a tie: rounds to even (1.0)
  std::vector<uint16_t> scalar(x.size()), vec(x.size());
  const kernels::Isa saved = kernels::active_isa();
  kernels::set_isa(kernels::Isa::Scalar);
  kernels::f32_to_f16_row(x.data(), int64_t(x.size()), scalar.data());
  EXPECT_EQ(scalar[1], 0x7c00);
  EXPECT_EQ(scalar[0], 0x7bff);
  EXPECT_EQ(scalar[2], 0x0001);
  EXPECT_EQ(scalar[6], 0x3c00);
  EXPECT_EQ(f16_to_f32(scalar[5]), 1.0009765625f);
  if (kernels::cpu_supports(kernels::Isa::Avx2)) {
    kernels::set_isa(kernels::Isa::Avx2);
    kernels::f32_to_f16_row(x.data(), int64_t(x.size()), vec.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(scalar[i], vec[i]) << "value " << x[i];
    std::vector<float> back(x.size());
    kernels::f16_to_f32_row(vec.data(), int64_t(vec.size()), back.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], f16_to_f32(vec[i]));
  }
  kernels::set_isa(saved);
}

TEST(BlockCodes, Int8AndInt4DecodeTheSameOnEveryIsa) {
  std::mt19937 rng(8);
  std::vector<int8_t> q8(200);
  std::vector<uint8_t> q4(100);
  for (auto& x : q8) x = int8_t(int(rng() % 256) - 128);
  for (auto& x : q4) x = uint8_t(rng() % 256);
  std::vector<float> a8(q8.size()), b8(q8.size()), a4(2 * q4.size()), b4(a4.size());
  const kernels::Isa saved = kernels::active_isa();
  kernels::set_isa(kernels::Isa::Scalar);
  kernels::int8_to_f32_row(q8.data(), 0.37f, int64_t(q8.size()), a8.data());
  kernels::int4_to_f32_row(q4.data(), 0.37f, int64_t(a4.size()), a4.data());
  EXPECT_EQ(a4[0], float(int(q4[0] & 0xf) - 8) * 0.37f);  // low nibble first
  EXPECT_EQ(a4[1], float(int(q4[0] >> 4) - 8) * 0.37f);
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2";
  kernels::set_isa(kernels::Isa::Avx2);
  kernels::int8_to_f32_row(q8.data(), 0.37f, int64_t(q8.size()), b8.data());
  kernels::int4_to_f32_row(q4.data(), 0.37f, int64_t(b4.size()), b4.data());
  kernels::set_isa(saved);
  EXPECT_EQ(a8, b8);
  EXPECT_EQ(a4, b4);
}
