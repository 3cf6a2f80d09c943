#include "runtime/kl_divergence.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "base/error.h"
#include "formats/temp_files.h"
#include "kernels/thread_pool.h"
#include "kv/contiguous_cache.h"

namespace lumen::runtime {

namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr int kKlRowsPerStep = 64;

int record_u16(int n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// Round half to even, as llama.cpp's nearest_int.
int nearest_int(float v) {
  float t = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &t, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// Runs one chunk (its first token replaced by BOS) and hands the logits of the scored
// positions n_ctx/2 .. n_ctx-2 to `consume(first_scored_index, rows, logits)` a step at a time.
template <class Consume>
void run_chunk(const Engine& engine, const int32_t* chunk, int n_ctx, int32_t bos, kv::ContiguousCache& cache,
               Consume&& consume) {
  const int first = n_ctx / 2;
  model::SequenceKv* caches[] = {&cache};
  std::vector<model::BatchRow> rows;
  std::vector<float> logits;
  cache.clear();
  for (int j0 = 0; j0 < n_ctx - 1; j0 += kKlRowsPerStep) {
    const int j1 = std::min(n_ctx - 1, j0 + kKlRowsPerStep);
    rows.clear();
    int scored = 0, first_scored = -1;
    for (int j = j0; j < j1; ++j) {
      const bool want = j >= first;
      if (want && first_scored < 0) first_scored = j - first;
      scored += want;
      rows.push_back({0, j, j == 0 ? bos : chunk[j], want});
    }
    engine.model().forward(rows, caches, logits);
    if (scored) consume(first_scored, scored, logits.data());
  }
}

struct Tokens {
  std::vector<int32_t> ids;
  int n_chunk = 0;
};

Tokens chunked(std::span<const int32_t> text, int32_t bos, int n_ctx, int max_chunks) {
  Tokens t;
  t.ids.push_back(bos);
  t.ids.insert(t.ids.end(), text.begin(), text.end());
  t.n_chunk = int(t.ids.size() / size_t(n_ctx));
  if (max_chunks > 0) t.n_chunk = std::min(t.n_chunk, max_chunks);
  if (t.n_chunk < 1)
    throw Error("the text holds " + std::to_string(t.ids.size()) + " tokens: less than one chunk of " + std::to_string(n_ctx));
  t.ids.resize(size_t(t.n_chunk) * size_t(n_ctx));
  return t;
}

void check_ctx(const Engine& engine, int n_ctx) {
  if (n_ctx < 4 || n_ctx > engine.spec().max_positions)
    throw Error("--ctx: " + std::to_string(n_ctx) + " is outside [4, " + std::to_string(engine.spec().max_positions) + "]");
}

std::pair<double, double> mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0.0, 0.0};
  const double f = sum / double(count);
  double df = sum2 / double(count) - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / double(count - 1)) : 0.0;
  return {f, df};
}

double covariance(double a, double b, double ab, int64_t count) {
  if (count < 10) return 0.0;
  return (ab / double(count) - (a / double(count)) * (b / double(count))) / double(count - 1);
}

double percentile(const std::vector<float>& sorted, double fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  double p = fraction * double(sorted.size() - 1);
  const size_t ip = size_t(p);
  p -= double(ip);
  return (1 - p) * sorted[ip] + p * sorted[std::min(ip + 1, sorted.size() - 1)];
}

double median(const std::vector<float>& sorted) {
  const size_t n = sorted.size();
  return n % 2 == 0 ? 0.5 * (sorted[n / 2] + sorted[n / 2 - 1]) : sorted[n / 2];
}

}  // namespace

