#include <cmath>
#include <sstream>

#include "base/error.h"
#include "spec/model_spec.h"

namespace lumen::spec {
namespace {

const std::string kArch = "runtime.architecture.";

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

std::vector<std::string> check_manifest_matches_weights(const ModelSpec& m, const ModelSpec& w) {
  auto mismatch = [&](const std::string& field, const std::string& manifest_value, const std::string& weights_value) {
    throw Error(m.source + ": " + field + " " + manifest_value + " does not match the weights' " + weights_value + " (" +
                w.source + ")");
  };
  if (m.family != w.family) mismatch("runtime.modelType", "'" + m.model_type + "' (" + m.family + ")", "model family " + w.family);
  if (m.num_layers() != w.num_layers())
    mismatch(kArch + "numLayers", std::to_string(m.num_layers()), std::to_string(w.num_layers()) + " layers");
  if (m.vocab_size != w.vocab_size) mismatch(kArch + "vocabSize", std::to_string(m.vocab_size), "vocabulary of " + std::to_string(w.vocab_size));
  if (m.hidden_size != w.hidden_size) mismatch(kArch + "hiddenSize", std::to_string(m.hidden_size), "hidden size " + std::to_string(w.hidden_size));
  if (m.tie_embeddings != w.tie_embeddings)
    mismatch("runtime.manifestInference.output.tieWordEmbeddings", m.tie_embeddings ? "true" : "false",
             w.tie_embeddings ? "tied embeddings" : "separate lm_head");
  if (m.per_layer_input_dim != w.per_layer_input_dim)
    mismatch(kArch + "hiddenSizePerLayerInput", std::to_string(m.per_layer_input_dim),
             w.per_layer_input_dim ? "per-layer inputs of width " + std::to_string(w.per_layer_input_dim)
                                   : std::string("model without per-layer inputs"));
  if (m.per_layer_vocab != w.per_layer_vocab)
    mismatch(kArch + "vocabSizePerLayerInput", std::to_string(m.per_layer_vocab),
             "per-layer input table of " + std::to_string(w.per_layer_vocab) + " rows");
  if (m.first_kv_shared_layer() != w.first_kv_shared_layer())
    mismatch(kArch + "numKvSharedLayers", std::to_string(m.num_layers() - m.first_kv_shared_layer()),
             std::to_string(w.num_layers() - w.first_kv_shared_layer()) + " KV-shared layers");
  std::vector<std::string> notes;
  for (int i = 0; i < m.num_layers(); ++i) {
    const LayerSpec& a = m.layers[size_t(i)];
    const LayerSpec& b = w.layers[size_t(i)];
    const std::string layer = "layer " + std::to_string(i);
    const bool full = a.kind == AttentionKind::Full;
    if (a.kind != b.kind)
      mismatch("runtime.manifestInference.layerPattern.layerTypes[" + std::to_string(i) + "]",
               full ? "full_attention" : "sliding_attention",
               std::string(b.kind == AttentionKind::Full ? "full" : "sliding") + " attention at " + layer);
    if (a.num_q_heads != b.num_q_heads)
      mismatch(kArch + "numAttentionHeads", std::to_string(a.num_q_heads), std::to_string(b.num_q_heads) + " query heads at " + layer);
    if (a.num_kv_heads != b.num_kv_heads)
      mismatch(kArch + (full && a.k_eq_v ? "numGlobalKeyValueHeads" : "numKeyValueHeads"), std::to_string(a.num_kv_heads),
               std::to_string(b.num_kv_heads) + " KV heads at " + layer);
    if (a.head_dim != b.head_dim)
      mismatch(kArch + (full ? "globalHeadDim" : "headDim"), std::to_string(a.head_dim),
               "head dim " + std::to_string(b.head_dim) + " at " + layer);
    if (a.k_eq_v != b.k_eq_v)
      mismatch(kArch + "attentionKeyEqualsValue", a.k_eq_v ? "true" : "false",
               std::string(b.k_eq_v ? "K=V (no v_proj)" : "a separate v_proj") + " at " + layer);
    if (a.ffn_dim != b.ffn_dim)
      mismatch(a.stores_kv() ? kArch + "intermediateSize" : "runtime.manifestInference.ffn.useDoubleWideMlp",
               std::to_string(a.ffn_dim) + (a.stores_kv() ? "" : " (the FFN width it gives)"),
               "FFN width " + std::to_string(b.ffn_dim) + " at " + layer);
    if (a.num_experts != b.num_experts || a.top_k_experts != b.top_k_experts || a.expert_ffn_dim != b.expert_ffn_dim)
      mismatch(kArch + "numExperts/numExpertsPerToken/moeIntermediateSize",
               std::to_string(a.num_experts) + "/" + std::to_string(a.top_k_experts) + "/" + std::to_string(a.expert_ffn_dim),
               std::to_string(b.num_experts) + " experts, top " + std::to_string(b.top_k_experts) + ", width " +
                   std::to_string(b.expert_ffn_dim) + " at " + layer);
    // Which small tensors a layer has: the manifest's layer lists must describe these weights.
    auto list_mismatch = [&](const std::string& field, bool listed, const std::string& weights_have) {
      throw Error(m.source + ": " + field + (listed ? " lists " : " leaves out ") + layer + ", but the weights have " +
                  weights_have + " there (" + w.source + ")");
    };
    if (a.q_norm_weight != b.q_norm_weight)
      list_mismatch("runtime.manifestInference.attention.queryKeyNormWeightLayers", a.q_norm_weight,
                    b.q_norm_weight ? "learned q/k norm gains" : "no q/k norm gains");
    if (a.has_layer_scalar != b.has_layer_scalar)
      list_mismatch("package.litertlm.layerScalarLayers", a.has_layer_scalar,
                    b.has_layer_scalar ? "a layer_scalar" : "no layer_scalar");
    // Behaviour the weights' own config also describes: the manifest decides; differences are shown.
    if (a.window != b.window)
      notes.push_back(layer + ": window " + std::to_string(a.window) + " (manifest) vs " + std::to_string(b.window) + " (weights' config)");
    if (a.rope.theta != b.rope.theta || a.rope.partial_factor != b.rope.partial_factor ||
        a.rope.freq_base_dim != b.rope.freq_base_dim || a.rope.scaling_factor != b.rope.scaling_factor ||
        a.rope.freq_factors != b.rope.freq_factors)
      notes.push_back(layer + ": RoPE theta " + num(a.rope.theta) + "/partial " + num(a.rope.partial_factor) + "/base dim " +
                      std::to_string(a.rope.freq_base_dim) + "/scaling " + num(a.rope.scaling_factor) +
                      " (manifest) vs " + num(b.rope.theta) + "/" + num(b.rope.partial_factor) + "/" +
                      std::to_string(b.rope.freq_base_dim) + "/" + num(b.rope.scaling_factor) + " (weights' config)");
  }
  if (m.final_logit_softcap != w.final_logit_softcap)
    notes.push_back("final logit softcap " + (m.final_logit_softcap ? num(*m.final_logit_softcap) : "none") + " (manifest) vs " +
                    (w.final_logit_softcap ? num(*w.final_logit_softcap) : "none") + " (weights' config)");
  if (m.rms_eps != w.rms_eps) notes.push_back("RMSNorm eps " + num(m.rms_eps) + " (manifest) vs " + num(w.rms_eps) + " (weights' config)");
  if (m.norm_weight_offset != w.norm_weight_offset)
    notes.push_back(std::string("RMSNorm weight offset ") + (m.norm_weight_offset ? "on" : "off") + " (manifest) vs " +
                    (w.norm_weight_offset ? "on" : "off") + " (weights' config)");
  return notes;
}

}  // namespace lumen::spec
