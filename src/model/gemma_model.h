// The Gemma decoder graph (Gemma 4 semantics; family differences are ModelSpec fields).
//
// Batch-first: forward() takes a batch of (sequence, position, token) rows, possibly from
// several sequences and several positions each, and returns logits only for the rows that
// ask for them. Each sequence has its own KV cache; rows of one sequence must come in
// increasing position order, and a row sees the keys of every earlier row of its sequence
// (cached or in the same batch). So prefill (many rows of one sequence), decode (one row
// per sequence) and a mix of both are the same call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/kv_store.h"
#include "model/per_layer_inputs.h"
#include "model/weights.h"
#include "spec/model_spec.h"

namespace lumen::model {

struct BatchRow {
  int32_t seq = 0;    // index into the caches span
  int32_t pos = 0;    // position within its sequence
  int32_t token = 0;  // input token id
  bool want_logits = false;
};

// The weight matrices of a layer, as an activation observer names them.
enum class MatrixRole : uint8_t { Q, K, V, O, Gate, Up, Down };

// Sees the input of each matrix product of a forward step: the rows an imatrix is built from
// (runtime/imatrix.h). Called on the thread that runs forward(), in layer order.
class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  // `rows` rows of `cols` inputs to matrix `role` of layer `layer`. Must not throw.
  virtual void observe(int layer, MatrixRole role, const float* x, int64_t rows, int64_t cols) noexcept = 0;
};

// Bytes of expert matrices the forwards read (each selected expert's matrices once per step).
struct ExpertCounters {
  uint64_t bytes = 0;       // expert matrix bytes read
  uint64_t selections = 0;  // (row, expert) pairs routed
  uint64_t rows = 0;        // rows that went through a MoE block (per layer)
};

class GemmaModel {
 public:
  GemmaModel(spec::ModelSpec spec, ModelWeights weights);
  ~GemmaModel();

  const spec::ModelSpec& spec() const { return spec_; }
  const ModelWeights& weights() const { return weights_; }

  // Runs one step. `logits` is resized to [rows asking for logits, vocab], in batch order.
  // Throws lumen::Error for a token outside the vocabulary or a bad sequence index.
  // `observer`, when given, sees every layer matrix's input rows.
  void forward(std::span<const BatchRow> rows, std::span<SequenceKv* const> caches, std::vector<float>& logits,
               ActivationObserver* observer = nullptr) const;

  // Per-layer inputs (models with them; nullptr otherwise): their cache settings, statistics,
  // and the hint of tokens that come next (a prompt's next chunk), whose table rows a helper
  // thread may fetch while the current step computes.
  PerLayerInputs* per_layer_inputs() const { return per_layer_inputs_.get(); }
  void hint_next_tokens(std::span<const int32_t> tokens) const {
    if (per_layer_inputs_) per_layer_inputs_->hint(tokens);
  }
  ExpertCounters expert_counters() const;
  void reset_expert_counters() const;

 private:
  void attention(const spec::LayerSpec& ls, int layer, std::span<const BatchRow> rows,
                 std::span<SequenceKv* const> caches, const float* q, float* out) const;
  // The MoE block of a layer: out[t] = sum over the top-k experts of w * expert(norm_2(x[t])).
  void experts(const spec::LayerSpec& ls, const LayerWeights& lw, const float* x, int64_t T, float* out) const;

  spec::ModelSpec spec_;
  ModelWeights weights_;
  // Per layer: RoPE inverse frequencies for the rotated pairs.
  std::vector<std::vector<float>> inv_freq_;
  std::unique_ptr<PerLayerInputs> per_layer_inputs_;
  mutable std::atomic<uint64_t> expert_bytes_{0}, expert_selections_{0}, expert_rows_{0};
};

// inv_freq[i] = 1 / (theta^(2i / freq_base_dim) * scaling_factor * freq_factors[i]) for the
// rotated pairs.
std::vector<float> rope_inv_freq(const spec::RopeSpec& rope, int head_dim);

}  // namespace lumen::model
