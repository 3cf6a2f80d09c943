// Perplexity of a model over a token sequence.
//
// The text's tokens are cut into chunks of ctx - 1; each chunk is scored after a BOS token:
// every token of the chunk is predicted from the BOS and the chunk's earlier tokens (so no
// token is predicted from nothing, and none sees more than ctx - 1 tokens of context).
// ppl = exp(mean over all scored tokens of -log p(token)). Log-softmax is taken in double.
// tools/reference_gemma3_gguf.py computes the same figure with transformers.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "runtime/engine.h"

namespace lumen::runtime {

struct PerplexityResult {
  int64_t scored = 0;  // tokens scored
  int chunks = 0;
  int ctx = 0;
  double mean_nll = 0;  // nats per token
  double ppl = 0;
};

// `progress(chunks_done, chunks_total, mean_nll_so_far)` is called after each chunk.
// Throws lumen::Error when ctx < 2, ctx exceeds the model's positions, or tokens is empty.
PerplexityResult perplexity(const Engine& engine, std::span<const int32_t> tokens, int ctx, int32_t bos,
                            const std::function<void(int, int, double)>& progress = {});

}  // namespace lumen::runtime
