#include "runtime/manifest_fields.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "base/error.h"
#include "runtime/run_config.h"
#include "spec/model_spec.h"

namespace lumen::runtime {
namespace {

using nlohmann::json;
using S = FieldStatus;

struct Rule {
  const char* pattern;  // a dotted path; matches itself and everything below it
  FieldStatus status;
  const char* note;
};

constexpr const char* kMi = "runtime.manifestInference";

// Most specific (longest) matching pattern wins. Notes say where a field is used, what it is
// checked against, or why it has no effect on the CPU.
const Rule kRules[] = {
    {"id", S::Ignored, "a label: printed, not used"},
    {"runtime.modelType", S::Checked, "must name a Gemma 4 text model (the graph Lumen has)"},
    {"runtime.architecture", S::Checked, "model spec shapes; must equal the weights' (a mismatch is an error naming both)"},
    {"runtime.architecture.maxSeqLen", S::Honoured, "spec: the context limit of a session"},
    {"runtime.architecture.hiddenSizePerLayerInput", S::Honoured, "spec: width of each layer's per-layer input (0 = none)"},
    {"runtime.architecture.numKvSharedLayers", S::Honoured, "spec: the last N layers read the keys and values of the last earlier layer of their kind, and store none"},
    {"runtime.architecture.vocabSizePerLayerInput", S::Honoured, "spec: rows of the per-layer input table"},
    {"runtime.architecture.numExperts", S::Honoured, "spec: experts of every layer's MoE block (0 = dense)"},
    {"runtime.architecture.numExpertsPerToken", S::Honoured, "spec: experts the router picks per token"},
    {"runtime.architecture.moeIntermediateSize", S::Honoured, "spec: width of each expert"},
    {"runtime.rawConfig", S::Ignored, "HF config key the execution contract does not need (the contract declares it)"},
    // rawConfig keys the spec builder cross-checks against the contract.
    {"runtime.rawConfig.model_type", S::Checked, "must be a Gemma 4 type"},
    {"runtime.rawConfig.eos_token_id", S::Checked, "compared with the tokenizer's eos tokens (differences noted)"},
    {"runtime.rawConfig.text_config.model_type", S::Checked, "must be a Gemma 4 type; names the spec's model type"},
    {"runtime.rawConfig.text_config.eos_token_id", S::Checked, "compared with the tokenizer's eos tokens (differences noted)"},
    {"runtime.rawConfig.text_config.vocab_size", S::Checked, "must equal runtime.architecture.vocabSize"},
    {"runtime.rawConfig.text_config.hidden_size", S::Checked, "must equal runtime.architecture.hiddenSize"},
    {"runtime.rawConfig.text_config.intermediate_size", S::Checked, "must equal runtime.architecture.intermediateSize"},
    {"runtime.rawConfig.text_config.num_hidden_layers", S::Checked, "must equal runtime.architecture.numLayers"},
    {"runtime.rawConfig.text_config.num_attention_heads", S::Checked, "must equal runtime.architecture.numAttentionHeads"},
    {"runtime.rawConfig.text_config.num_key_value_heads", S::Checked, "must equal runtime.architecture.numKeyValueHeads"},
    {"runtime.rawConfig.text_config.num_global_key_value_heads", S::Checked, "must equal runtime.architecture.numGlobalKeyValueHeads"},
    {"runtime.rawConfig.text_config.head_dim", S::Checked, "must equal runtime.architecture.headDim"},
    {"runtime.rawConfig.text_config.global_head_dim", S::Checked, "must equal runtime.architecture.globalHeadDim"},
    {"runtime.rawConfig.text_config.hidden_activation", S::Checked, "must be the tanh GELU of manifestInference.ffn.activation"},
    {"runtime.rawConfig.text_config.max_position_embeddings", S::Checked, "must equal runtime.architecture.maxSeqLen"},
    {"runtime.rawConfig.text_config.sliding_window", S::Checked, "must equal manifestInference.attention.slidingWindow"},
    {"runtime.rawConfig.text_config.rms_norm_eps", S::Checked, "must equal manifestInference.normalization.rmsNormEps"},
    {"runtime.rawConfig.text_config.rope_theta", S::Checked, "must equal manifestInference.rope.ropeTheta"},
    {"runtime.rawConfig.text_config.rope_local_base_freq", S::Checked, "must equal manifestInference.rope.ropeLocalTheta"},
    {"runtime.rawConfig.text_config.rope_scaling", S::Ignored, "overruled by manifestInference.rope.ropeScalingFactor (the contract wins; noted in the spec)"},
    {"runtime.rawConfig.text_config.attention_k_eq_v", S::Checked, "must equal runtime.architecture.attentionKeyEqualsValue"},
    {"runtime.rawConfig.text_config.attention_bias", S::Checked, "must equal manifestInference.attention.attentionBias"},
    {"runtime.rawConfig.text_config.hidden_size_per_layer_input", S::Checked, "must equal runtime.architecture.hiddenSizePerLayerInput"},
    {"runtime.rawConfig.text_config.vocab_size_per_layer_input", S::Checked, "must equal runtime.architecture.vocabSizePerLayerInput (with per-layer inputs)"},
    {"runtime.rawConfig.text_config.num_kv_shared_layers", S::Checked, "must equal runtime.architecture.numKvSharedLayers"},
    {"runtime.rawConfig.text_config.use_double_wide_mlp", S::Checked, "must equal manifestInference.ffn.useDoubleWideMlp"},
    {"runtime.rawConfig.text_config.enable_moe_block", S::Checked, "must be true exactly when runtime.architecture.numExperts > 0"},
    {"runtime.rawConfig.text_config.num_experts", S::Checked, "must equal runtime.architecture.numExperts"},
    {"runtime.rawConfig.text_config.top_k_experts", S::Checked, "must equal runtime.architecture.numExpertsPerToken"},
    {"runtime.rawConfig.text_config.moe_intermediate_size", S::Checked, "must equal runtime.architecture.moeIntermediateSize"},
    {"runtime.rawConfig.text_config.pad_token_id", S::Checked, "must equal the tokenizer block's padTokenId"},
    {"runtime.rawConfig.text_config.bos_token_id", S::Checked, "must equal the tokenizer block's bosTokenId"},
    {"runtime.rawConfig.text_config.unk_token_id", S::Checked, "must equal the tokenizer block's unkTokenId"},
    {"runtime.rawConfig.text_config.layer_types", S::Checked, "must equal manifestInference.layerPattern.layerTypes"},
    {"runtime.rawConfig.text_config.final_logit_softcapping", S::Checked, "must equal manifestInference.output.finalLogitSoftcapping"},
    {"runtime.rawConfig.text_config.tie_word_embeddings", S::Checked, "must equal manifestInference.output.tieWordEmbeddings"},
    {"runtime.rawConfig.text_config.query_pre_attn_scalar", S::Checked, "must equal manifestInference.attention.queryPreAttnScalar"},
    {"runtime.manifestConfig", S::Ignored, "Doppler's conversion settings: no effect on execution"},
    {"runtime.manifestInference.schema", S::Checked, "must be doppler.execution/v1"},
    {"runtime.manifestInference.presetId", S::Ignored, "a label: printed, not used"},
    {"runtime.manifestInference.unsupported", S::Honoured, "the gate: the run is refused with code, message and recommendation unless --allow-unverified"},
    {"runtime.manifestInference.attention", S::Honoured, "spec: attention of every layer"},
    {"runtime.manifestInference.attention.queryPreAttnScalar", S::Honoured, "spec: attention scale (1/sqrt of it; 1 = unscaled)"},
    {"runtime.manifestInference.attention.attnLogitSoftcapping", S::Honoured, "spec: attention score softcap (null = none)"},
    {"runtime.manifestInference.attention.slidingWindow", S::Honoured, "spec: window of sliding layers (keys p-window+1 .. p)"},
    {"runtime.manifestInference.attention.queryKeyNormWeightLayers", S::Checked, "spec: layers whose q/k norms have learned gains (others: unit gain); must match the weights' layers"},
    {"runtime.manifestInference.normalization", S::Honoured, "spec: RMSNorm epsilon, weight offset and which norms run"},
    {"runtime.manifestInference.ffn", S::Honoured, "spec: gated tanh-GELU dense FFN"},
    {"runtime.manifestInference.ffn.useDoubleWideMlp", S::Honoured, "spec: KV-shared layers' MLP is twice intermediateSize wide"},
    {"runtime.manifestInference.rope", S::Honoured, "spec: RoPE theta, partial rotation, frequency base dim and scaling per layer kind"},
    {"runtime.manifestInference.output", S::Honoured, "spec: final softcap, tied and scaled embeddings"},
    {"runtime.manifestInference.output.embeddingVocabSize", S::Checked, "must equal runtime.architecture.vocabSize"},
    {"runtime.manifestInference.layerPattern", S::Honoured, "spec: the attention kind of each layer"},
    {"runtime.manifestInference.layerPattern.layerTypes", S::Checked, "spec: each layer's kind; must equal the weights' layer kinds"},
    {"runtime.manifestInference.chatTemplate", S::Honoured, "chat format of run -p and chat (gemma4 / gemma3)"},
    {"runtime.manifestInference.pipeline", S::Honoured, "the standard decoder pipeline (a custom pipeline is refused)"},
    {"runtime.manifestInference.execution", S::Honoured, "the standard decoder pipeline (an explicit graph is refused)"},
    {"runtime.manifestInference.moe", S::Checked, "a GPU kernel profile for the experts: supportedActivationDtypes must list f32 (the CPU experts run the format x ISA kernel table)"},
    {"runtime.manifestInference.session.compute.defaults", S::Honoured, "Lumen computes activations, math, accumulation and outputs in f32 (other dtypes are refused)"},
    {"runtime.manifestInference.session.kvcache", S::Honoured, "KV cache (RunConfig.kv -> kv::make_cache)"},
    {"runtime.manifestInference.session.kvcache.kvDtype", S::Honoured, "KV cache: element type of cached keys and values"},
    {"runtime.manifestInference.session.kvcache.layout", S::Honoured, "KV cache: contiguous, paged, or paged with tiering"},
    {"runtime.manifestInference.session.kvcache.pageSize", S::Honoured, "KV cache: positions per page"},
    {"runtime.manifestInference.session.kvcache.tiering.mode", S::Honoured, "KV cache: tiering of full-attention layers on/off"},
    {"runtime.manifestInference.session.kvcache.tiering.gating", S::Ignored, "a GPU decision whether decompression pays; the CPU applies the tiering as written (non-neutral values are refused)"},
    {"runtime.manifestInference.session.kvcache.quantization.mode", S::Honoured, "KV cache: no whole-cache quantization (other modes are refused)"},
    {"runtime.manifestInference.session.kvcache.quantization.prodMode", S::Honoured, "KV cache: plain quantization only (true is refused)"},
    {"runtime.manifestInference.session.kvcache.quantization.bitWidth", S::Ignored, "quantization mode is none"},
    {"runtime.manifestInference.session.decodeLoop.batchSize", S::Honoured, "sequences decoding together: the server's default --parallel"},
    {"runtime.manifestInference.session.decodeLoop.stopCheckMode", S::Ignored, "Lumen checks stop tokens after every token (the same output as batched checks, which discard past the stop)"},
    {"runtime.manifestInference.session.decodeLoop", S::Ignored, "GPU readback, ring buffers and command batching: nothing to read back on the CPU"},
    {"runtime.manifestInference.session.perLayerInputs", S::Honoured, "per-layer input table (RunConfig.per_layer_inputs -> model::PerLayerInputs)"},
    {"runtime.manifestInference.session.perLayerInputs.materialization", S::Honoured, "the table: mapped in place, rows decoded per token (auto, range_backed) or copied into memory (cpu_resident)"},
    {"runtime.manifestInference.session.perLayerInputs.rowCache.mode", S::Honoured, "LRU cache of decoded table rows on (lru) or off"},
    {"runtime.manifestInference.session.perLayerInputs.rowCache.maxRows", S::Honoured, "row cache: rows kept at most (LRU eviction)"},
    {"runtime.manifestInference.session.perLayerInputs.rowCache.maxBytes", S::Honoured, "row cache: bytes kept at most (LRU eviction)"},
    {"runtime.manifestInference.session.perLayerInputs.rowCache.decodedDtype", S::Honoured, "row cache: element type of kept rows (f32, or the table's own f16/bf16: a lossy type is refused at load)"},
    {"runtime.manifestInference.session.perLayerInputs.prefetch.mode", S::Honoured, "a helper thread decodes upcoming tokens' rows (next_token) or none (off)"},
    {"runtime.manifestInference.session.perLayerInputs.prefetch.rowsAhead", S::Honoured, "prefetch: tokens past the current step whose rows are fetched"},
    {"runtime.manifestInference.session.perLayerInputs.gpuUpload", S::Checked, "GPU staging of table slices: checked (per_step_slices|per_batch_slices, stagingRows > 0); on the CPU rows are read in place, nothing is uploaded"},
    {"runtime.manifestInference.session.perLayerInputs.hotCache.mode", S::Honoured, "LRU cache of prepared per-layer inputs (prepared_tokens: table row + embedding projection, per token id) or off"},
    {"runtime.manifestInference.session.perLayerInputs.hotCache.maxTokens", S::Honoured, "prepared-input cache: tokens kept at most"},
    {"runtime.manifestInference.session.perLayerInputs.hotCache.maxBytes", S::Honoured, "prepared-input cache: bytes kept at most"},
    {"runtime.manifestInference.session.perLayerInputs.hotCache.outputDtype", S::Honoured, "prepared inputs are f32 (the activation dtype; other types are refused)"},
    {"runtime.manifestInference.session.prefillChunkSubmitMode", S::Ignored, "GPU command submission; Lumen's prefill chunks (RunConfig.prefill_chunk) run one after another"},
    {"runtime.manifestInference.session.useFlashPrefillAttention", S::Ignored, "Lumen's prefill always uses its tiled online-softmax attention (the same math up to summation order)"},
    {"runtime.manifestInference.session.useWideTileQ4KPrefill", S::Ignored, "a WebGPU Q4K kernel choice; no Q4K weights here"},
    {"runtime.manifestInference.session.retainQ4KMaterialization", S::Ignored, "a WebGPU Q4K buffer choice; no Q4K weights here"},
    {"runtime.manifestInference.sessionDefaults", S::Ignored, "superseded by session"},
    {"runtime.manifestInference.defaultKernelPath", S::Ignored, "WebGPU kernel selection; Lumen picks CPU kernels from CPUID"},
    {"runtime.manifestInference.kernelPath", S::Ignored, "WebGPU kernel selection; Lumen picks CPU kernels from CPUID"},
    {"runtime.tokenizer", S::Honoured, "tokenizer settings"},
    {"runtime.tokenizer.litertlm.type", S::Checked, "must match the loaded tokenizer's kind"},
    {"runtime.tokenizer.litertlm.sentencepieceModel", S::Ignored, "names the package's SP_Tokenizer section: used once .litertlm weights load; otherwise the tokenizer next to the weights is used (and checked)"},
    {"runtime.tokenizer.litertlm.vocabSize", S::Checked, "must equal runtime.architecture.vocabSize and the loaded tokenizer's size"},
    {"runtime.tokenizer.litertlm.padTokenId", S::Checked, "spec pad id; must equal the loaded tokenizer's"},
    {"runtime.tokenizer.litertlm.bosTokenId", S::Checked, "spec BOS id; must equal the loaded tokenizer's"},
    {"runtime.tokenizer.litertlm.eosTokenId", S::Checked, "spec EOS id (a stop id); must equal the loaded tokenizer's"},
    {"runtime.tokenizer.litertlm.unkTokenId", S::Honoured, "spec unknown-token id"},
    {"runtime.tokenizer.litertlm.eosTokens", S::Honoured, "stop ids of every generation"},
    {"runtime.tokenizer.litertlm.addBosToken", S::Honoured, "whether run --raw prefixes BOS"},
    {"runtime.tokenizer.litertlm.addEosToken", S::Honoured, "no EOS appended to prompts (true is refused)"},
    {"package.litertlm", S::Ignored, "LiteRT package weight mapping: read when .litertlm weights are loaded, not used with other weights"},
    {"package.litertlm.unsupported", S::Honoured, "the gate (with manifestInference.unsupported)"},
    {"package.litertlm.layerScalarLayers", S::Checked, "spec: layers with a learned layer scalar; must match the weights' layers"},
    {"package.litertlm.missingLayerScalarValue", S::Honoured, "spec: the scalar of the other layers"},
};

const json* at(const json& root, const std::string& dotted) {
  const json* node = &root;
  size_t start = 0;
  while (start <= dotted.size()) {
    size_t dot = dotted.find('.', start);
    if (dot == std::string::npos) dot = dotted.size();
    if (!node->is_object()) return nullptr;
    auto it = node->find(dotted.substr(start, dot - start));
    if (it == node->end()) return nullptr;
    node = &*it;
    start = dot + 1;
  }
  return node;
}

std::string string_at(const json& root, const std::string& dotted) {
  const json* v = at(root, dotted);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

bool matches(const std::string& path, const std::string& pattern) {
  return path == pattern || (path.size() > pattern.size() && path.compare(0, pattern.size(), pattern) == 0 &&
                             path[pattern.size()] == '.');
}

// The tokenizer block may sit at runtime.tokenizer(.litertlm) or tokenizer(.litertlm); rules
// name runtime.tokenizer.litertlm, so the others are looked up under it.
std::string rule_path(std::string path) {
  if (path.rfind("tokenizer.", 0) == 0) path = "runtime." + path;  // a top-level tokenizer block
  const std::string flat = "runtime.tokenizer.";
  if (path.rfind(flat, 0) == 0 && path.rfind("runtime.tokenizer.litertlm", 0) != 0)
    return "runtime.tokenizer.litertlm." + path.substr(flat.size());
  if (path.rfind("runtime.package.", 0) == 0) return path.substr(8);  // package may sit under runtime
  return path;
}

// Value-dependent classifications (a setting that has no effect because another one turns
// its feature off).
void refine(ManifestField& f, const json& root) {
  const std::string kv = std::string(kMi) + ".session.kvcache";
  const std::string& p = f.path;
  if (p == kv + ".pageSize" && string_at(root, kv + ".layout") == "contiguous") {
    f.status = S::Ignored;
    f.note = "layout contiguous has no pages";
  }
  if (matches(p, kv + ".tiering") && !matches(p, kv + ".tiering.mode") && !matches(p, kv + ".tiering.gating")) {
    const std::string mode = string_at(root, kv + ".tiering.mode");
    const bool on = mode == "on" || mode == "tiered" || string_at(root, kv + ".layout") == "tiered";
    const std::string cmode = string_at(root, kv + ".tiering.compression.mode");
    if (!on) {
      f.status = S::Ignored;
      f.note = "tiering is off (tiering.mode " + (mode.empty() ? std::string("absent") : "'" + mode + "'") + ")";
    } else if (matches(p, kv + ".tiering.compression") && p != kv + ".tiering.compression.mode" &&
               p != kv + ".tiering.compression.prodMode" && (cmode.empty() || cmode == "none")) {
      f.status = S::Ignored;
      f.note = "cold-tier compression is none";
    } else {
      f.status = S::Honoured;
      f.note = "KV cache: cold tier of full-attention layers (hot window, cold dtype, compression)";
    }
  }
  if (p == kv + ".quantization.bitWidth" && !(string_at(root, kv + ".quantization.mode").empty() ||
                                             string_at(root, kv + ".quantization.mode") == "none")) {
    f.status = S::Refused;
    f.note = "whole-cache quantization is not supported";
  }
  const std::string pattern = std::string(kMi) + ".layerPattern";
  if (matches(p, pattern) && p != pattern + ".layerTypes") {
    const json* types = at(root, pattern + ".layerTypes");
    if (types && types->is_array()) {
      f.status = S::Ignored;
      f.note = "layerTypes is given: it decides each layer's kind";
    }
  }
  if (p == "runtime.architecture.vocabSizePerLayerInput") {
    const json* width = at(root, "runtime.architecture.hiddenSizePerLayerInput");
    if (!width || !width->is_number_integer() || width->get<int64_t>() <= 0) {
      f.status = S::Ignored;
      f.note = "sizes the per-layer input table, which this model does not have (hiddenSizePerLayerInput 0)";
    }
  }
  const std::string pli = std::string(kMi) + ".session.perLayerInputs";
  if (matches(p, pli) && f.status != S::Refused) {
    if (p == pli + ".materialization" && (f.value == "gpu_resident" || f.value == "gpu_split_tables")) {
      f.status = S::Checked;
      f.note = "a GPU placement (" + f.value.get<std::string>() +
               "): Lumen runs on the CPU, where the table stays mapped in its stored format and rows are decoded per "
               "token, as range_backed";
    }
    auto off = [&](const std::string& block, const char* why) {
      if (matches(p, pli + "." + block) && p != pli + "." + block + ".mode") {
        f.status = S::Ignored;
        f.note = why;
      }
    };
    if (string_at(root, pli + ".rowCache.mode") == "off") off("rowCache", "the row cache is off (rowCache.mode 'off')");
    if (string_at(root, pli + ".prefetch.mode") == "off") off("prefetch", "prefetch is off (prefetch.mode 'off')");
    if (string_at(root, pli + ".hotCache.mode") == "off") off("hotCache", "the prepared-input cache is off (hotCache.mode 'off')");
    // A model without per-layer inputs has no table: the values are validated, nothing more.
    const json* width = at(root, "runtime.architecture.hiddenSizePerLayerInput");
    const bool none = !width || !width->is_number_integer() || width->get<int64_t>() <= 0;
    if (none && f.status == S::Honoured) {
      f.status = S::Checked;
      f.note += " -- checked only: this model has no per-layer inputs (runtime.architecture.hiddenSizePerLayerInput 0)";
    }
  }
  if (p == std::string(kMi) + ".session.prefillChunkSubmitMode" && f.value == "sync") {
    f.status = S::Honoured;
    f.note = "each prefill chunk (RunConfig.prefill_chunk rows) completes before the next, as on the CPU";
  }
}

void walk(const json& node, const std::string& path, std::vector<ManifestField>& out) {
  if (node.is_object() && !node.empty()) {
    for (auto it = node.begin(); it != node.end(); ++it) walk(*it, path.empty() ? it.key() : path + "." + it.key(), out);
    return;
  }
  out.push_back({path, node, S::Ignored, ""});
}

void classify(ManifestField& f, const json& root) {
  std::string rp = rule_path(f.path);
  // A flat rawConfig (no text_config) holds the text model's keys at its top.
  const std::string raw = "runtime.rawConfig.";
  if (rp.rfind(raw, 0) == 0 && rp.rfind(raw + "text_config", 0) != 0 && !at(root, "runtime.rawConfig.text_config"))
    rp = raw + "text_config." + rp.substr(raw.size());
  const Rule* best = nullptr;
  for (const Rule& r : kRules)
    if (matches(rp, r.pattern) && (!best || std::string_view(r.pattern).size() > std::string_view(best->pattern).size()))
      best = &r;
  if (best) {
    f.status = best->status;
    f.note = best->note;
  } else if (f.path.rfind("runtime", 0) == 0 || f.path.rfind("package", 0) == 0 || f.path.rfind("tokenizer", 0) == 0) {
    f.status = S::Refused;
    f.note = "unknown field: Lumen does not know what it means";
  } else {
    f.status = S::Ignored;
    f.note = "outside the execution contract (runtime, package, tokenizer)";
  }
  refine(f, root);
}

// The field an error message is about: the leaf path named earliest in it (the longest on a tie).
ManifestField* field_named_in(std::vector<ManifestField>& fields, const std::string& message) {
  ManifestField* best = nullptr;
  size_t best_pos = std::string::npos;
  for (auto& f : fields) {
    const size_t pos = message.find(f.path);
    if (pos == std::string::npos) continue;
    // Must be the whole path, not a prefix of a longer one.
    const size_t end = pos + f.path.size();
    if (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_')) continue;
    if (!best || pos < best_pos || (pos == best_pos && f.path.size() > best->path.size())) {
      best = &f;
      best_pos = pos;
    }
  }
  return best;
}

}  // namespace

const char* field_status_name(FieldStatus s) {
  switch (s) {
    case S::Honoured: return "honoured";
    case S::Checked: return "checked";
    case S::Ignored: return "ignored";
    case S::Refused: return "refused";
  }
  return "?";
}

FieldCounts FieldTable::counts() const {
  FieldCounts c;
  for (const auto& f : fields) {
    switch (f.status) {
      case S::Honoured: ++c.honoured; break;
      case S::Checked: ++c.checked; break;
      case S::Ignored: ++c.ignored; break;
      case S::Refused: ++c.refused; break;
    }
  }
  return c;
}

FieldTable manifest_field_table(const json& manifest, const std::string& source) {
  FieldTable t;
  t.source = source;
  walk(manifest, "", t.fields);
  for (auto& f : t.fields) classify(f, manifest);
  // What the builders refuse (first error of each) marks its field.
  auto builder_error = [&](const std::string& message) {
    ManifestField* f = field_named_in(t.fields, message);
    if (f) {
      f->status = S::Refused;
      const std::string prefix = source + ": ";
      f->note = message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
    }
    if (t.error.empty()) t.error = message;
  };
  try {
    spec::spec_from_manifest(manifest, source);
  } catch (const std::exception& e) {
    builder_error(e.what());
  }
  try {
    run_config_from_manifest(manifest, source);
  } catch (const std::exception& e) {
    builder_error(e.what());
  }
  if (t.error.empty()) {
    for (const auto& f : t.fields) {
      if (f.status == S::Refused) {
        t.error = source + ": " + f.path + ": " + f.note;
        break;
      }
    }
  }
  return t;
}

std::string field_counts_text(const FieldCounts& c) {
  std::ostringstream o;
  o << c.total() << " fields: " << c.honoured << " honoured, " << c.checked << " checked, " << c.ignored
    << " ignored, " << c.refused << " refused";
  return o.str();
}

std::string field_table_to_text(const FieldTable& t) {
  std::ostringstream o;
  o << "manifest " << t.source << ": " << field_counts_text(t.counts()) << "\n";
  size_t width = 0;
  for (const auto& f : t.fields) width = std::max(width, f.path.size());
  for (const auto& f : t.fields) {
    std::string value = f.value.dump();
    if (value.size() > 40) value = value.substr(0, 37) + "...";
    o << "  " << field_status_name(f.status) << std::string(9 - std::string(field_status_name(f.status)).size(), ' ')
      << f.path << std::string(width - f.path.size() + 2, ' ') << value << "  -- " << f.note << "\n";
  }
  if (!t.error.empty()) o << "refused: " << t.error << "\n";
  return o.str();
}

json field_table_to_json(const FieldTable& t) {
  json j;
  j["manifest"] = t.source;
  const FieldCounts c = t.counts();
  j["counts"] = {{"total", c.total()}, {"honoured", c.honoured}, {"checked", c.checked},
                 {"ignored", c.ignored}, {"refused", c.refused}};
  json fields = json::array();
  for (const auto& f : t.fields)
    fields.push_back({{"path", f.path}, {"value", f.value}, {"status", field_status_name(f.status)}, {"note", f.note}});
  j["fields"] = std::move(fields);
  j["error"] = t.error.empty() ? json() : json(t.error);
  return j;
}

}  // namespace lumen::runtime
