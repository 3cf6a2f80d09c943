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

class Sampler {
 public:
  // Throws lumen::Error naming the parameter when a value is out of range.
  Sampler(const SamplingParams& params, int32_t vocab_size);
  // Chooses the next id. `logits` is modified (bias, penalties, temperature). `generated`
  // is the sequence's generated tokens so far (penalties look at these).
  int32_t sample(std::span<float> logits, std::span<const int32_t> generated);

 private:
  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace lumen::runtime
