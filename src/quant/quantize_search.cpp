#include "quant/quantize_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace lumen::quant::search {

namespace {

// Below this largest |x| a group is treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kZeroGroup = 1e-15f;

struct Event {
  float u;  // 1/|d| at which element i moves to level `to`
  int16_t i;
  uint8_t to;
};

struct SweepState {
  double sxq = 0, sqq = 0;
};

// Codes of x at scale 1/(s*u_lo) (the nearest levels to s*u_lo*x_i) with their running sums,
// and every code change as u grows up to u_hi, sorted. Returns the number of events.
size_t start_sweep(const float* x, const float* w, int n, const LevelIndex& nearest, float s, float u_lo, float u_hi,
                   uint8_t* idx, std::vector<Event>& events, SweepState& st) {
  const float* levels = nearest.levels;
  if (events.size() < size_t(n) * size_t(nearest.count)) events.resize(size_t(n) * size_t(nearest.count));
  Event* out = events.data();
  for (int i = 0; i < n; ++i) {
    int k = nearest(s * u_lo * x[i]);
    idx[i] = uint8_t(k);
    const double q = levels[k];
    st.sxq += double(w[i]) * x[i] * q;
    st.sqq += double(w[i]) * q * q;
    if (x[i] == 0.0f) continue;
    const float inv = 1.0f / (s * x[i]);
    const int dir = inv > 0 ? 1 : -1;
    for (int next = k + dir; next >= 0 && next < nearest.count; k = next, next += dir) {
      const float u = 0.5f * (levels[k] + levels[next]) * inv;
      if (u > u_hi) break;
      *out++ = {u, int16_t(i), uint8_t(next)};
    }
  }
  const size_t count = size_t(out - events.data());
  std::sort(events.data(), out, [](const Event& a, const Event& b) { return a.u < b.u; });
  return count;
}

}  // namespace

double weighted_error(const float* x, const float* w, int n, const float* levels, const uint8_t* idx, float d,
                      float m) {
  double e = 0;
  for (int i = 0; i < n; ++i) {
    const double diff = double(d) * levels[idx[i]] + m - x[i];
    e += double(w[i]) * diff * diff;
  }
  return e;
}

LevelIndex::LevelIndex(const float* levels, int count) : levels(levels), count(count), uniform(true) {
  for (int k = 1; k < count; ++k)
    if (levels[k] != levels[0] + float(k)) uniform = false;
  if (levels[0] != std::nearbyint(levels[0])) uniform = false;
}

int nearest_level(const float* levels, int count, float v) {
  // Tables are short (<= 256): binary search for the first level >= v, then compare.
  const float* hi = std::lower_bound(levels, levels + count, v);
  if (hi == levels) return 0;
  if (hi == levels + count) return count - 1;
  const float* lo = hi - 1;
  return int((v - *lo <= *hi - v) ? lo - levels : hi - levels);
}

float fit_scale(const float* x, const float* w, int n, const LevelIndex& nearest, uint8_t* idx, float window_low,
                float window_high) {
  const float* levels = nearest.levels;
  const int count = nearest.count;
  float amax = 0, xmax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      xmax = x[i];
    }
  if (!(amax >= kZeroGroup)) {
    const int zero = nearest(0.0f);
    for (int i = 0; i < n; ++i) idx[i] = uint8_t(zero);
    return 0.0f;
  }

  thread_local std::vector<Event> events;
  thread_local std::vector<uint8_t> trial;
  trial.resize(size_t(n));
  double best_score = -1, best_sxq = 0, best_sqq = 1;
  // A table symmetric but for one more level below (-8..7) needs only the sign of d that
  // puts the largest |x| on its low end: the window then covers the other mapping too.
  const bool one_sign = nearest.uniform && levels[0] == -levels[count - 1] - 1 && window_low >= 1;
  for (float s : {1.0f, -1.0f}) {
    if (one_sign && s * xmax > 0) continue;
    // The end of the table the largest |x| lands on for this sign of d.
    const float end = s * xmax > 0 ? levels[count - 1] : -levels[0];
    if (end <= 0) continue;
    const float u_lo = std::max(0.5f * end, end - window_low) / amax;
    const float u_hi = (end + window_high) / amax;
    SweepState st;
    const size_t n_events = start_sweep(x, w, n, nearest, s, u_lo, u_hi, trial.data(), events, st);
    // Each state is the code set of an interval of u; its least-squares scale reduces the
    // error by sxq^2 / sqq. Keep the best code set seen.
    auto consider = [&] {
      if (st.sqq <= 0) return;
      const double score = st.sxq * st.sxq / st.sqq;
      if (score > best_score) {
        best_score = score;
        best_sxq = st.sxq;
        best_sqq = st.sqq;
        std::copy(trial.begin(), trial.end(), idx);
      }
    };
    consider();
    for (size_t k = 0; k < n_events; ++k) {
      const Event& e = events[k];
      const double qo = levels[trial[size_t(e.i)]], qn = levels[e.to];
      st.sxq += double(w[e.i]) * x[e.i] * (qn - qo);
      st.sqq += double(w[e.i]) * (qn * qn - qo * qo);
      trial[size_t(e.i)] = e.to;
      consider();
    }
  }
  if (best_score <= 0) {
    // Weights all zero: plain rounding with the largest |x| on the far end.
    const float end = xmax > 0 ? levels[count - 1] : levels[0];
    const float d = xmax / end;
    for (int i = 0; i < n; ++i) idx[i] = uint8_t(nearest(x[i] / d));
    return d;
  }
  return float(best_sxq / best_sqq);
}

