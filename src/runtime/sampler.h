// CONTRACT (interface agreed before implementation; the text-generation work implements it).
//
// Next-token choice from one row of logits: greedy, or temperature / top-k / top-p / min-p
// sampling with penalties and logit bias, reproducible from a seed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace lumen::runtime {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax, lowest index on ties)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off (CTRL-style: logit / p if > 0 else logit * p)
  float presence_penalty = 0.0f;    // OpenAI semantics, over generated tokens
  float frequency_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;  // added to the logit before anything else
  uint64_t seed = 0;
};

// Model defaults (a generation_config.json when present; Gemma 4: 1.0 / 64 / 0.95).
SamplingParams default_sampling();
// The defaults of the model at `model_path` (a directory, or a file inside one): its
// generation_config.json (temperature, top_k, top_p, min_p, repetition_penalty; do_sample
// false = greedy) over default_sampling(). Throws lumen::Error naming the file and field.
SamplingParams default_sampling(const std::string& model_path);

// Throws lumen::Error naming the first parameter out of range (logit_bias ids are checked
// against vocab_size).
void validate(const SamplingParams& params, int32_t vocab_size);

// One token of the truncated distribution the sampler draws from.
struct TokenProb {
  int32_t id = 0;
  float prob = 0;
};

class Sampler {
 public:
  // Throws lumen::Error naming the parameter when a value is out of range.
  Sampler(const SamplingParams& params, int32_t vocab_size);
  // Chooses the next id. `logits` is modified (bias, penalties, temperature). `generated`
  // is the sequence's generated tokens so far (penalties look at these).
  int32_t sample(std::span<float> logits, std::span<const int32_t> generated);

  // The distribution sample() would draw from for these logits (after bias, penalties,
  // temperature, top-k, top-p and min-p, in that order:
  // transformers' order), best first, probabilities
  // renormalized; one id with probability 1 when greedy. Consumes no randomness.
  std::vector<TokenProb> distribution(std::span<float> logits, std::span<const int32_t> generated);

  const SamplingParams& params() const { return params_; }

 private:
  // Logit bias, then repetition / presence / frequency penalties, in place.
  void adjust(std::span<float> logits, std::span<const int32_t> generated);
  // Fills scratch_ with (unnormalized weight, id) of the tokens that may be drawn.
  void truncate(std::span<const float> logits);
  int32_t argmax_of(std::span<const float> logits) const;

  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
  std::vector<int32_t> counts_;
};

}  // namespace lumen::runtime
