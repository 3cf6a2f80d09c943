// The attention step of one layer for a batch of rows over their sequences' KV caches
// (whose rows for this batch are already stored): flash attention on per-head tiles the
// cache converts from its storage precision, GQA/MQA without copying KV per query head,
// the sliding window from positions, split-KV for decode. Separate from GemmaModel so
// benchmarks and tests can drive it with random queries.
#pragma once

#include <span>

#include "model/gemma_model.h"
#include "model/kv_store.h"
#include "spec/model_spec.h"

namespace lumen::model {

// q: [rows, num_q_heads, head_dim] after norm and RoPE; out: the same shape. `scale`
// multiplies q.k; softcap > 0 caps the scores. `layer` is the cache layer read (a KV-shared
// layer reads its source's). Afterwards, with `release_window`, sliding layers tell each cache
// which positions their window has left (SequenceKv::release_before); a caller whose later
// layers still read this cache layer passes false and releases itself.
void attend(const spec::LayerSpec& ls, float scale, float softcap, int layer, std::span<const BatchRow> rows,
            std::span<SequenceKv* const> caches, const float* q, float* out, bool release_window = true);

}  // namespace lumen::model
