#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"

namespace lumen::runtime {

namespace {

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Orders candidates best first; the lowest id wins ties so truncation is deterministic.
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

SamplingParams default_sampling() {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 64;
  p.top_p = 0.95f;
  return p;
}

SamplingParams default_sampling(const std::string& model_path) {
  namespace fs = std::filesystem;
  SamplingParams p = default_sampling();
  std::error_code ec;
  const fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  const fs::path file = dir / "generation_config.json";
  if (!fs::is_regular_file(file, ec)) return p;
  const std::string where = file.string();
  std::ifstream in(file);
  nlohmann::json j;
  try {
    j = parse_json(in);
  } catch (const std::exception&) {
    throw Error(where + ": not valid JSON");
  }
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  auto read_float = [&](const char* key, float& out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) throw Error(where + ": field '" + key + "' is not a number");
    out = j[key].get<float>();
  };
  read_float("temperature", p.temperature);
  read_float("top_p", p.top_p);
  read_float("min_p", p.min_p);
  read_float("repetition_penalty", p.repetition_penalty);
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    if (!j["top_k"].is_number_integer()) throw Error(where + ": field 'top_k' is not an integer");
    p.top_k = j["top_k"].get<int>();
  }
  // transformers: do_sample false means greedy whatever the other fields say.
  if (j.contains("do_sample") && j["do_sample"].is_boolean() && !j["do_sample"].get<bool>()) p.temperature = 0.0f;
  try {
    validate(p, std::numeric_limits<int32_t>::max());
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return p;
}

void validate(const SamplingParams& p, int32_t vocab_size) {
  auto bad = [](const std::string& name, double v, const char* want) {
    throw Error("sampling parameter " + name + " = " + number(v) + " is out of range (" + want + ")");
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0) bad("temperature", p.temperature, "expected >= 0");
  if (p.top_k < 0) bad("top_k", p.top_k, "expected >= 0; 0 = off");
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("top_p", p.top_p, "expected 0 < top_p <= 1");
  if (!(p.min_p >= 0 && p.min_p <= 1)) bad("min_p", p.min_p, "expected 0 <= min_p <= 1");
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    bad("repetition_penalty", p.repetition_penalty, "expected > 0; 1 = off");
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    bad("presence_penalty", p.presence_penalty, "expected -2 .. 2");
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    bad("frequency_penalty", p.frequency_penalty, "expected -2 .. 2");
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab_size)
      throw Error("sampling parameter logit_bias: token " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(vocab_size - 1) + ")");
    // -inf bans a token; NaN or +inf would make every probability undefined.
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      throw Error("sampling parameter logit_bias: token " + std::to_string(id) + " has bias " + number(bias) +
                  " (expected a finite number or -inf)");
  }
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(params.seed) {
  if (vocab_size <= 0) throw Error("sampler: vocabulary size " + std::to_string(vocab_size) + " must be positive");
  validate(params_, vocab_size);
}

void Sampler::adjust(std::span<float> logits, std::span<const int32_t> generated) {
  if (int64_t(logits.size()) != vocab_size_)
    throw Error("sampler: got " + std::to_string(logits.size()) + " logits for a vocabulary of " +
                std::to_string(vocab_size_));
  for (const auto& [id, bias] : params_.logit_bias) logits[size_t(id)] += bias;

  const bool repetition = params_.repetition_penalty != 1.0f;
  const bool additive = params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  if (generated.empty() || (!repetition && !additive)) return;
  // Count each generated id once per distinct value: sort a copy, walk the runs.
  counts_.assign(generated.begin(), generated.end());
  std::sort(counts_.begin(), counts_.end());
  for (size_t i = 0; i < counts_.size();) {
    size_t j = i;
    while (j < counts_.size() && counts_[j] == counts_[i]) ++j;
    const int32_t id = counts_[i];
    if (id >= 0 && id < vocab_size_) {
      float& l = logits[size_t(id)];
      if (repetition) l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      l -= params_.presence_penalty + params_.frequency_penalty * float(j - i);
    }
    i = j;
  }
}

