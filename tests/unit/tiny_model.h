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

// Two layers: a sliding one (2 KV heads x 8) and a full one (1 KV head x 16, K=V unless
// `k_eq_v_full` is false), as Gemma 4 mixes them.
inline spec::ModelSpec tiny_model_spec(int vocab = 32, int window = 3, int max_positions = 64, bool k_eq_v_full = true) {
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
    ls.k_eq_v = l == 1 && k_eq_v_full;
    ls.ffn_dim = 24;
    ls.rope.theta = l == 0 ? 10000 : 1e6;
    ls.rope.type = l == 0 ? "default" : "proportional";
    ls.rope.partial_factor = l == 0 ? 1.0 : 0.25;
    ls.rope.freq_base_dim = ls.head_dim;
    s.layers.push_back(ls);
  }
  return s;
}

// Where the random weights are drawn from: norm gains, q/k norm gains (times qk_scale: a
// larger gain sharpens attention), layer scalars; matrices are N(0, 1/cols).
struct RandomWeightRanges {
  float gain_lo = 0.5f, gain_hi = 1.5f;
  float qk_lo = 0.1f, qk_hi = 0.4f, qk_scale = 1.0f;
  float scalar_lo = 0.3f, scalar_hi = 0.9f;
};

// Random f32 tensors for every tensor a spec expects, held in memory as a checkpoint would
// be. Views point into `data`: after copying a RandomCheckpoint, re-point the copy's views.
struct RandomCheckpoint {
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, formats::TensorView> views;
  std::string file;

  explicit RandomCheckpoint(const spec::ModelSpec& s, uint32_t seed = 1, RandomWeightRanges r = {},
                            std::string file_name = "random.safetensors")
      : file(std::move(file_name)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> gain(r.gain_lo, r.gain_hi), qk(r.qk_lo, r.qk_hi),
        scalar(r.scalar_lo, r.scalar_hi);
    for (const auto& e : spec::expected_tensors(s)) {
      int64_t n = 1;
      for (auto d : e.shape) n *= d;
      std::vector<float> v(static_cast<size_t>(n));
      const bool qk_norm = e.name.find("q_norm") != std::string::npos || e.name.find("k_norm") != std::string::npos;
      for (auto& x : v) {
        if (e.name.find("layer_scalar") != std::string::npos) x = scalar(rng);
        else if (qk_norm) x = r.qk_scale == 1.0f ? qk(rng) : qk(rng) * r.qk_scale;
        else if (e.name.find("norm") != std::string::npos) x = gain(rng);
        else x = nd(rng) / std::sqrt(float(e.shape.back()));
      }
      add("model." + e.name, e.shape, std::move(v));
    }
  }

  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    data[name] = std::move(v);
    formats::TensorView t;
    t.name = name;
    t.dtype = DType::F32;
    t.shape = std::move(shape);
    t.data = reinterpret_cast<const std::byte*>(data[name].data());
    t.nbytes = data[name].size() * 4;
    t.file = file;
    views[name] = t;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (auto& [k, v] : views) n.push_back(k);
    return n;
  }

  model::ModelWeights bind(const spec::ModelSpec& s, const std::string& source = "random") const {
    return model::bind_weights(
        s, [this](const std::string& n) { auto it = views.find(n); return it == views.end() ? nullptr : &it->second; },
        names(), source);
  }
};

// A model over a RandomCheckpoint, which it keeps alive (the weights point into it).
class TinyModel {
 public:
  explicit TinyModel(spec::ModelSpec s, uint32_t seed = 1)
      : checkpoint_(s, seed, {}, "tiny.safetensors"),
        model_(std::make_unique<model::GemmaModel>(s, checkpoint_.bind(s, "tiny"))) {}
  const model::GemmaModel& model() const { return *model_; }

 private:
  RandomCheckpoint checkpoint_;
  std::unique_ptr<model::GemmaModel> model_;
};

}  // namespace lumen::test_support