KlBaseInfo save_kl_base(const Engine& engine, std::span<const int32_t> text_tokens, int n_ctx, int max_chunks,
                        const std::string& path, const std::function<void(int, int)>& progress) {
  check_ctx(engine, n_ctx);
  const int32_t bos = engine.spec().tokens.bos;
  const Tokens t = chunked(text_tokens, bos, n_ctx, max_chunks);
  const int V = engine.spec().vocab_size, nv = record_u16(V);
  formats::TempFile file(path);  // removed (and unregistered) unless committed
  const std::string& temp = file.temp_path();
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) throw Error("cannot write " + in_quotes(temp) + ": " + std::strerror(errno));
  struct Closer {
    std::FILE*& f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } closer{f};
  auto put = [&](const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f) != n) throw Error("cannot write " + in_quotes(temp) + ": " + std::strerror(errno));
  };
  const uint32_t ctx32 = uint32_t(n_ctx);
  const int32_t vocab32 = V, chunks32 = t.n_chunk;
  put(kMagic, 8);
  put(&ctx32, 4);
  put(&vocab32, 4);
  put(&chunks32, 4);
  put(t.ids.data(), t.ids.size() * 4);

  kv::ContiguousCache cache(engine.spec());
  std::vector<uint16_t> records;
  std::vector<double> nll;
  double nll_sum = 0;
  int64_t count = 0;
  const int first = n_ctx / 2;
  for (int c = 0; c < t.n_chunk; ++c) {
    const int32_t* chunk = t.ids.data() + size_t(c) * size_t(n_ctx);
    run_chunk(engine, chunk, n_ctx, bos, cache, [&](int i0, int rows, const float* logits) {
      records.assign(size_t(rows) * size_t(nv), 0);
      nll.assign(size_t(rows), 0.0);
      kernels::ThreadPool::global().parallel_for(rows, [&](int64_t a, int64_t b) {
        for (int64_t r = a; r < b; ++r) {
          const float* l = logits + r * V;
          float max = l[0], min = l[0];
          for (int v = 1; v < V; ++v) {
            max = std::max(max, l[v]);
            min = std::min(min, l[v]);
          }
          min = std::max(min, max - 16);
          double sum = 0;
          for (int v = 0; v < V; ++v) sum += std::exp(l[v] - max);
          const float lse = float(std::log(sum));
          const float scale = (max - min) / 65535.0f, min_log_prob = min - max - lse;
          uint16_t* rec = records.data() + r * nv;
          std::memcpy(rec, &scale, 4);
          std::memcpy(rec + 2, &min_log_prob, 4);
          if (scale != 0) {
            const float inv = 1 / scale;
            for (int v = 0; v < V; ++v) rec[4 + v] = l[v] > min ? uint16_t(nearest_int(inv * (l[v] - min))) : 0;
          }
          const int32_t next = chunk[first + i0 + r + 1];
          nll[size_t(r)] = double(max) + lse - l[next];
        }
      });
      put(records.data(), records.size() * 2);
      for (double v : nll) nll_sum += v;
      count += rows;
    });
    if (progress) progress(c + 1, t.n_chunk);
  }
  if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) throw Error("cannot write " + in_quotes(temp) + ": " + std::strerror(errno));
  const int rc = std::fclose(f);
  f = nullptr;
  if (rc != 0) throw Error("cannot write " + in_quotes(temp) + ": " + std::strerror(errno));
  file.commit();
  return {n_ctx, V, t.n_chunk, std::exp(nll_sum / double(count))};
}

