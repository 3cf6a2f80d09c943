#include "quant/quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "quant/ggml_blocks.h"
#include "quant/quantize_search.h"
#include "quant/repack.h"

namespace lumen::quant {

namespace {

using search::fit_scale;
using search::fit_scale_offset;
using search::round_uniform;

constexpr int kTypeIq4Nl = 20;  // ggml's ids for the non-linear 4-bit formats
constexpr int kTypeIq4Xs = 23;

// A sorted table of code values with its nearest-level lookup.
struct Table {
  explicit Table(std::vector<float> values) : v(std::move(values)), index(v.data(), int(v.size())) {}
  Table(const Table&) = delete;
  int count() const { return int(v.size()); }
  int operator()(float value) const { return index(value); }
  std::vector<float> v;
  search::LevelIndex index;
};

std::vector<float> range(int lo, int hi) {
  std::vector<float> v;
  for (int k = lo; k <= hi; ++k) v.push_back(float(k));
  return v;
}

const Table& q4_levels() { static const Table t(range(-8, 7)); return t; }
const Table& q5_levels() { static const Table t(range(-16, 15)); return t; }
const Table& q8_levels() { static const Table t(range(-128, 127)); return t; }
// Q6_K codes; also IQ4_XS sub-block scales.
const Table& q6_levels() { static const Table t(range(-32, 31)); return t; }
// Q4_K / Q5_K sub-block scales and offsets.
const Table& scale6_levels() { static const Table t(range(0, 63)); return t; }
// Q6_K sub-block scales.
const Table& scale8_levels() { static const Table t(range(-128, 127)); return t; }
// IQ4_NL / IQ4_XS code values (ggml's kvalues_iq4nl).
const Table& iq4_levels() {
  static const Table t({-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113});
  return t;
}

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

double sum_squares(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

// w_i = importance_i * sqrt(sigma2 + x_i^2) (importance 1 when absent).
void weights_sigma(const float* x, const float* importance, int n, float sigma2, float* w) {
  for (int i = 0; i < n; ++i) w[i] = (importance ? importance[i] : 1.0f) * std::sqrt(sigma2 + x[i] * x[i]);
}

// A block whose weights are all zero (importance 0 on every column) would leave the search
// nothing to minimise: fall back to the default weights there.
bool all_zero(const float* w, int n) {
  for (int i = 0; i < n; ++i)
    if (w[i] > 0) return false;
  return true;
}

// ---------------------------------------------------------------- 32-element formats

// Symmetric codes: x ~ d * level[code]. Writes the codes and returns the stored f16 scale.
// True (codes filled) when x_i = d * level[code_i] exactly for the f16 scale `dh`.
bool reproduces(const Table& lv, const float* x, uint16_t dh, uint8_t* codes) {
  const float d = f16_to_f32(dh);
  if (d == 0.0f || !std::isfinite(d)) return false;
  const float id = 1.0f / d;
  for (int i = 0; i < 32; ++i) {
    const int c = lv(x[i] * id);
    if (d * lv.v[size_t(c)] != x[i]) return false;
    codes[i] = uint8_t(c);
  }
  return true;
}

uint16_t encode_symmetric(const Table& lv, const float* x, const float* w, uint8_t* codes, float win_lo,
                          float win_hi) {
  // A block already on this format's grid with its largest value on an end of the table
  // (what round-to-nearest quantizers write) is reproduced exactly: no search can do better.
  float amax = 0, xmax = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      xmax = x[i];
    }
  // ggml's two conventions: d = amax / top level (Q8_0), d = max / bottom level (Q4_0, Q5_0).
  for (float d : {amax / lv.v.back(), xmax / lv.v.front()}) {
    const uint16_t dh = f32_to_f16(d);
    if (reproduces(lv, x, dh, codes)) return dh;
  }
  const float d = fit_scale(x, w, 32, lv.index, codes, win_lo, win_hi);
  const uint16_t dh = f32_to_f16(d);
  const float ds = f16_to_f32(dh);
  // Codes nearest for the scale actually stored (never worse than the searched ones).
  if (ds != 0.0f) {
    const float id = 1.0f / ds;
    for (int i = 0; i < 32; ++i) codes[i] = uint8_t(lv(x[i] * id));
  } else {
    const int zero = lv(0.0f);
    for (int i = 0; i < 32; ++i) codes[i] = uint8_t(zero);
  }
  return dh;
}

void pack_nibbles_32(const uint8_t* codes, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t((codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4));
}

uint32_t high_bits_32(const uint8_t* codes) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= uint32_t((codes[j] >> 4) & 1) << j;
  return qh;
}

void legacy_weights(const float* x, const float* imp, float sigma2, float* w) {
  weights_sigma(x, imp, 32, sigma2, w);
  if (imp && all_zero(w, 32)) weights_sigma(x, nullptr, 32, sigma2, w);
}

void quantize_q4_0(const float* x, const float* imp, int64_t nb, float sigma2, uint8_t* out) {
  float w[32];
  uint8_t codes[32];
  for (int64_t b = 0; b < nb; ++b, x += 32, out += 18) {
    legacy_weights(x, imp ? imp + 32 * b : nullptr, sigma2, w);
    const uint16_t d = encode_symmetric(q4_levels(), x, w, codes, 1.6f, 2.5f);
    std::memcpy(out, &d, 2);
    pack_nibbles_32(codes, out + 2);
  }
}

void quantize_q5_0(const float* x, const float* imp, int64_t nb, float sigma2, uint8_t* out) {
  float w[32];
  uint8_t codes[32];
  for (int64_t b = 0; b < nb; ++b, x += 32, out += 22) {
    legacy_weights(x, imp ? imp + 32 * b : nullptr, sigma2, w);
    const uint16_t d = encode_symmetric(q5_levels(), x, w, codes, 3.0f, 4.0f);
    const uint32_t qh = high_bits_32(codes);
    std::memcpy(out, &d, 2);
    std::memcpy(out + 2, &qh, 4);
    pack_nibbles_32(codes, out + 6);
  }
}

void quantize_q8_0(const float* x, const float* imp, int64_t nb, float sigma2, uint8_t* out) {
  float w[32];
  uint8_t codes[32];
  for (int64_t b = 0; b < nb; ++b, x += 32, out += 34) {
    legacy_weights(x, imp ? imp + 32 * b : nullptr, sigma2, w);
    const uint16_t d = encode_symmetric(q8_levels(), x, w, codes, 2.0f, 2.0f);
    std::memcpy(out, &d, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int(codes[j]) - 128);
  }
}

// Codes 0..nmax with an offset: x ~ d * code + m (Q4_1, Q5_1).
void quantize_offset_32(const float* x, const float* imp, int64_t nb, float sigma2, int nmax, uint8_t* out) {
  float w[32];
  uint8_t codes[32];
  const bool five = nmax == 31;
  for (int64_t b = 0; b < nb; ++b, x += 32, out += five ? 24 : 20) {
    legacy_weights(x, imp ? imp + 32 * b : nullptr, sigma2, w);
    const search::ScaleOffset fit = fit_scale_offset(x, w, 32, nmax, codes, false);
    const float d = f16_round(fit.d), m = f16_round(fit.m);
    if (d != 0.0f) round_uniform(x, 32, d, m, nmax, codes);
    store_f16(out, d);
    store_f16(out + 2, m);
    if (five) {
      const uint32_t qh = high_bits_32(codes);
      std::memcpy(out + 4, &qh, 4);
      pack_nibbles_32(codes, out + 8);
    } else {
      pack_nibbles_32(codes, out + 4);
    }
  }
}

void quantize_iq4_nl(const float* x, const float* imp, int64_t nb, uint8_t* out) {
  float w[32];
  uint8_t codes[32];
  for (int64_t b = 0; b < nb; ++b, x += 32, out += 18) {
    const float* qi = imp ? imp + 32 * b : nullptr;
    weights_sigma(x, qi, 32, float(2 * sum_squares(x, 32) / 32), w);
    if (qi && all_zero(w, 32)) weights_sigma(x, nullptr, 32, float(2 * sum_squares(x, 32) / 32), w);
    const uint16_t d = encode_symmetric(iq4_levels(), x, w, codes, 24.0f, 30.0f);
    std::memcpy(out, &d, 2);
    pack_nibbles_32(codes, out + 2);
  }
}

// ---------------------------------------------------------------- super-blocks with signed scale codes

// A 256-element super-block of `nsub` sub-blocks, each x ~ d * s_j * level[code_i], with
// d an f16 and s_j a signed integer scale code (Q6_K: 16 x 16, levels -32..31, scales
// -128..127; IQ4_XS: 8 x 32, IQ4 levels, scales -32..31).
struct SignedScaleBlock {
  const Table& levels;
  int sub;   // elements per sub-block
  int nsub;  // sub-blocks
  const Table& scales;
  float win_lo, win_hi, scale_win_lo, scale_win_hi;
};

// Error of one sub-block at scale a with the nearest codes (written to codes).
double signed_sub_error(const Table& lv, const float* x, const float* w, int n, float a, uint8_t* codes) {
  double e = 0;
  if (a == 0.0f) {
    const int zero = lv(0.0f);
    for (int i = 0; i < n; ++i) {
      codes[i] = uint8_t(zero);
      e += double(w[i]) * x[i] * x[i];
    }
    return e;
  }
  const float ia = 1.0f / a;
  for (int i = 0; i < n; ++i) {
    const int c = lv(x[i] * ia);
    codes[i] = uint8_t(c);
    const double diff = double(a) * lv.v[size_t(c)] - x[i];
    e += double(w[i]) * diff * diff;
  }
  return e;
}

double reround_signed(const SignedScaleBlock& f, const float* x, const float* w, float d, const int* s,
                      uint8_t* codes) {
  double err = 0;
  for (int j = 0; j < f.nsub; ++j)
    err += signed_sub_error(f.levels, x + j * f.sub, w + j * f.sub, f.sub, d * float(s[j]), codes + j * f.sub);
  return err;
}

// Fills d (the stored f16 value), the scale values s[j] and the codes.
void encode_signed_block(const SignedScaleBlock& f, const float* x, const float* w, float& d_out, int* s_out,
                         uint8_t* codes) {
  float scales[16], scale_w[16];
  uint8_t scale_codes[16];
  for (int j = 0; j < f.nsub; ++j) {
    const float* xj = x + j * f.sub;
    const float* wj = w + j * f.sub;
    uint8_t* cj = codes + j * f.sub;
    scales[j] = fit_scale(xj, wj, f.sub, f.levels.index, cj, f.win_lo, f.win_hi);
    // An error in s_j costs about (delta s_j)^2 * sum w q^2.
    double sq = 0;
    for (int i = 0; i < f.sub; ++i) sq += double(wj[i]) * f.levels.v[cj[i]] * f.levels.v[cj[i]];
    scale_w[j] = float(sq);
  }
  if (all_zero(scale_w, f.nsub))
    for (int j = 0; j < f.nsub; ++j) scale_w[j] = 1.0f;
  // With codes -32..31, a sub-block that does not use -32 reads the same with its scale and
  // codes negated. Give all such sub-blocks the sign of the largest scale, so that every
  // scale code lands on the side of the scale table with the extra level (-128), as
  // llama.cpp's blocks have them: those then come back exactly.
  const bool symmetric = f.levels.index.uniform && f.levels.v.front() == -f.levels.v.back() - 1;
  if (symmetric) {
    int jmax = 0;
    for (int j = 1; j < f.nsub; ++j)
      if (std::fabs(scales[j]) > std::fabs(scales[jmax])) jmax = j;
    const int top = f.levels.count() - 1;
    for (int j = 0; j < f.nsub; ++j) {
      if ((scales[j] > 0) == (scales[jmax] > 0)) continue;
      uint8_t* cj = codes + j * f.sub;
      if (std::find(cj, cj + f.sub, uint8_t(0)) != cj + f.sub) continue;  // uses the bottom level
      scales[j] = -scales[j];
      for (int i = 0; i < f.sub; ++i) cj[i] = uint8_t(top + 1 - cj[i]);  // value v -> -v
    }
  }
  float d = f16_round(
      fit_scale(scales, scale_w, f.nsub, f.scales.index, scale_codes, f.scale_win_lo, f.scale_win_hi));
  int s[16];
  for (int j = 0; j < f.nsub; ++j) s[j] = int(f.scales.v[scale_codes[j]]);
  double best = reround_signed(f, x, w, d, s, codes);
  if (best == 0) {
    d_out = d;
    std::copy(s, s + f.nsub, s_out);
    return;
  }

  // Refinement: each sub-block's scale code re-picked for the codes it has, then d refitted
  // over the block; kept while the error falls.
  const int smin = int(f.scales.v.front()), smax = int(f.scales.v.back());
  uint8_t trial_codes[256], tmp[32];
  for (int iter = 0; iter < 4 && d != 0.0f; ++iter) {
    int ts[16];
    double e0 = 0;
    for (int j = 0; j < f.nsub; ++j) {
      const float* xj = x + j * f.sub;
      const float* wj = w + j * f.sub;
      const uint8_t* cj = codes + j * f.sub;
      double sxq = 0, sqq = 0;
      for (int i = 0; i < f.sub; ++i) {
        const double q = f.levels.v[cj[i]];
        sxq += wj[i] * xj[i] * q;
        sqq += wj[i] * q * q;
      }
      const int center = sqq > 0 ? int(std::lrint(std::clamp(sxq / sqq / d, -1e6, 1e6))) : s[j];
      double best_j = -1;
      ts[j] = s[j];
      // Around the least-squares scale code, and its negation: a sub-block whose codes do
      // not use the table's extra low level reads the same with all signs flipped, and only
      // one sign may fit the block's grid.
      for (int c : {center - 1, center, center + 1, -center - 1, -center, -center + 1}) {
        const int sc = std::clamp(c, smin, smax);
        const double e = signed_sub_error(f.levels, xj, wj, f.sub, d * float(sc), tmp);
        if (best_j < 0 || e < best_j) {
          best_j = e;
          ts[j] = sc;
          std::copy(tmp, tmp + f.sub, trial_codes + j * f.sub);
        }
      }
      e0 += best_j;
    }
    // d by least squares over the block for these scale codes and codes.
    double sxu = 0, suu = 0;
    for (int j = 0; j < f.nsub; ++j)
      for (int i = 0; i < f.sub; ++i) {
        const int k = j * f.sub + i;
        const double u = double(ts[j]) * f.levels.v[trial_codes[k]];
        sxu += w[k] * x[k] * u;
        suu += w[k] * u * u;
      }
    float td = d;
    if (suu > 0) {
      const float fitted = f16_round(float(sxu / suu));
      uint8_t fitted_codes[256];
      const double e1 = reround_signed(f, x, w, fitted, ts, fitted_codes);
      if (e1 < e0) {
        e0 = e1;
        td = fitted;
        std::copy(fitted_codes, fitted_codes + f.sub * f.nsub, trial_codes);
      }
    }
    if (!(e0 < best * (1 - 1e-7))) break;
    best = e0;
    d = td;
    std::copy(ts, ts + f.nsub, s);
    std::copy(trial_codes, trial_codes + f.sub * f.nsub, codes);
  }
  d_out = d;
  std::copy(s, s + f.nsub, s_out);
}

void quantize_q6_k(const float* x, const float* imp, int64_t nb, uint8_t* out) {
  const SignedScaleBlock f{q6_levels(), 16, 16, scale8_levels(), 6.0f, 8.0f, 64.0f, 8.0f};
  float w[256];
  uint8_t L[256];
  int s[16];
  for (int64_t b = 0; b < nb; ++b, x += 256, out += 210) {
    const float* qi = imp ? imp + 256 * b : nullptr;
    const float sigma2 = float(2 * sum_squares(x, 256) / 256);
    weights_sigma(x, qi, 256, sigma2, w);
    if (qi && all_zero(w, 256)) weights_sigma(x, nullptr, 256, sigma2, w);
    float d = 0;
    encode_signed_block(f, x, w, d, s, L);
    std::memset(out, 0, 210);
    uint8_t* ql = out;
    uint8_t* qh = out + 128;
    int8_t* sc = reinterpret_cast<int8_t*>(out + 192);
    for (int j = 0; j < 16; ++j) sc[j] = int8_t(s[j]);
    store_f16(out + 208, d);
    // L holds codes 0..63 (value + 32), laid out as ggml's dequantizer reads them.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* Lh = L + 128 * half;
      uint8_t* qlh = ql + 64 * half;
      uint8_t* qhh = qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        qlh[l] = uint8_t((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        qlh[l + 32] = uint8_t((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qhh[l] = uint8_t((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_iq4_xs(const float* x, const float* imp, int64_t nb, uint8_t* out) {
  const SignedScaleBlock f{iq4_levels(), 32, 8, q6_levels(), 24.0f, 30.0f, 16.0f, 4.0f};
  float w[256];
  uint8_t L[256];
  int s[8];
  for (int64_t b = 0; b < nb; ++b, x += 256, out += 136) {
    const float* qi = imp ? imp + 256 * b : nullptr;
    weights_sigma(x, qi, 256, float(2 * sum_squares(x, 256) / 256), w);
    if (qi && all_zero(w, 256)) weights_sigma(x, nullptr, 256, float(2 * sum_squares(x, 256) / 256), w);
    float d = 0;
    encode_signed_block(f, x, w, d, s, L);
    std::memset(out, 0, 136);
    store_f16(out, d);
    uint16_t scales_h = 0;
    uint8_t* scales_l = out + 4;
    for (int j = 0; j < 8; ++j) {
      const int l = s[j] + 32;
      scales_l[j / 2] |= uint8_t((l & 0xF) << (4 * (j % 2)));
      scales_h |= uint16_t((l >> 4) << (2 * j));
    }
    std::memcpy(out + 2, &scales_h, 2);
    for (int j = 0; j < 8; ++j) pack_nibbles_32(L + 32 * j, out + 8 + 16 * j);
  }
}

// ---------------------------------------------------------------- Q4_K / Q5_K

// x ~ (d * ls_j) * L_i - (dmin * lm_j), 8 sub-blocks of 32, ls/lm 6-bit, L 0..nmax.
struct ScaleMinState {
  float d = 0, dmin = 0;
  int ls[8] = {}, lm[8] = {};
};

// Error of one sub-block with scale a and offset m, its codes re-rounded (written to L).
double offset_sub_error(const float* x, const float* w, int nmax, float a, float m, uint8_t* L) {
  round_uniform(x, 32, a, m, nmax, L);
  double e = 0;
  for (int i = 0; i < 32; ++i) {
    const double diff = double(a) * L[i] + m - x[i];
    e += w[i] * diff * diff;
  }
  return e;
}

double reround_scale_min(const float* x, const float* w, int nmax, const ScaleMinState& st, uint8_t* L) {
  double err = 0;
  for (int j = 0; j < 8; ++j)
    err += offset_sub_error(x + 32 * j, w + 32 * j, nmax, st.d * float(st.ls[j]), -st.dmin * float(st.lm[j]),
                            L + 32 * j);
  return err;
}

void encode_scale_min_block(const float* x, const float* w, int nmax, ScaleMinState& st, uint8_t* L) {
  float scales[8], mins[8], ws[8], wm[8];
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    const float* wj = w + 32 * j;
    const search::ScaleOffset fit = fit_scale_offset(xj, wj, 32, nmax, L + 32 * j, true);
    scales[j] = std::max(fit.d, 0.0f);
    mins[j] = -fit.m;
    double sll = 0, sw = 0;
    for (int i = 0; i < 32; ++i) {
      sll += double(wj[i]) * L[32 * j + i] * L[32 * j + i];
      sw += wj[i];
    }
    ws[j] = float(sll);
    wm[j] = float(sw);
  }
  if (all_zero(ws, 8)) std::fill(ws, ws + 8, 1.0f);
  if (all_zero(wm, 8)) std::fill(wm, wm + 8, 1.0f);
  uint8_t codes[8];
  st.d = f16_round(fit_scale(scales, ws, 8, scale6_levels().index, codes, 32.0f, 12.0f));
  for (int j = 0; j < 8; ++j) st.ls[j] = codes[j];
  st.dmin = f16_round(fit_scale(mins, wm, 8, scale6_levels().index, codes, 32.0f, 12.0f));
  for (int j = 0; j < 8; ++j) st.lm[j] = codes[j];
  double best = reround_scale_min(x, w, nmax, st, L);
  if (best == 0) return;  // already exact (data on this format's grid)

  // Refinement, kept while the block's error falls: each sub-block's (ls, lm) re-picked
  // around the least-squares fit of its codes -- offsets shifted by whole codes included,
  // since a sub-block whose codes do not reach 0 is fitted as well with the codes shifted
  // down and a larger offset, and only one of those offsets may lie on the dmin grid --
  // then (d, dmin) refitted over the block.
  uint8_t trial[256], tmp[32];
  for (int iter = 0; iter < 4 && st.d != 0.0f; ++iter) {
    ScaleMinState ts = st;
    double e0 = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xj = x + 32 * j;
      const float* wj = w + 32 * j;
      const uint8_t* Lj = L + 32 * j;
      double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
      for (int i = 0; i < 32; ++i) {
        sw += wj[i];
        sl += wj[i] * Lj[i];
        sll += double(wj[i]) * Lj[i] * Lj[i];
        sx += wj[i] * xj[i];
        slx += double(wj[i]) * Lj[i] * xj[i];
      }
      const double det = sw * sll - sl * sl;
      double a = st.d * st.ls[j], b = st.dmin * st.lm[j];  // x ~ a L - b
      if (det > 0) {
        a = (sw * slx - sx * sl) / det;
        b = -(sll * sx - sl * slx) / det;
      }
      const int c_ls = int(std::lrint(std::clamp(a / st.d, -1e6, 1e6)));
      double best_j = -1;
      auto consider = [&](int ls, int lm) {
        ls = std::clamp(ls, 0, 63);
        lm = st.dmin > 0 ? std::clamp(lm, 0, 63) : 0;
        const double e = offset_sub_error(xj, wj, nmax, st.d * float(ls), -st.dmin * float(lm), tmp);
        if (best_j < 0 || e < best_j) {
          best_j = e;
          ts.ls[j] = ls;
          ts.lm[j] = lm;
          std::copy(tmp, tmp + 32, trial + 32 * j);
        }
      };
      consider(st.ls[j], st.lm[j]);
      for (int ls = c_ls - 1; ls <= c_ls + 1; ++ls) {
        const double aq = double(st.d) * std::clamp(ls, 0, 63);
        for (int shift = -2; shift <= 2; ++shift) {
          const double bq = b + shift * aq;
          const int c_lm = st.dmin > 0 ? int(std::lrint(std::clamp(bq / st.dmin, -1e6, 1e6))) : 0;
          if (shift == 0)
            for (int lm = c_lm - 1; lm <= c_lm + 1; ++lm) consider(ls, lm);
          else
            consider(ls, c_lm);
        }
      }
      e0 += best_j;
    }
    // (d, dmin) by least squares over the block: x ~ d * (ls_j L_i) - dmin * lm_j.
    double suu = 0, suv = 0, svv = 0, sxu = 0, sxv = 0;
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 32; ++i) {
        const int k = 32 * j + i;
        const double u = double(ts.ls[j]) * trial[k], v = -double(ts.lm[j]);
        suu += w[k] * u * u;
        suv += w[k] * u * v;
        svv += w[k] * v * v;
        sxu += w[k] * x[k] * u;
        sxv += w[k] * x[k] * v;
      }
    const double det = suu * svv - suv * suv;
    if (det > 0) {
      double d = (sxu * svv - sxv * suv) / det, dmin = (suu * sxv - suv * sxu) / det;
      if (dmin < 0) {
        dmin = 0;
        d = suu > 0 ? sxu / suu : 0;
      }
      ScaleMinState fitted = ts;
      fitted.d = f16_round(float(d));
      fitted.dmin = f16_round(float(dmin));
      uint8_t trial2[256];
      const double e1 = reround_scale_min(x, w, nmax, fitted, trial2);
      if (e1 < e0) {
        e0 = e1;
        ts = fitted;
        std::copy(trial2, trial2 + 256, trial);
      }
    }
    if (!(e0 < best * (1 - 1e-7))) break;
    best = e0;
    st = ts;
    std::copy(trial, trial + 256, L);
  }
}

void pack_k_scales(const ScaleMinState& st, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = uint8_t(st.ls[j]), lm = uint8_t(st.lm[j]);
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= uint8_t((ls >> 4) << 6);
      scales[j] |= uint8_t((lm >> 4) << 6);
    }
  }
}

void k_weights(const float* x, const float* imp, float* w) {
  if (imp) {
    weights_sigma(x, imp, 256, float(2 * sum_squares(x, 256) / 256), w);
    if (!all_zero(w, 256)) return;
  }
  for (int j = 0; j < 8; ++j) {
    const float av = float(std::sqrt(sum_squares(x + 32 * j, 32) / 32));
    for (int i = 0; i < 32; ++i) w[32 * j + i] = av + std::fabs(x[32 * j + i]);
  }
}

void quantize_q4_k(const float* x, const float* imp, int64_t nb, uint8_t* out) {
  float w[256];
  uint8_t L[256];
  for (int64_t b = 0; b < nb; ++b, x += 256, out += 144) {
    k_weights(x, imp ? imp + 256 * b : nullptr, w);
    ScaleMinState st;
    encode_scale_min_block(x, w, 15, st, L);
    std::memset(out, 0, 144);
    store_f16(out, st.d);
    store_f16(out + 2, st.dmin);
    pack_k_scales(st, out + 4);
    uint8_t* q = out + 16;
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) q[32 * g + l] = uint8_t(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* x, const float* imp, int64_t nb, uint8_t* out) {
  float w[256];
  uint8_t L[256];
  for (int64_t b = 0; b < nb; ++b, x += 256, out += 176) {
    k_weights(x, imp ? imp + 256 * b : nullptr, w);
    ScaleMinState st;
    encode_scale_min_block(x, w, 31, st, L);
    std::memset(out, 0, 176);
    store_f16(out, st.d);
    store_f16(out + 2, st.dmin);
    pack_k_scales(st, out + 4);
    uint8_t* qh = out + 16;
    uint8_t* ql = out + 48;
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * g + l], l2 = L[64 * g + 32 + l];
        qh[l] |= uint8_t(((l1 >> 4) & 1) << (2 * g));
        qh[l] |= uint8_t(((l2 >> 4) & 1) << (2 * g + 1));
        ql[32 * g + l] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
  }
}

int64_t block_elems(int type) {
  switch (type) {
    case ggml_type::Q4_K: case ggml_type::Q5_K: case ggml_type::Q6_K: case kTypeIq4Xs: return 256;
    case ggml_type::F32: case ggml_type::F16: case ggml_type::BF16: return 1;
    default: return 32;
  }
}

}  // namespace

bool ggml_can_quantize(int type) {
  switch (type) {
    case ggml_type::F32: case ggml_type::F16: case ggml_type::BF16:
    case ggml_type::Q8_0: case ggml_type::Q4_0: case ggml_type::Q4_1: case ggml_type::Q5_0: case ggml_type::Q5_1:
    case ggml_type::Q4_K: case ggml_type::Q5_K: case ggml_type::Q6_K: case kTypeIq4Nl: case kTypeIq4Xs:
      return true;
    default:
      return false;
  }
}

void quantize_row_ggml(int type, const float* x, int64_t n, const float* importance, void* out_ptr) {
  if (!ggml_can_quantize(type)) throw Error("quantize: cannot write ggml type " + std::to_string(type));
  const int64_t bs = block_elems(type);
  if (n <= 0 || n % bs != 0)
    throw Error("quantize: a row of " + std::to_string(n) + " values is not a whole number of " +
                std::to_string(bs) + "-element blocks");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) throw Error("quantize: value " + std::to_string(i) + " of the row is not finite");
  if (importance)
    for (int64_t i = 0; i < n; ++i)
      if (!(importance[i] >= 0) || !std::isfinite(importance[i]))
        throw Error("quantize: importance " + std::to_string(i) + " is negative or not finite");
  auto* out = static_cast<uint8_t*>(out_ptr);
  const int64_t nb = n / bs;
  const float row_sigma2 = float(sum_squares(x, int(n)) / double(n));
  switch (type) {
    case ggml_type::F32: std::memcpy(out, x, size_t(n) * 4); return;
    case ggml_type::F16:
      for (int64_t i = 0; i < n; ++i) store_f16(out + 2 * i, x[i]);
      return;
    case ggml_type::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case ggml_type::Q4_0: quantize_q4_0(x, importance, nb, row_sigma2, out); return;
    case ggml_type::Q5_0: quantize_q5_0(x, importance, nb, row_sigma2, out); return;
    case ggml_type::Q8_0: quantize_q8_0(x, importance, nb, row_sigma2, out); return;
    case ggml_type::Q4_1: quantize_offset_32(x, importance, nb, row_sigma2, 15, out); return;
    case ggml_type::Q5_1: quantize_offset_32(x, importance, nb, row_sigma2, 31, out); return;
    case ggml_type::Q4_K: quantize_q4_k(x, importance, nb, out); return;
    case ggml_type::Q5_K: quantize_q5_k(x, importance, nb, out); return;
    case ggml_type::Q6_K: quantize_q6_k(x, importance, nb, out); return;
    case kTypeIq4Nl: quantize_iq4_nl(x, importance, nb, out); return;
    case kTypeIq4Xs: quantize_iq4_xs(x, importance, nb, out); return;
    default: break;
  }
}

}  // namespace lumen::quant
