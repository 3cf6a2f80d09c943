// The searches behind the quantizers (quant/quantize.h): for a group of values x with error
// weights w, the scale (and offset) that minimise the weighted squared error
//   E = sum_i w_i (x_i - d * q_i - m)^2
// over the codes q_i a block format allows. The block encoders call these for each block or
// sub-block, then round the result to what the format stores.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace lumen::quant::search {

// Error of x ~ d * levels[idx] (+ m) under weights w.
double weighted_error(const float* x, const float* w, int n, const float* levels, const uint8_t* idx, float d,
                     float m = 0.0f);

// Nearest integer, ties to even, for |v| < 2^22 (larger values saturate far outside any
// table and are clamped by the callers): the float magic-number rounding, inline (lrintf is
// a library call at the baseline ISA).
inline int round_int(float v) {
  v = std::clamp(v, -4194303.0f, 4194303.0f);
  float t = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &t, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Index of the level nearest v in a sorted table (the lower one on an exact tie).
int nearest_level(const float* levels, int count, float v);

// The same, direct (one rounding) when the table is consecutive integers.
struct LevelIndex {
  LevelIndex(const float* levels, int count);
  int operator()(float v) const {
    if (uniform) return std::clamp(round_int(v - levels[0]), 0, count - 1);
    return nearest_level(levels, count, v);
  }
  const float* levels;
  int count;
  bool uniform;
};

// Codes idx_i in a sorted level table (integers such as -8..7, or IQ4_NL's non-linear values)
// and one scale d with x_i ~ d * levels[idx_i], minimising E. For every scale in a window
// around the ones that map the largest |x| onto either end of the table, the codes are the
// nearest levels; the search sweeps that window exactly (each point where a code changes is
// visited, with running sums), taking the least-squares scale of each code set. `window`
// widens the range of 1/d around the end-mapping, in level units (low, high side).
// Returns d (0 for an all-zero group; idx then holds the level nearest 0).
float fit_scale(const float* x, const float* w, int n, const LevelIndex& levels, uint8_t* idx, float window_low,
                float window_high);

// Uniform codes 0..nmax with an offset: x_i ~ d * L_i + m, minimising E. Candidate scales
// around (max - min) / nmax, each refined by alternating least-squares fits of (d, m) with
// re-rounding. `offset_nonpositive` keeps m <= 0 (K-quants store the offset as -dmin * lm).
struct ScaleOffset {
  float d = 0.0f;
  float m = 0.0f;
};
ScaleOffset fit_scale_offset(const float* x, const float* w, int n, int nmax, uint8_t* L, bool offset_nonpositive);

// Re-rounds codes for a given scale and offset: L_i = clamp(round((x_i - m) / d), 0, nmax).
void round_uniform(const float* x, int n, float d, float m, int nmax, uint8_t* L);

}  // namespace lumen::quant::search
