// A small in-memory Gemma model (random f32 weights from a seed) for runtime tests that need
// a real forward pass but no files: one sliding layer and one full K=V layer.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gemma_model.h"
#include "model/weights.h"
#include "spec/model_spec.h"

namespace lumen::test_support {

inline spec::ModelSpec tiny_model_spec(int vocab = 32, int window = 3, int max_positions = 64) {
  spec::ModelSpec s;
  s.vocab_size = vocab;
  s.hidden_size = 16;
  s.max_positions = max_positions;
  s.rms_eps = 1e-6f;
  s.embedding_scale = 4.0f;
  s.final_logit_softcap = 30.0f;
  for (int l = 0; l < 2; ++l) {
    spec::LayerSpec ls;
    ls.kind = l == 0 ? spec::AttentionKind::Sliding : spec::AttentionKind::Full;
    ls.num_q_heads = 2;
    ls.num_kv_heads = l == 0 ? 2 : 1;
    ls.head_dim = l == 0 ? 8 : 16;
    ls.window = l == 0 ? window : 0;
    ls.k_eq_v = l == 1;
    ls.ffn_dim = 24;
    ls.rope.theta = l == 0 ? 10000 : 1e6;
    ls.rope.type = l == 0 ? "default" : "proportional";
    ls.rope.partial_factor = l == 0 ? 1.0 : 0.25;
    ls.rope.freq_base_dim = ls.head_dim;
    s.layers.push_back(ls);
  }
  return s;
}

// Owns the weights' bytes; the model it builds points into them, so keep it alive.
class TinyModel {
 public:
  explicit TinyModel(spec::ModelSpec s, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> gain(0.5f, 1.5f), small(0.1f, 0.4f), scalar(0.3f, 0.9f);
    for (const auto& e : spec::expected_tensors(s)) {
      int64_t n = 1;
      for (auto d : e.shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      const bool qk_norm = e.name.find("q_norm") != std::string::npos || e.name.find("k_norm") != std::string::npos;
      for (auto& x : v) {
        if (e.name.find("layer_scalar") != std::string::npos) x = scalar(rng);
        else if (qk_norm) x = small(rng);
        else if (e.name.find("norm") != std::string::npos) x = gain(rng);
        else x = nd(rng) / std::sqrt(float(e.shape.back()));
      }
      const std::string name = "model." + e.name;
      data_[name] = std::move(v);
      formats::TensorView t;
      t.name = name;
      t.dtype = DType::F32;
      t.shape = e.shape;
      t.data = reinterpret_cast<const std::byte*>(data_[name].data());
      t.nbytes = data_[name].size() * 4;
      t.file = "tiny.safetensors";
      views_[name] = t;
    }
    std::vector<std::string> names;
    for (const auto& [k, v] : views_) names.push_back(k);
    auto weights = model::bind_weights(
        s, [this](const std::string& n) { auto it = views_.find(n); return it == views_.end() ? nullptr : &it->second; },
        names, "tiny");
    model_ = std::make_unique<model::GemmaModel>(std::move(s), std::move(weights));
  }
  const model::GemmaModel& model() const { return *model_; }

 private:
  std::map<std::string, std::vector<float>> data_;
  std::map<std::string, formats::TensorView> views_;
  std::unique_ptr<model::GemmaModel> model_;
};

}  // namespace lumen::test_support
