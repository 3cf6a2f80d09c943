// A chunked q4 prefill (R16 tiles, per-row ops over the pool) gives the token-by-token
// (decode kernel) logits within one activation quantum's effect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "kv/contiguous_cache.h"
#include "model/gemma_model.h"
#include "model/weights.h"
#include "tiny_model.h"

using namespace lumen;

TEST(PrefillModel, ChunkedQ4PrefillEqualsTokenByTokenWithinOneActivationQuantum) {
  // Hidden 96 and FFN 200: columns not multiples of 128, rows not multiples of 16.
  spec::ModelSpec s = test_support::tiny_model_spec(64, 5, 128);
  s.hidden_size = 96;
  for (auto& l : s.layers) l.ffn_dim = 200;
  test_support::RandomCheckpoint ck(s, 5);
  model::ModelWeights w = ck.bind(s);
  model::requantize_weights(w, quant::WeightFormat::Q4_0X4);
  model::GemmaModel m(s, std::move(w));
  std::mt19937 rng(11);
  std::vector<int32_t> toks(45);
  for (auto& t : toks) t = int32_t(rng() % 64);
  const int64_t V = s.vocab_size;
  // Chunks of 16, 16 and 13 rows: the R16 tiles (T >= 8), the sliding window across chunks.
  constexpr size_t kChunk = 16;
  kv::ContiguousCache chunked_cache(s);
  model::SequenceKv* c1[] = {&chunked_cache};
  std::vector<float> chunked;
  for (size_t b = 0; b < toks.size(); b += kChunk) {
    std::vector<model::BatchRow> rows;
    for (size_t i = b; i < std::min(toks.size(), b + kChunk); ++i) rows.push_back({0, int32_t(i), toks[i], true});
    std::vector<float> out;
    m.forward(rows, c1, out);
    chunked.insert(chunked.end(), out.begin(), out.end());
  }
  // One row at a time: the decode kernel.
  kv::ContiguousCache step_cache(s);
  model::SequenceKv* c2[] = {&step_cache};
  double worst = 0, scale = 0;
  for (size_t i = 0; i < toks.size(); ++i) {
    const model::BatchRow row{0, int32_t(i), toks[i], true};
    std::vector<float> out;
    m.forward(std::span(&row, 1), c2, out);
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, double(std::fabs(out[size_t(v)] - chunked[i * size_t(V) + size_t(v)])));
      scale = std::max(scale, double(std::fabs(out[size_t(v)])));
    }
  }
  // The paths sum the same integer block products in different f32 orders; a hidden value
  // that lands within rounding of a quantization boundary then takes the neighbouring int8
  // code in the next matmul (one activation quantum, max|x|/127 of its block), which the
  // next layers carry to the logits. Measured here: 2.9e-3 of the largest logit (chunks of 4
  // rows, whose 4 x 2 tile sums each row in the decode kernel's order, stay below 1e-4). Bound:
  // 1e-2.
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-2 * scale) << "worst " << worst << " scale " << scale;
}
