// The Gemma decoder graph (Gemma 4 semantics; family differences are ModelSpec fields).
//
// Batch-first: forward() takes a batch of (sequence, position, token) rows, possibly from
// several sequences and several positions each, and returns logits only for the rows that
// ask for them. Each sequence has its own KV cache; rows of one sequence must come in
// increasing position order, and a row sees the keys of every earlier row of its sequence
// (cached or in the same batch). So prefill (many rows of one sequence), decode (one row
// per sequence) and a mix of both are the same call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_store.h"
#include "model/weights.h"
#include "spec/model_spec.h"

namespace lumen::model {

struct BatchRow {
  int32_t seq = 0;    // index into the caches span
  int32_t pos = 0;    // position within its sequence
  int32_t token = 0;  // input token id
  bool want_logits = false;
};

// How the graph computes, independent of what it computes.
struct GraphOptions {
  // The exact f32 reference path (`--exact`): every matrix product expands the weights to f32
  // and keeps the activations in f32 (kernels::matmul_exact). Default: the fast kernels.
  bool exact = false;
};

class GemmaModel {
 public:
  GemmaModel(spec::ModelSpec spec, ModelWeights weights, GraphOptions options = {});

  const spec::ModelSpec& spec() const { return spec_; }
  const ModelWeights& weights() const { return weights_; }
  const GraphOptions& options() const { return options_; }

  // Runs one step. `logits` is resized to [rows asking for logits, vocab], in batch order.
  // Throws lumen::Error for a token outside the vocabulary or a bad sequence index.
  void forward(std::span<const BatchRow> rows, std::span<SequenceKv* const> caches, std::vector<float>& logits) const;

 private:
  void attention(const spec::LayerSpec& ls, int layer, std::span<const BatchRow> rows,
                 std::span<SequenceKv* const> caches, const float* q, float* out) const;

  // y = W x on the path the options select.
  void project(const float* x, int64_t T, const quant::WeightMatrix& w, float* y) const;
  void project_shared_input(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                            std::span<float* const> ys) const;

  spec::ModelSpec spec_;
  ModelWeights weights_;
  GraphOptions options_;
  // Per layer: RoPE inverse frequencies for the rotated pairs.
  std::vector<std::vector<float>> inv_freq_;
};

// inv_freq[i] = 1 / (theta^(2i / freq_base_dim) * scaling_factor * freq_factors[i]) for the
// rotated pairs.
std::vector<float> rope_inv_freq(const spec::RopeSpec& rope, int head_dim);

}  // namespace lumen::model