void Sampler::truncate(std::span<const float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  scratch_.clear();
  if (params_.top_k > 0 && params_.top_k < vocab_size_) {
    // Top-k in one pass over the logits: a heap of the k best seen so far, worst on top.
    // Ids arrive in increasing order, so a newcomer equal to the worst loses the tie.
    const size_t k = size_t(params_.top_k);
    for (int32_t id = 0; id < vocab_size_; ++id) {
      const float l = logits[size_t(id)];
      if (!(l > kNegInf)) continue;  // banned (or NaN)
      if (scratch_.size() < k) {
        scratch_.emplace_back(l, id);
        std::push_heap(scratch_.begin(), scratch_.end(), better);
      } else if (l > scratch_.front().first) {
        std::pop_heap(scratch_.begin(), scratch_.end(), better);
        scratch_.back() = {l, id};
        std::push_heap(scratch_.begin(), scratch_.end(), better);
      }
    }
  } else {
    for (int32_t id = 0; id < vocab_size_; ++id) {
      const float l = logits[size_t(id)];
      if (l > kNegInf) scratch_.emplace_back(l, id);
    }
  }
  if (scratch_.empty()) throw Error("sampler: every token has probability 0 (all logits are -inf or NaN)");

  // Logits -> weights exp((l - max) / T): the best token has weight 1. A weight that
  // underflows to 0 carries no probability mass.
  float max_logit = kNegInf;
  for (const auto& c : scratch_) max_logit = std::max(max_logit, c.first);
  const float inv_t = 1.0f / params_.temperature;
  for (auto& c : scratch_) c.first = std::exp((c.first - max_logit) * inv_t);
  std::erase_if(scratch_, [](const std::pair<float, int32_t>& c) { return !(c.first > 0); });

  // Top-p: the smallest best-first prefix whose mass reaches top_p of the total. Found by
  // selection on mass (halve the range with nth_element, keep the half the boundary is in):
  // linear time, no sort.
  if (params_.top_p < 1.0f && scratch_.size() > 1) {
    double total = 0;
    for (const auto& c : scratch_) total += c.first;
    const double target = double(params_.top_p) * total;
    // Tokens lighter than (total - target) / n can all be dropped first: together they weigh
    // less than total - target, so the rest weighs more than the target and holds the whole
    // kept prefix. With real logits that is most of the vocabulary.
    const double light = (total - target) / double(scratch_.size());
    std::erase_if(scratch_, [&](const std::pair<float, int32_t>& c) { return double(c.first) < light; });
    size_t lo = 0, hi = scratch_.size();
    double below = 0;  // mass of [0, lo): all kept, and < target
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(scratch_.begin() + int64_t(lo), scratch_.begin() + int64_t(mid),
                       scratch_.begin() + int64_t(hi), better);
      double mass = 0;
      for (size_t i = lo; i < mid; ++i) mass += scratch_[i].first;
      if (below + mass >= target) {
        hi = mid;
      } else {
        below += mass;
        lo = mid;
      }
    }
    // [lo, hi) is the single best token left; mass[0, lo) < target <= mass[0, lo + 1).
    scratch_.resize(lo + 1);
  }

  // Min-p last, as transformers orders it: keep tokens at least min_p times as likely as
  // the best one (weight >= min_p). The best token survives every step above.
  if (params_.min_p > 0.0f) {
    const float min_weight = params_.min_p;
    std::erase_if(scratch_, [&](const std::pair<float, int32_t>& c) { return c.first < min_weight; });
  }
}

int32_t Sampler::argmax_of(std::span<const float> logits) const {
  // The first maximum: the lowest index wins ties. NaN never compares greater.
  int32_t best = -1;
  float best_logit = -std::numeric_limits<float>::infinity();
  for (int32_t id = 0; id < int32_t(logits.size()); ++id)
    if (logits[size_t(id)] > best_logit) {
      best_logit = logits[size_t(id)];
      best = id;
    }
  if (best < 0) throw Error("sampler: every token has probability 0 (all logits are -inf or NaN)");
  return best;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> generated) {
  adjust(logits, generated);
  if (params_.temperature == 0.0f) return argmax_of(logits);
  truncate(logits);
  double total = 0;
  for (const auto& c : scratch_) total += c.first;
  // 53 random bits -> a double in [0, 1): the same stream on every platform, unlike
  // std::uniform_real_distribution.
  const double u = double(rng_() >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (const auto& c : scratch_) {
    acc += c.first;
    if (u < acc) return c.second;
  }
  return scratch_.back().second;  // rounding left u at the very top
}

std::vector<TokenProb> Sampler::distribution(std::span<float> logits, std::span<const int32_t> generated) {
  adjust(logits, generated);
  std::vector<TokenProb> out;
  if (params_.temperature == 0.0f) {
    out.push_back({argmax_of(logits), 1.0f});
    return out;
  }
  truncate(logits);
  double total = 0;
  for (const auto& c : scratch_) total += c.first;
  for (const auto& c : scratch_) out.push_back({c.second, float(c.first / total)});
  std::sort(out.begin(), out.end(), [](const TokenProb& a, const TokenProb& b) {
    return a.prob > b.prob || (a.prob == b.prob && a.id < b.id);
  });
  return out;
}

}  // namespace lumen::runtime
