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
    j = nlohmann::json::parse(in);
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
  const float inv_t = 1.0f / params_.temperature;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  if (!(max_logit > -std::numeric_limits<float>::infinity()))
    throw Error("sampler: every token has probability 0 (all logits are -inf or NaN)");

  // Weights exp((l - max) / T) of the candidates; min-p keeps tokens whose probability is at
  // least min_p times the best one's, i.e. weight >= min_p (the best has weight 1). It does
  // not depend on the other truncations (they keep the best token), so it runs first and
  // shrinks the set the others sort.
  const float min_weight = params_.min_p;
  scratch_.clear();
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const float l = logits[size_t(id)];
    if (!(l > -std::numeric_limits<float>::infinity())) continue;  // banned (or NaN)
    const float w = std::exp((l - max_logit) * inv_t);
    if (w > 0 && w >= min_weight) scratch_.emplace_back(w, id);
  }
  if (scratch_.empty()) scratch_.emplace_back(1.0f, argmax_of(logits));

  // Top-k: the k largest, by selection rather than a full sort.
  if (params_.top_k > 0 && size_t(params_.top_k) < scratch_.size()) {
    std::nth_element(scratch_.begin(), scratch_.begin() + params_.top_k, scratch_.end(), better);
    scratch_.resize(size_t(params_.top_k));
  }

  // Top-p: the smallest best-first prefix whose mass reaches top_p. Sort only as much as
  // needed: grow a sorted prefix (64, 256, ...) until its mass is enough.
  if (params_.top_p < 1.0f) {
    double total = 0;
    for (const auto& c : scratch_) total += c.first;
    const double target = double(params_.top_p) * total;
    size_t sorted = 0, chunk = 64;
    double mass = 0;
    size_t keep = scratch_.size();
    bool done = false;
    while (!done) {
      const size_t upto = std::min(scratch_.size(), sorted + chunk);
      std::partial_sort(scratch_.begin() + int64_t(sorted), scratch_.begin() + int64_t(upto), scratch_.end(), better);
      for (size_t i = sorted; i < upto; ++i) {
        mass += scratch_[i].first;
        if (mass >= target) {
          keep = i + 1;
          done = true;
          break;
        }
      }
      sorted = upto;
      if (sorted == scratch_.size()) done = true;
      chunk *= 4;
    }
    scratch_.resize(keep);
  }
}

int32_t Sampler::argmax_of(std::span<const float> logits) const {
  // max_element returns the first maximum: the lowest index wins ties. NaN never wins.
  int32_t best = -1;
  for (int32_t id = 0; id < int32_t(logits.size()); ++id)
    if (!std::isnan(logits[size_t(id)]) && (best < 0 || logits[size_t(id)] > logits[size_t(best)])) best = id;
  if (best < 0 || logits[size_t(best)] == -std::numeric_limits<float>::infinity())
    throw Error("sampler: every token has probability 0 (all logits are -inf or NaN)");
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