KlStats kl_divergence(const Engine& engine, const std::string& base_path, int max_chunks,
                      const std::function<void(int, int)>& progress) {
  std::ifstream in(base_path, std::ios::binary);
  if (!in) throw Error(base_path + ": cannot open for reading");
  char magic[8] = {};
  in.read(magic, 8);
  if (in.gcount() != 8 || std::memcmp(magic, kMagic, 8) != 0)
    throw Error(base_path + ": not a KL-divergence base file (no '_logits_' magic)");
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0, n_chunk = 0;
  in.read(reinterpret_cast<char*>(&n_ctx), 4);
  in.read(reinterpret_cast<char*>(&n_vocab), 4);
  in.read(reinterpret_cast<char*>(&n_chunk), 4);
  if (!in || n_ctx < 4 || n_chunk < 1 || n_vocab < 1) throw Error(base_path + ": truncated or malformed header");
  if (n_vocab != engine.spec().vocab_size)
    throw Error(base_path + ": saved with a vocabulary of " + std::to_string(n_vocab) + " tokens; the model has " +
                std::to_string(engine.spec().vocab_size));
  check_ctx(engine, int(n_ctx));
  std::vector<int32_t> tokens(size_t(n_ctx) * size_t(n_chunk));
  in.read(reinterpret_cast<char*>(tokens.data()), std::streamsize(tokens.size() * 4));
  if (size_t(in.gcount()) != tokens.size() * 4) throw Error(base_path + ": truncated (tokens)");
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) throw Error(base_path + ": token id " + std::to_string(t) + " is outside the vocabulary");
  const int chunks = max_chunks > 0 ? std::min(int(n_chunk), max_chunks) : int(n_chunk);
  const int V = n_vocab, nv = record_u16(V), first = int(n_ctx) / 2;
  const int32_t bos = engine.spec().tokens.bos;

  struct Row {
    double nll, nll_base, kld;
    float p_diff;
    bool same_top;
  };
  std::vector<float> kld_values, p_diff_values;
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  int64_t n_same = 0, count = 0;
  kv::ContiguousCache cache(engine.spec());
  std::vector<uint16_t> records;
  std::vector<Row> results;
  for (int c = 0; c < chunks; ++c) {
    const int32_t* chunk = tokens.data() + size_t(c) * n_ctx;
    run_chunk(engine, chunk, int(n_ctx), bos, cache, [&](int i0, int rows, const float* logits) {
      records.resize(size_t(rows) * size_t(nv));
      in.read(reinterpret_cast<char*>(records.data()), std::streamsize(records.size() * 2));
      if (size_t(in.gcount()) != records.size() * 2)
        throw Error(base_path + ": truncated (log-probabilities of chunk " + std::to_string(c) + ")");
      results.assign(size_t(rows), Row{});
      kernels::ThreadPool::global().parallel_for(rows, [&](int64_t a, int64_t b) {
        for (int64_t r = a; r < b; ++r) {
          const float* l = logits + r * V;
          const uint16_t* rec = records.data() + r * nv;
          float scale, min_log_prob;
          std::memcpy(&scale, rec, 4);
          std::memcpy(&min_log_prob, rec + 2, 4);
          const uint16_t* q = rec + 4;
          float max = l[0];
          int imax = 0;
          for (int v = 1; v < V; ++v)
            if (l[v] > max) max = l[v], imax = v;
          double sum = 0;
          for (int v = 0; v < V; ++v) sum += std::exp(l[v] - max);
          const float lse = float(std::log(sum));
          const int32_t next = chunk[first + i0 + r + 1];
          Row& out = results[size_t(r)];
          out.nll = double(max) + lse - l[next];
          out.nll_base = -(double(scale) * q[next] + min_log_prob);
          const float log_norm = max + lse;
          double kld = 0;
          int imax_base = 0;
          float base_max = 0;
          for (int v = 0; v < V; ++v) {
            const float lp_base = scale * q[v] + min_log_prob;
            if (v == 0 || lp_base > base_max) base_max = lp_base, imax_base = v;
            if (lp_base > -16.0f) kld += std::exp(lp_base) * (lp_base - l[v] + log_norm);
          }
          out.kld = kld;
          out.same_top = imax == imax_base;
          out.p_diff = std::exp(float(-out.nll)) - std::exp(float(-out.nll_base));
        }
      });
      for (const Row& r : results) {
        sum_nll += r.nll;
        sum_nll2 += r.nll * r.nll;
        sum_nll_base += r.nll_base;
        sum_nll_base2 += r.nll_base * r.nll_base;
        sum_nll_nll_base += r.nll * r.nll_base;
        sum_kld += r.kld;
        sum_kld2 += r.kld * r.kld;
        sum_p_diff += r.p_diff;
        const double d2 = double(r.p_diff) * r.p_diff;
        sum_p_diff2 += d2;
        sum_p_diff4 += d2 * d2;
        n_same += r.same_top;
        kld_values.push_back(float(r.kld));
        p_diff_values.push_back(r.p_diff);
        ++count;
      }
    });
    if (progress) progress(c + 1, chunks);
  }

  KlStats s;
  s.n_ctx = int(n_ctx);
  s.n_chunk = chunks;
  s.count = count;
  const auto lp = mean_and_uncertainty(sum_nll, sum_nll2, count);
  const auto lb = mean_and_uncertainty(sum_nll_base, sum_nll_base2, count);
  const double cov = covariance(sum_nll, sum_nll_base, sum_nll_nll_base, count);
  s.ppl = std::exp(lp.first);
  s.ppl_unc = s.ppl * lp.second;
  s.ppl_base = std::exp(lb.first);
  s.ppl_base_unc = s.ppl_base * lb.second;
  s.log_ppl_cor = lp.second > 0 && lb.second > 0 ? cov / (lp.second * lb.second) : 0;
  s.log_ppl_ratio = lp.first - lb.first;
  s.log_ppl_ratio_unc = std::sqrt(std::max(0.0, lp.second * lp.second + lb.second * lb.second - 2 * cov));
  s.ppl_ratio = std::exp(s.log_ppl_ratio);
  s.ppl_ratio_unc = s.ppl_ratio * s.log_ppl_ratio_unc;
  s.ppl_diff = s.ppl - s.ppl_base;
  s.ppl_diff_unc = std::sqrt(std::max(0.0, s.ppl_unc * s.ppl_unc + s.ppl_base_unc * s.ppl_base_unc -
                                               2 * s.ppl * s.ppl_base * cov));
  const auto kl = mean_and_uncertainty(sum_kld, sum_kld2, count);
  s.kld = kl.first;
  s.kld_unc = kl.second;
  std::sort(kld_values.begin(), kld_values.end());
  std::sort(p_diff_values.begin(), p_diff_values.end());
  s.kld_max = kld_values.back();
  s.kld_99_9 = percentile(kld_values, 0.999);
  s.kld_99 = percentile(kld_values, 0.99);
  s.kld_95 = percentile(kld_values, 0.95);
  s.kld_90 = percentile(kld_values, 0.90);
  s.kld_median = median(kld_values);
  s.kld_10 = percentile(kld_values, 0.10);
  s.kld_5 = percentile(kld_values, 0.05);
  s.kld_1 = percentile(kld_values, 0.01);
  s.kld_0_1 = percentile(kld_values, 0.001);
  s.kld_min = kld_values.front();
  const auto dp = mean_and_uncertainty(sum_p_diff, sum_p_diff2, count);
  s.dp = dp.first;
  s.dp_unc = dp.second;
  s.dp_max = p_diff_values.back();
  s.dp_99_9 = percentile(p_diff_values, 0.999);
  s.dp_99 = percentile(p_diff_values, 0.99);
  s.dp_95 = percentile(p_diff_values, 0.95);
  s.dp_90 = percentile(p_diff_values, 0.90);
  s.dp_75 = percentile(p_diff_values, 0.75);
  s.dp_median = median(p_diff_values);
  s.dp_25 = percentile(p_diff_values, 0.25);
  s.dp_10 = percentile(p_diff_values, 0.10);
  s.dp_5 = percentile(p_diff_values, 0.05);
  s.dp_1 = percentile(p_diff_values, 0.01);
  s.dp_0_1 = percentile(p_diff_values, 0.001);
  s.dp_min = p_diff_values.front();
  const auto mse = mean_and_uncertainty(sum_p_diff2, sum_p_diff4, count);
  s.rms_dp = std::sqrt(mse.first);
  s.rms_dp_unc = s.rms_dp > 0 ? 0.5 / s.rms_dp * mse.second : 0;
  s.same_top = double(n_same) / double(count);
  s.same_top_unc = count > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / double(count - 1)) : 0;
  return s;
}

