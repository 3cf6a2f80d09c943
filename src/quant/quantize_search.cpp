#include "quant/quantize_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace lumen::quant::search {

namespace {

// Below this largest |x| a group is treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kZeroGroup = 1e-15f;

// A code change: element i moves to level `to` at u (= 1/|d|, positive). Packed in one
// integer ordered by u (a positive float's bits order as the float does), so sorting
// events is sorting integers.
using Event = uint64_t;
inline Event make_event(float u, int i, int to) {
  uint32_t bits;
  std::memcpy(&bits, &u, 4);
  return (uint64_t(bits) << 32) | (uint64_t(uint32_t(i)) << 8) | uint64_t(uint8_t(to));
}
inline int event_index(Event e) { return int((e >> 8) & 0xFFFFFF); }
inline int event_level(Event e) { return int(e & 0xFF); }

// Sorts events whose u lies in [lo, hi]: a counting pass into buckets by u, then insertion
// sort, which is linear for the few events per bucket a sweep has.
void sort_events(Event* begin, Event* end, float lo, float hi) {
  const size_t n = size_t(end - begin);
  if (n < 32) {
    std::sort(begin, end);
    return;
  }
  thread_local std::vector<Event> tmp;
  thread_local std::vector<uint32_t> start;
  const size_t nb = n;
  tmp.resize(n);
  start.assign(nb + 1, 0);
  const float scale = float(nb) / std::max(hi - lo, 1e-30f);
  auto bucket = [&](Event e) {
    float u;
    const uint32_t bits = uint32_t(e >> 32);
    std::memcpy(&u, &bits, 4);
    return std::min(nb - 1, size_t(std::max(0.0f, (u - lo) * scale)));
  };
  for (Event* e = begin; e != end; ++e) ++start[bucket(*e) + 1];
  for (size_t b = 0; b < nb; ++b) start[b + 1] += start[b];
  for (Event* e = begin; e != end; ++e) tmp[start[bucket(*e)]++] = *e;
  // Buckets are in order; finish with an insertion sort (each element moves only within
  // its bucket).
  for (size_t k = 1; k < n; ++k) {
    const Event v = tmp[k];
    size_t j = k;
    for (; j > 0 && tmp[j - 1] > v; --j) tmp[j] = tmp[j - 1];
    tmp[j] = v;
  }
  std::copy(tmp.begin(), tmp.end(), begin);
}

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
      *out++ = make_event(u, i, next);
    }
  }
  const size_t count = size_t(out - events.data());
  sort_events(events.data(), out, u_lo, u_hi);
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
  thread_local std::vector<float> wx;
  trial.resize(size_t(n));
  wx.resize(size_t(n));
  for (int i = 0; i < n; ++i) wx[size_t(i)] = w[i] * x[i];
  // The best state: its sums, the sign pass and the number of events applied.
  bool found = false;
  double best_sxq = 0, best_sqq = 1, chosen_sxq = 0, chosen_sqq = 1;
  float best_s = 0, best_lo = 0, best_hi = 0;
  size_t best_k = 0;
  // A table symmetric but for one more level below (-8..7) needs only the sign of d that
  // puts the largest |x| on its low end: the window then covers the other mapping too.
  const bool one_sign = nearest.uniform && levels[0] == -levels[count - 1] - 1 && window_low >= 1;
  float last_s = 0;
  for (float s : {1.0f, -1.0f}) {
    if (one_sign && s * xmax > 0) continue;
    // The end of the table the largest |x| lands on for this sign of d.
    const float end = s * xmax > 0 ? levels[count - 1] : -levels[0];
    if (end <= 0) continue;
    const float u_lo = std::max(0.5f * end, end - window_low) / amax;
    const float u_hi = (end + window_high) / amax;
    SweepState st;
    const size_t n_events = start_sweep(x, w, n, nearest, s, u_lo, u_hi, trial.data(), events, st);
    last_s = s;
    // Each state is the code set of an interval of u; its least-squares scale reduces the
    // error by sxq^2 / sqq. Keep the best state seen (compared without dividing).
    auto consider = [&](size_t k) {
      if (st.sqq <= 0) return;
      // Near-ties (within 1e-6 of the best score: float noise of fitted values) go to the later state, i.e. the
      // finer grid: data on a grid is then read back with its own scale, not a multiple.
      const double lhs = st.sxq * st.sxq * best_sqq, rhs = best_sxq * best_sxq * st.sqq;
      if (!found || lhs >= rhs * (1 - 1e-6)) {
        if (!found || lhs > rhs) {
          best_sxq = st.sxq;
          best_sqq = st.sqq;
        }
        found = true;
        chosen_sxq = st.sxq;
        chosen_sqq = st.sqq;
        best_s = s;
        best_lo = u_lo;
        best_hi = u_hi;
        best_k = k;
      }
    };
    consider(0);
    for (size_t k = 0; k < n_events; ++k) {
      const int i = event_index(events[k]), to = event_level(events[k]);
      const double qo = levels[trial[size_t(i)]], qn = levels[to];
      st.sxq += double(wx[size_t(i)]) * (qn - qo);
      st.sqq += double(w[i]) * (qn * qn - qo * qo);
      trial[size_t(i)] = uint8_t(to);
      consider(k + 1);
    }
  }
  if (found && chosen_sxq != 0) {
    // Replay the best pass up to its state (its events are still there if it was the last).
    SweepState st;
    if (best_s == last_s) {
      for (int i = 0; i < n; ++i) idx[i] = uint8_t(nearest(best_s * best_lo * x[i]));
    } else {
      start_sweep(x, w, n, nearest, best_s, best_lo, best_hi, idx, events, st);
    }
    for (size_t k = 0; k < best_k; ++k) idx[event_index(events[k])] = uint8_t(event_level(events[k]));
    return float(chosen_sxq / chosen_sqq);
  }
  // Weights all zero: plain rounding with the largest |x| on the far end.
  const float end = xmax > 0 ? levels[count - 1] : levels[0];
  const float d = xmax / end;
  for (int i = 0; i < n; ++i) idx[i] = uint8_t(nearest(x[i] / d));
  return d;
}

