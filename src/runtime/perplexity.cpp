#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "kv/contiguous_cache.h"

namespace lumen::runtime {

namespace {
// Rows per forward step: bounds the logits buffer (rows x vocab floats; 64 MiB for a
// 262144-token vocabulary) whatever ctx is.
constexpr size_t kPerplexityRowsPerStep = 64;
}  // namespace

PerplexityResult perplexity(const Engine& engine, std::span<const int32_t> tokens, int ctx, int32_t bos,
                            const std::function<void(int, int, double)>& progress) {
  const spec::ModelSpec& spec = engine.spec();
  if (ctx < 2) throw Error("--ctx: must be at least 2, got " + std::to_string(ctx));
  if (ctx > spec.max_positions)
    throw Error("--ctx: " + std::to_string(ctx) + " exceeds the model's " + std::to_string(spec.max_positions) +
                " positions");
  if (tokens.empty()) throw Error("no tokens to score");
  if (bos < 0 || bos >= spec.vocab_size) throw Error("the model has no BOS token to start each chunk with");

  const int64_t V = spec.vocab_size;
  const size_t per_chunk = size_t(ctx - 1);
  const int total = int((tokens.size() + per_chunk - 1) / per_chunk);
  PerplexityResult result;
  result.ctx = ctx;
  double nll = 0;
  kv::ContiguousCache cache(spec);
  model::SequenceKv* caches[] = {&cache};
  std::vector<model::BatchRow> rows;
  std::vector<float> logits;
  for (size_t start = 0; start < tokens.size(); start += per_chunk) {
    const size_t end = std::min(tokens.size(), start + per_chunk);
    // Input j is the BOS (j = 0) or text token start + j - 1; it predicts text token start + j.
    std::vector<int32_t> input{bos};
    input.insert(input.end(), tokens.begin() + int64_t(start), tokens.begin() + int64_t(end) - 1);
    cache.clear();
    for (size_t j0 = 0; j0 < input.size(); j0 += kPerplexityRowsPerStep) {
      const size_t j1 = std::min(input.size(), j0 + kPerplexityRowsPerStep);
      rows.clear();
      for (size_t j = j0; j < j1; ++j) rows.push_back({0, int32_t(j), input[j], true});
      engine.model().forward(rows, caches, logits);
      for (size_t j = j0; j < j1; ++j) {
        const float* row = logits.data() + int64_t(j - j0) * V;
        const float max = *std::max_element(row, row + V);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - double(max));
        const int32_t target = tokens[start + j];
        nll += std::log(sum) + double(max) - double(row[target]);
      }
    }
    result.scored += int64_t(end - start);
    ++result.chunks;
    if (progress) progress(result.chunks, total, nll / double(result.scored));
  }
  result.mean_nll = nll / double(result.scored);
  result.ppl = std::exp(result.mean_nll);
  return result;
}

}  // namespace lumen::runtime