std::string kl_report(const KlStats& s) {
  std::string o;
  o += fmt::format("{} chunks of {} tokens, {} positions scored\n\n", s.n_chunk, s.n_ctx, s.count);
  o += "====== Perplexity statistics ======\n";
  o += fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl, s.ppl_unc);
  o += fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base, s.ppl_base_unc);
  o += fmt::format("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n", 100 * s.log_ppl_cor);
  o += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.log_ppl_ratio, s.log_ppl_ratio_unc);
  o += fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_ratio, s.ppl_ratio_unc);
  o += fmt::format("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n\n", s.ppl_diff, s.ppl_diff_unc);
  o += "====== KL divergence statistics ======\n";
  o += fmt::format("Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld, s.kld_unc);
  o += fmt::format("Maximum KLD: {:10.6f}\n99.9%   KLD: {:10.6f}\n99.0%   KLD: {:10.6f}\n95.0%   KLD: {:10.6f}\n", s.kld_max,
                   s.kld_99_9, s.kld_99, s.kld_95);
  o += fmt::format("90.0%   KLD: {:10.6f}\nMedian  KLD: {:10.6f}\n10.0%   KLD: {:10.6f}\n 5.0%   KLD: {:10.6f}\n", s.kld_90,
                   s.kld_median, s.kld_10, s.kld_5);
  o += fmt::format(" 1.0%   KLD: {:10.6f}\n 0.1%   KLD: {:10.6f}\nMinimum KLD: {:10.6f}\n\n", s.kld_1, s.kld_0_1, s.kld_min);
  o += "====== Token probability statistics ======\n";
  o += fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * s.dp, 100 * s.dp_unc);
  const std::pair<const char*, double> rows[] = {
      {"Maximum Δp", s.dp_max}, {"99.9%   Δp", s.dp_99_9}, {"99.0%   Δp", s.dp_99}, {"95.0%   Δp", s.dp_95},
      {"90.0%   Δp", s.dp_90},  {"75.0%   Δp", s.dp_75},   {"Median  Δp", s.dp_median}, {"25.0%   Δp", s.dp_25},
      {"10.0%   Δp", s.dp_10},  {" 5.0%   Δp", s.dp_5},    {" 1.0%   Δp", s.dp_1},  {" 0.1%   Δp", s.dp_0_1},
      {"Minimum Δp", s.dp_min}};
  for (const auto& [name, v] : rows) o += fmt::format("{}: {:6.3f}%\n", name, 100 * v);
  o += fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100 * s.rms_dp, 100 * s.rms_dp_unc);
  o += fmt::format("Same top p: {:6.3f} ± {:5.3f} %\n", 100 * s.same_top, 100 * s.same_top_unc);
  return o;
}

}  // namespace lumen::runtime