void round_uniform(const float* x, int n, float d, float m, int nmax, uint8_t* L) {
  if (d == 0.0f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return;
  }
  const float id = 1.0f / d;
  for (int i = 0; i < n; ++i) {
    const int l = round_int((x[i] - m) * id);
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
  // Codes anchored at the minimum, L_i = round((x_i - mn) * u), for every u from 0.7 of the
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
  const float u_lo = 0.7f * float(nmax) / range, u_hi = (float(nmax) + 1.0f) / range;
  thread_local std::vector<Event> events;
  thread_local std::vector<uint8_t> trial;
  trial.resize(size_t(n));
  if (events.size() < size_t(n) * size_t(nmax + 1)) events.resize(size_t(n) * size_t(nmax + 1));
  Event* out = events.data();
  for (int i = 0; i < n; ++i) {
    const float t = x[i] - mn;
    int k = std::clamp(round_int(t * u_lo), 0, nmax);
    trial[size_t(i)] = uint8_t(k);
    s.l += double(w[i]) * k;
    s.ll += double(w[i]) * k * k;
    s.lx += double(w[i]) * k * x[i];
    if (t <= 0) continue;
    for (; k < nmax; ++k) {
      const float u = (float(k) + 0.5f) / t;
      if (u > u_hi) break;
      *out++ = make_event(u, i, k + 1);
    }
  }
  sort_events(events.data(), out, u_lo, u_hi);

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
    const int i = event_index(*e), to = event_level(*e);
    const double ko = trial[size_t(i)], kn = to, wi = w[i];
    s.l += wi * (kn - ko);
    s.ll += wi * (kn * kn - ko * ko);
    s.lx += wi * (kn - ko) * x[i];
    trial[size_t(i)] = uint8_t(to);
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