void round_uniform(const float* x, int n, float d, float m, int nmax, uint8_t* L) {
  if (d == 0.0f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return;
  }
  const float id = 1.0f / d;
  for (int i = 0; i < n; ++i) {
    const int l = int(std::lrintf((x[i] - m) * id));
    L[i] = uint8_t(std::clamp(l, 0, nmax));
  }
}

ScaleOffset fit_scale_offset(const float* x, const float* w, int n, int nmax, uint8_t* L, bool offset_nonpositive) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  if (offset_nonpositive && mn > 0) mn = 0;
  if (!(mx > mn)) {  // a constant group: the offset holds it exactly
    for (int i = 0; i < n; ++i) L[i] = 0;
    return {0.0f, mn};
  }
  // Codes anchored at the minimum, L_i = round((x_i - mn) * u), for every u from half the
  // codes to one more than the codes over the range: a sweep over the points where a code
  // changes, with running sums, each code set scored by its least-squares (d, m). Data on
  // a grid that uses fewer than all codes is found exactly.
  struct Sums {
    double w = 0, l = 0, ll = 0, x = 0, lx = 0, xx = 0;
  } s;
  for (int i = 0; i < n; ++i) {
    s.w += w[i];
    s.x += double(w[i]) * x[i];
    s.xx += double(w[i]) * x[i] * x[i];
  }
  const double tie = 1e-10 * s.xx;  // fits equal to within rounding noise
  const float range = mx - mn;
  const float u_lo = 0.5f * float(nmax) / range, u_hi = (float(nmax) + 1.0f) / range;
  thread_local std::vector<Event> events;
  thread_local std::vector<uint8_t> trial;
  trial.resize(size_t(n));
  if (events.size() < size_t(n) * size_t(nmax + 1)) events.resize(size_t(n) * size_t(nmax + 1));
  Event* out = events.data();
  for (int i = 0; i < n; ++i) {
    const float t = x[i] - mn;
    int k = std::clamp(int(std::lrintf(t * u_lo)), 0, nmax);
    trial[size_t(i)] = uint8_t(k);
    s.l += double(w[i]) * k;
    s.ll += double(w[i]) * k * k;
    s.lx += double(w[i]) * k * x[i];
    if (t <= 0) continue;
    for (; k < nmax; ++k) {
      const float u = (float(k) + 0.5f) / t;
      if (u > u_hi) break;
      *out++ = {u, int16_t(i), uint8_t(k + 1)};
    }
  }
  std::sort(events.data(), out, [](const Event& a, const Event& b) { return a.u < b.u; });

  double best = std::numeric_limits<double>::infinity();
  ScaleOffset best_fit;
  auto consider = [&] {
    const double det = s.w * s.ll - s.l * s.l;
    if (!(det > 0)) return;
    double d = (s.w * s.lx - s.x * s.l) / det, m = (s.ll * s.x - s.l * s.lx) / det;
    if (offset_nonpositive && m > 0) {
      m = 0;
      d = s.lx / s.ll;
    }
    const double err = s.xx - 2 * d * s.lx - 2 * m * s.x + d * d * s.ll + 2 * d * m * s.l + m * m * s.w;
    // A tie goes to the larger offset (codes starting at 0), so data already on such a grid
    // keeps its offsets (K-quants need that: their offsets share one scale per super-block).
    if (err < best - tie || (err <= best + tie && m > best_fit.m)) {
      best = std::min(best, err);
      best_fit = {float(d), float(m)};
      std::copy(trial.begin(), trial.end(), L);
    }
  };
  consider();
  for (const Event* e = events.data(); e != out; ++e) {
    const double ko = trial[size_t(e->i)], kn = e->to, wi = w[e->i];
    s.l += wi * (kn - ko);
    s.ll += wi * (kn * kn - ko * ko);
    s.lx += wi * (kn - ko) * x[e->i];
    trial[size_t(e->i)] = e->to;
    consider();
  }
  if (best == std::numeric_limits<double>::infinity()) {  // weights all zero: plain min/max mapping
    const float d = range / float(nmax);
    round_uniform(x, n, d, mn, nmax, L);
    return {d, mn};
  }
  // Codes re-rounded for the fitted (d, m), refitted, while that lowers the error.
  for (int iter = 0; iter < 2 && best_fit.d > 0; ++iter) {
    round_uniform(x, n, best_fit.d, best_fit.m, nmax, trial.data());
    double sl = 0, sll = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const double l = trial[size_t(i)];
      sl += w[i] * l;
      sll += w[i] * l * l;
      slx += w[i] * l * x[i];
    }
    const double det = s.w * sll - sl * sl;
    if (!(det > 0)) break;
    double d = (s.w * slx - s.x * sl) / det, m = (sll * s.x - sl * slx) / det;
    if (offset_nonpositive && m > 0) {
      m = 0;
      d = slx / sll;
    }
    const double err = s.xx - 2 * d * slx - 2 * m * s.x + d * d * sll + 2 * d * m * sl + m * m * s.w;
    if (!(err < best - tie)) break;
    best = err;
    best_fit = {float(d), float(m)};
    std::copy(trial.begin(), trial.end(), L);
  }
  return best_fit;
}

}  // namespace lumen::quant::search
