// ModelSpec from the seed LiteRT manifest and from HF Gemma 4 configs: shapes, per-layer
// kinds, rope, q/k norm and layer-scalar flags, refusals, JSON/text renderings.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "spec/model_spec.h"
#include "test_helpers.h"

using lumen::test_support::error_of;

using lumen::spec::AttentionKind;
using lumen::spec::ModelSpec;
using nlohmann::json;

namespace {

const std::string kManifestPath =
    std::string(LUMEN_SHARED_DIR) + "/manifests/litert-gemma-4-12b-it.json";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// google/gemma-4-12B's text config as Gemma4TextConfig.save_pretrained writes it would read
// (48 layers, 5 sliding + 1 full repeated, last full).
json hf_12b_text_config() {
  json types = json::array();
  for (int i = 0; i < 48; ++i) types.push_back((i + 1) % 6 ? "sliding_attention" : "full_attention");
  return {
      {"model_type", "gemma4_unified_text"},
      {"architectures", {"Gemma4ForCausalLM"}},
      {"dtype", "bfloat16"},
      {"transformers_version", "5.23.0"},
      {"vocab_size", 262144},
      {"hidden_size", 3840},
      {"intermediate_size", 15360},
      {"num_hidden_layers", 48},
      {"num_attention_heads", 16},
      {"num_key_value_heads", 8},
      {"num_global_key_value_heads", 1},
      {"head_dim", 256},
      {"global_head_dim", 512},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"max_position_embeddings", 262144},
      {"rms_norm_eps", 1e-6},
      {"sliding_window", 1024},
      {"layer_types", types},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention",
         {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}}},
      {"attention_k_eq_v", true},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"hidden_size_per_layer_input", 0},
      {"vocab_size_per_layer_input", 262144},
      {"num_kv_shared_layers", 0},
      {"enable_moe_block", false},
      {"use_double_wide_mlp", false},
      {"num_experts", nullptr},
      {"top_k_experts", nullptr},
      {"moe_intermediate_size", nullptr},
      {"use_bidirectional_attention", nullptr},
      {"final_logit_softcapping", 30.0},
      {"tie_word_embeddings", true},
      {"pad_token_id", 0},
      {"bos_token_id", 2},
      {"eos_token_id", {1, 106}},
      {"use_cache", true},
      {"initializer_range", 0.02},
      {"output_attentions", false},
  };
}

json hf_12b_wrapped() {
  json text = hf_12b_text_config();
  text.erase("architectures");
  text.erase("dtype");
  text.erase("transformers_version");
  text["eos_token_id"] = 1;
  return {
      {"model_type", "gemma4_unified"},
      {"architectures", {"Gemma4ForConditionalGeneration"}},
      {"text_config", text},
      {"vision_config", {{"model_type", "gemma4_vision"}, {"hidden_size", 768}}},
      {"audio_config", nullptr},
      {"eos_token_id", {1, 106}},
      {"boi_token_id", 255999},
      {"eoi_token_id", 258882},
      {"image_token_id", 258880},
      {"video_token_id", 258884},
      {"boa_token_id", 256000},
      {"eoa_token_index", 258883},
      {"audio_token_id", 258881},
      {"vision_soft_tokens_per_image", 280},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", true},
      {"dtype", "bfloat16"},
      {"transformers_version", "5.23.0"},
  };
}

bool is_full_12b(int i) { return (i + 1) % 6 == 0; }

void expect_one_line_naming(const std::string& message, const std::string& field) {
  EXPECT_NE(message.find(field), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_FALSE(message.empty());
}

void expect_12b_hf_spec(const ModelSpec& s) {
  EXPECT_EQ(s.source_kind, "hf-config");
  EXPECT_EQ(s.model_type, "gemma4_unified_text");
  EXPECT_EQ(s.vocab_size, 262144);
  EXPECT_EQ(s.hidden_size, 3840);
  EXPECT_EQ(s.max_positions, 262144);
  ASSERT_EQ(s.num_layers(), 48);
  EXPECT_FLOAT_EQ(s.rms_eps, 1e-6f);
  EXPECT_FALSE(s.norm_weight_offset);
  EXPECT_EQ(s.attention_scale, 1.0f);
  EXPECT_FALSE(s.attn_logit_softcap.has_value());
  ASSERT_TRUE(s.final_logit_softcap.has_value());
  EXPECT_EQ(*s.final_logit_softcap, 30.0f);
  EXPECT_TRUE(s.tie_embeddings);
  EXPECT_EQ(s.embedding_scale, std::sqrt(3840.0f));
  EXPECT_EQ(s.activation, "gelu_tanh");
  EXPECT_EQ(s.chat_template, "gemma4");
  EXPECT_EQ(s.tokens.pad, 0);
  EXPECT_EQ(s.tokens.bos, 2);
  EXPECT_EQ(s.tokens.eos, 1);
  EXPECT_EQ(s.tokens.stop, (std::vector<int>{1, 106}));
  EXPECT_FALSE(s.unsupported.has_value());
  for (int i = 0; i < 48; ++i) {
    const auto& l = s.layers[size_t(i)];
    SCOPED_TRACE("layer " + std::to_string(i));
    const bool full = is_full_12b(i);
    EXPECT_EQ(l.kind, full ? AttentionKind::Full : AttentionKind::Sliding);
    EXPECT_EQ(l.num_q_heads, 16);
    EXPECT_EQ(l.num_kv_heads, full ? 1 : 8);
    EXPECT_EQ(l.head_dim, full ? 512 : 256);
    EXPECT_EQ(l.window, full ? 0 : 1024);
    EXPECT_EQ(l.k_eq_v, full);
    EXPECT_TRUE(l.q_norm && l.q_norm_weight && l.k_norm && l.k_norm_weight && l.v_norm);
    EXPECT_TRUE(l.has_layer_scalar);
    EXPECT_EQ(l.ffn_dim, 15360);
    EXPECT_EQ(l.rope.type, full ? "proportional" : "default");
    EXPECT_EQ(l.rope.theta, full ? 1e6 : 1e4);
    EXPECT_EQ(l.rope.rotated_pairs(l.head_dim), full ? 64 : 128);
    EXPECT_EQ(l.rope.freq_base_dim, full ? 512 : 256);
    EXPECT_EQ(l.rope.scaling_factor, 1.0);
  }
}

}  // namespace

// ---------------------------------------------------------------- manifest

TEST(ModelSpecManifest, SeedManifestLayers) {
  const ModelSpec s = lumen::spec::load_spec(kManifestPath);
  EXPECT_EQ(s.source_kind, "manifest");
  EXPECT_EQ(s.model_type, "gemma4_unified_text");
  EXPECT_EQ(s.vocab_size, 262144);
  EXPECT_EQ(s.hidden_size, 3840);
  EXPECT_EQ(s.max_positions, 131072);
  ASSERT_EQ(s.num_layers(), 47);
  const std::set<int> full = {5, 11, 17, 23, 29, 35, 41};
  const std::set<int> qk_weights = {2,  5,  9,  10, 11, 13, 15, 16, 17, 18, 23, 25, 30,
                                    31, 33, 35, 36, 38, 39, 40, 41, 42, 43, 44, 46};
  std::set<int> scalars;
  for (int i = 0; i <= 42; ++i) scalars.insert(i);
  for (int i : {21, 23}) scalars.erase(i);
  scalars.insert(46);
  for (int i = 0; i < 47; ++i) {
    const auto& l = s.layers[size_t(i)];
    SCOPED_TRACE("layer " + std::to_string(i));
    const bool is_full = full.count(i) > 0;
    EXPECT_EQ(l.kind, is_full ? AttentionKind::Full : AttentionKind::Sliding);
    EXPECT_EQ(l.num_q_heads, 16);
    EXPECT_EQ(l.head_dim, is_full ? 512 : 256);
    EXPECT_EQ(l.num_kv_heads, is_full ? 1 : 8);
    EXPECT_EQ(l.window, is_full ? 0 : 1024);
    EXPECT_EQ(l.k_eq_v, is_full);
    EXPECT_TRUE(l.q_norm);
    EXPECT_TRUE(l.k_norm);
    EXPECT_TRUE(l.v_norm);
    EXPECT_EQ(l.q_norm_weight, qk_weights.count(i) > 0);
    EXPECT_EQ(l.k_norm_weight, qk_weights.count(i) > 0);
    EXPECT_EQ(l.has_layer_scalar, scalars.count(i) > 0);
    EXPECT_EQ(l.missing_layer_scalar, 1.0f);
    EXPECT_EQ(l.ffn_dim, 15360);
    if (is_full) {
      EXPECT_EQ(l.rope.theta, 1e6);
      EXPECT_EQ(l.rope.rotated_pairs(l.head_dim), 64);
      EXPECT_EQ(l.rope.freq_base_dim, 512);
      EXPECT_EQ(l.rope.type, "proportional");
    } else {
      EXPECT_EQ(l.rope.theta, 1e4);
      EXPECT_EQ(l.rope.rotated_pairs(l.head_dim), 128);
      EXPECT_EQ(l.rope.freq_base_dim, 256);
      EXPECT_EQ(l.rope.type, "default");
    }
    EXPECT_EQ(l.rope.scaling_factor, 1.0);
  }
  // The manifest's last layer is sliding: honoured as written.
  EXPECT_EQ(s.layers.back().kind, AttentionKind::Sliding);
}

TEST(ModelSpecManifest, SeedManifestGlobals) {
  const ModelSpec s = lumen::spec::load_spec(kManifestPath);
  ASSERT_TRUE(s.final_logit_softcap.has_value());
  EXPECT_EQ(*s.final_logit_softcap, 30.0f);
  EXPECT_FALSE(s.attn_logit_softcap.has_value());
  EXPECT_EQ(s.attention_scale, 1.0f);
  EXPECT_FLOAT_EQ(s.rms_eps, 1e-6f);
  EXPECT_FALSE(s.norm_weight_offset);
  EXPECT_TRUE(s.tie_embeddings);
  EXPECT_EQ(s.embedding_scale, std::sqrt(3840.0f));
  EXPECT_EQ(s.activation, "gelu_tanh");
  EXPECT_EQ(s.chat_template, "gemma4");
  EXPECT_EQ(s.tokens.pad, 0);
  EXPECT_EQ(s.tokens.bos, 2);
  EXPECT_EQ(s.tokens.eos, 1);
  EXPECT_EQ(s.tokens.unk, 3);
  EXPECT_EQ(s.tokens.stop, (std::vector<int>{1, 106}));
  ASSERT_TRUE(s.unsupported.has_value());
  EXPECT_EQ(s.unsupported->code, "gemma4-12b-litert-direct-source-unverified");
  EXPECT_NE(s.unsupported->message.find("47 repeated decoder-weight groups"), std::string::npos);
  EXPECT_FALSE(s.unsupported->recommendation.empty());
  bool rope_note = false;
  for (const auto& note : s.notes) {
    if (note.find("rope_scaling") != std::string::npos && note.find("8") != std::string::npos) {
      rope_note = true;
    }
  }
  EXPECT_TRUE(rope_note) << "no note about rawConfig rope_scaling.factor 8";
}

TEST(ModelSpecManifest, ExpectedTensorsFollowFlags) {
  const ModelSpec s = lumen::spec::load_spec(kManifestPath);
  const auto tensors = lumen::spec::expected_tensors(s);
  std::set<std::string> names;
  for (const auto& t : tensors) names.insert(t.name);
  EXPECT_EQ(names.size(), tensors.size());
  EXPECT_TRUE(names.count("layers.2.self_attn.q_norm.weight"));
  EXPECT_FALSE(names.count("layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(names.count("layers.21.layer_scalar"));
  EXPECT_TRUE(names.count("layers.20.layer_scalar"));
  EXPECT_FALSE(names.count("layers.5.self_attn.v_proj.weight"));
  EXPECT_TRUE(names.count("layers.4.self_attn.v_proj.weight"));
  EXPECT_FALSE(names.count("lm_head.weight"));
  // 47 layers x 10 fixed tensors, + v_proj on 40 sliding layers, + 25 x 2 q/k norms,
  // + 42 scalars, + embed and final norm.
  EXPECT_EQ(tensors.size(), size_t(47 * 10 + 40 + 50 + 42 + 2));
}

TEST(ModelSpecManifest, NumLayersContradiction) {
  json m = read_json(kManifestPath);
  m["runtime"]["architecture"]["numLayers"] = 48;
  const std::string msg = error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); });
  expect_one_line_naming(msg, "runtime.architecture.numLayers");
  EXPECT_NE(msg.find("num_hidden_layers"), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("m.json: ", 0), 0u) << msg;
}

TEST(ModelSpecManifest, LayerTypesLengthContradiction) {
  json m = read_json(kManifestPath);
  m["runtime"]["manifestInference"]["layerPattern"]["layerTypes"].push_back("full_attention");
  const std::string msg = error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); });
  expect_one_line_naming(msg, "layerTypes");
  EXPECT_NE(msg.find("numLayers"), std::string::npos) << msg;
}

TEST(ModelSpecManifest, HeadDimContradiction) {
  json m = read_json(kManifestPath);
  m["runtime"]["architecture"]["headDim"] = 128;
  const std::string msg = error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); });
  expect_one_line_naming(msg, "runtime.architecture.headDim");
  EXPECT_NE(msg.find("head_dim"), std::string::npos) << msg;
}

TEST(ModelSpecManifest, WrongSchema) {
  json m = read_json(kManifestPath);
  m["runtime"]["manifestInference"]["schema"] = "doppler.execution/v0";
  expect_one_line_naming(error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); }),
                         "runtime.manifestInference.schema");
  m["runtime"]["manifestInference"].erase("schema");
  expect_one_line_naming(error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); }),
                         "runtime.manifestInference.schema");
}

TEST(ModelSpecManifest, UnhonourableFieldsRefused) {
  const json base = read_json(kManifestPath);
  struct Case {
    std::vector<std::string> path;
    json value;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{"rope", "ropeInterleaved"}, true, "ropeInterleaved"},
      {{"attention", "attentionOutputGate"}, true, "attentionOutputGate"},
      {{"attention", "attentionBias"}, true, "attentionBias"},
      {{"rope", "mropeSection"}, {1, 2}, "mropeSection"},
      {{"rope", "yarnBetaFast"}, 32, "yarnBetaFast"},
      {{"rope", "ropeScalingType"}, "yarn", "ropeScalingType"},
      {{"attention", "queryPreAttnScalar"}, nullptr, "queryPreAttnScalar"},
      {{"attention", "someNewFlag"}, true, "someNewFlag"},
  };
  for (const auto& c : cases) {
    json m = base;
    json* at = &m["runtime"]["manifestInference"];
    for (size_t i = 0; i + 1 < c.path.size(); ++i) at = &(*at)[c.path[i]];
    (*at)[c.path.back()] = c.value;
    expect_one_line_naming(error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); }), c.field);
  }
  json m = base;
  m["runtime"]["architecture"]["hiddenSizePerLayerInput"] = 256;
  expect_one_line_naming(error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); }),
                         "hiddenSizePerLayerInput");
  m = base;
  m["runtime"]["architecture"]["numKvSharedLayers"] = 47;  // every layer: none left to compute KV
  expect_one_line_naming(error_of([&] { lumen::spec::spec_from_manifest(m, "m.json"); }),
                         "numKvSharedLayers");
}

TEST(ModelSpecManifest, ScalingFactorIsAnOption) {
  json m = read_json(kManifestPath);
  m["runtime"]["manifestInference"]["rope"]["ropeScalingType"] = "linear";
  m["runtime"]["manifestInference"]["rope"]["ropeScalingFactor"] = 8;
  const ModelSpec s = lumen::spec::spec_from_manifest(m, "m.json");
  EXPECT_EQ(s.layers[5].rope.scaling_factor, 8.0);
  EXPECT_EQ(s.layers[0].rope.scaling_factor, 1.0);
  // Now rawConfig agrees: no note about it.
  for (const auto& note : s.notes) EXPECT_EQ(note.find("rope_scaling"), std::string::npos) << note;
}

TEST(ModelSpecManifest, TextRendering) {
  const ModelSpec s = lumen::spec::load_spec(kManifestPath);
  const std::string text = lumen::spec::spec_to_text(s);
  for (const char* part : {"manifest", "gemma4_unified_text", "262144", "3840", "47",
                           "[1, 106]", "gemma4-12b-litert-direct-source-unverified",
                           "recommendation", "notes", "rope_scaling", "64/512", "128/256",
                           "learned", "=1"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

// ---------------------------------------------------------------- HF config

TEST(ModelSpecHf, TextConfig12B) {
  const ModelSpec s = lumen::spec::spec_from_hf_config(hf_12b_text_config(), "config.json");
  expect_12b_hf_spec(s);
  EXPECT_TRUE(s.notes.empty());
}

TEST(ModelSpecHf, WrappedConfig12B) {
  const ModelSpec s = lumen::spec::spec_from_hf_config(hf_12b_wrapped(), "config.json");
  expect_12b_hf_spec(s);
}

TEST(ModelSpecHf, PlainGemma4Wrapper) {
  json c = hf_12b_wrapped();
  c["model_type"] = "gemma4";
  c["text_config"]["model_type"] = "gemma4_text";
  const ModelSpec s = lumen::spec::spec_from_hf_config(c, "config.json");
  EXPECT_EQ(s.model_type, "gemma4_text");
  EXPECT_EQ(s.num_layers(), 48);
}

TEST(ModelSpecHf, PerLayerConfigAsSaved) {
  // What transformers 5 save_pretrained writes: no global_head_dim, zero-padded index keys.
  json c = hf_12b_text_config();
  c.erase("global_head_dim");
  c.erase("num_global_key_value_heads");
  json plc = json::object();
  for (int i = 0; i < 48; ++i) {
    if (!is_full_12b(i)) continue;
    char key[8];
    std::snprintf(key, sizeof key, "%02d", i);
    plc[key] = {{"head_dim", 512}, {"num_key_value_heads", 1}};
  }
  c["per_layer_config"] = plc;
  expect_12b_hf_spec(lumen::spec::spec_from_hf_config(c, "config.json"));

  // Keyed by layer type.
  c["per_layer_config"] = {{"full_attention", {{"head_dim", 512}, {"num_key_value_heads", 1}}}};
  expect_12b_hf_spec(lumen::spec::spec_from_hf_config(c, "config.json"));

  // Errors name the per-layer field itself.
  c["per_layer_config"] = {{"05", {{"head_dim", 512}, {"num_key_value_heads", 3}}}};
  const std::string msg =
      error_of([&] { lumen::spec::spec_from_hf_config(c, "config.json"); });
  expect_one_line_naming(msg, "`per_layer_config.05.num_key_value_heads`");
  c["per_layer_config"] = {{"60", {{"head_dim", 512}}}};
  expect_one_line_naming(error_of([&] { lumen::spec::spec_from_hf_config(c, "config.json"); }),
                         "per_layer_config.60");
  c["per_layer_config"] = {{"05", {{"rope_theta", 5}}}};
  expect_one_line_naming(error_of([&] { lumen::spec::spec_from_hf_config(c, "config.json"); }),
                         "per_layer_config.05.rope_theta");
}

TEST(ModelSpecHf, LoadFromDirectory) {
  const auto seed = ::testing::UnitTest::GetInstance()->random_seed();
  const auto dir =
      std::filesystem::temp_directory_path() / ("lumen_spec_test_" + std::to_string(seed));
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "config.json");
    out << hf_12b_wrapped().dump(2);
  }
  const ModelSpec s = lumen::spec::load_spec(dir.string());
  expect_12b_hf_spec(s);
  EXPECT_EQ(s.source, (dir / "config.json").string());
  {
    std::ofstream out(dir / "config.json");
    out << "{\"model_type\": \n \"gemma4\",";
  }
  const std::string msg = error_of([&] { lumen::spec::load_spec(dir.string()); });
  expect_one_line_naming(msg, "not valid JSON");
  std::filesystem::remove_all(dir);
  expect_one_line_naming(error_of([&] { lumen::spec::load_spec(dir.string()); }), dir.string());
}

TEST(ModelSpecHf, DefaultsFollowTransformers) {
  // Minimal config: every absent field takes Gemma4TextConfig's default.
  json c = {{"model_type", "gemma4_text"}, {"hidden_size_per_layer_input", 0}};
  const ModelSpec s = lumen::spec::spec_from_hf_config(c, "config.json");
  ASSERT_EQ(s.num_layers(), 30);
  EXPECT_EQ(s.hidden_size, 2304);
  EXPECT_EQ(s.layers[0].kind, AttentionKind::Sliding);
  EXPECT_EQ(s.layers[5].kind, AttentionKind::Full);
  EXPECT_EQ(s.layers[29].kind, AttentionKind::Full);
  EXPECT_EQ(s.layers[0].window, 512);
  EXPECT_EQ(s.layers[5].head_dim, 512);
  EXPECT_EQ(s.layers[5].num_kv_heads, 4);  // not k=v: the global KV count is not taken
  EXPECT_FALSE(s.layers[5].k_eq_v);
  EXPECT_EQ(s.layers[5].rope.rotated_pairs(512), 64);
  EXPECT_EQ(s.layers[0].rope.theta, 1e4);
  EXPECT_EQ(s.tokens.stop, (std::vector<int>{1}));
  EXPECT_FALSE(s.final_logit_softcap.has_value());

  EXPECT_EQ(s.per_layer_input_dim, 0);
  // An absent hidden_size_per_layer_input means transformers' default: per-layer inputs of 256
  // over its default table of 262144 rows.
  const ModelSpec d = lumen::spec::spec_from_hf_config({{"model_type", "gemma4_text"}}, "config.json");
  EXPECT_EQ(d.per_layer_input_dim, 256);
  EXPECT_EQ(d.per_layer_vocab, 262144);
}

TEST(ModelSpecHf, LastLayerForcedFull) {
  json c = hf_12b_text_config();
  c["layer_types"][47] = "sliding_attention";
  const ModelSpec s = lumen::spec::spec_from_hf_config(c, "config.json");
  EXPECT_EQ(s.layers[47].kind, AttentionKind::Full);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("forced"), std::string::npos);
}

TEST(ModelSpecHf, WrapperTieFlagDecides) {
  // Gemma4ForConditionalGeneration ties by the wrapper's flag, not text_config's.
  json c = hf_12b_wrapped();
  c["text_config"]["tie_word_embeddings"] = false;
  ModelSpec s = lumen::spec::spec_from_hf_config(c, "config.json");
  EXPECT_TRUE(s.tie_embeddings);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("tie_word_embeddings"), std::string::npos);
  c["tie_word_embeddings"] = false;
  s = lumen::spec::spec_from_hf_config(c, "config.json");
  EXPECT_FALSE(s.tie_embeddings);
  EXPECT_TRUE(s.notes.empty());
}

TEST(ModelSpecHf, TinyVocabDropsUnreachableStopIds) {
  // Tiny test models keep the real [1, 106] eos list; transformers only warns.
  json c = hf_12b_text_config();
  c["vocab_size"] = 64;
  const ModelSpec s = lumen::spec::spec_from_hf_config(c, "config.json");
  EXPECT_EQ(s.tokens.stop, (std::vector<int>{1}));
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("106"), std::string::npos);
}

TEST(ModelSpecHf, ExpectedTensors) {
  const ModelSpec s = lumen::spec::spec_from_hf_config(hf_12b_text_config(), "config.json");
  const auto tensors = lumen::spec::expected_tensors(s);
  // 48 layers x 13 (q/k norms, scalar included) + v_proj on 40 sliding layers + embed + norm.
  EXPECT_EQ(tensors.size(), size_t(48 * 13 + 40 + 2));
  auto shape_of = [&](const std::string& name) {
    for (const auto& t : tensors) {
      if (t.name == name) return t.shape;
    }
    ADD_FAILURE() << "missing " << name;
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{4096, 3840}));
  EXPECT_EQ(shape_of("layers.0.self_attn.k_proj.weight"), (std::vector<int64_t>{2048, 3840}));
  EXPECT_EQ(shape_of("layers.0.self_attn.v_proj.weight"), (std::vector<int64_t>{2048, 3840}));
  EXPECT_EQ(shape_of("layers.5.self_attn.q_proj.weight"), (std::vector<int64_t>{8192, 3840}));
  EXPECT_EQ(shape_of("layers.5.self_attn.k_proj.weight"), (std::vector<int64_t>{512, 3840}));
  EXPECT_EQ(shape_of("layers.5.self_attn.o_proj.weight"), (std::vector<int64_t>{3840, 8192}));
  EXPECT_EQ(shape_of("layers.5.self_attn.q_norm.weight"), (std::vector<int64_t>{512}));
  EXPECT_EQ(shape_of("layers.7.mlp.down_proj.weight"), (std::vector<int64_t>{3840, 15360}));
  EXPECT_EQ(shape_of("layers.47.layer_scalar"), (std::vector<int64_t>{1}));
  EXPECT_EQ(shape_of("embed_tokens.weight"), (std::vector<int64_t>{262144, 3840}));
  EXPECT_EQ(shape_of("norm.weight"), (std::vector<int64_t>{3840}));

  json untied = hf_12b_text_config();
  untied["tie_word_embeddings"] = false;
  const auto with_head =
      lumen::spec::expected_tensors(lumen::spec::spec_from_hf_config(untied, "config.json"));
  EXPECT_EQ(with_head.back().name, "lm_head.weight");
  EXPECT_EQ(with_head.back().shape, (std::vector<int64_t>{262144, 3840}));
}

TEST(ModelSpecHf, Errors) {
  auto msg_for = [](const json& c) {
    return error_of([&] { lumen::spec::spec_from_hf_config(c, "cfg.json"); });
  };
  {
    json c = hf_12b_text_config();
    c["model_type"] = "llama";
    const std::string msg = msg_for(c);
    expect_one_line_naming(msg, "model_type 'llama'");
    EXPECT_NE(msg.find("gemma4_unified_text"), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("cfg.json: ", 0), 0u) << msg;
  }
  {
    json c = hf_12b_text_config();
    c["mystery_knob"] = 3;
    expect_one_line_naming(msg_for(c), "mystery_knob");
  }
  {
    json c = hf_12b_wrapped();
    c["text_config"]["mystery_knob"] = 3;
    expect_one_line_naming(msg_for(c), "text_config.mystery_knob");
  }
  {
    json c = hf_12b_text_config();
    c["hidden_size"] = "3840";
    const std::string msg = msg_for(c);
    expect_one_line_naming(msg, "hidden_size");
    EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  }
  {
    json c = hf_12b_text_config();
    c["layer_types"].erase(0);
    const std::string msg = msg_for(c);
    expect_one_line_naming(msg, "layer_types");
    EXPECT_NE(msg.find("num_hidden_layers"), std::string::npos) << msg;
  }
  {
    json c = hf_12b_text_config();
    c["layer_types"][3] = "chunked_attention";
    expect_one_line_naming(msg_for(c), "layer_types");
  }
  {
    json c = hf_12b_text_config();
    c["num_key_value_heads"] = 3;
    const std::string msg = msg_for(c);
    expect_one_line_naming(msg, "num_key_value_heads");
    EXPECT_NE(msg.find("num_attention_heads"), std::string::npos) << msg;
  }
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"head_dim", 0},
           {"sliding_window", 0},
           {"hidden_size_per_layer_input", -1},
           {"num_kv_shared_layers", 48},
           {"enable_moe_block", true},
           {"use_bidirectional_attention", "vision"},
           {"attention_bias", true},
           {"hidden_activation", "silu"},
       }) {
    json c = hf_12b_text_config();
    c[key] = value;
    expect_one_line_naming(msg_for(c), key);
  }
  {
    json c = hf_12b_text_config();
    c["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
    expect_one_line_naming(msg_for(c), "rope_parameters.full_attention.rope_type");
  }
  {
    json c = hf_12b_wrapped();
    c.erase("text_config");
    expect_one_line_naming(msg_for(c), "text_config");
  }
}

// ---------------------------------------------------------------- JSON rendering

TEST(ModelSpecJson, RoundTripFields) {
  const ModelSpec s = lumen::spec::load_spec(kManifestPath);
  const json j = json::parse(lumen::spec::spec_to_json(s).dump());
  EXPECT_EQ(j["source_kind"], "manifest");
  EXPECT_EQ(j["model_type"], "gemma4_unified_text");
  EXPECT_EQ(j["vocab_size"], 262144);
  EXPECT_EQ(j["hidden_size"], 3840);
  EXPECT_EQ(j["num_layers"], 47);
  EXPECT_EQ(j["rms_eps"], 1e-6);
  EXPECT_EQ(j["attention_scale"], 1.0);
  EXPECT_TRUE(j["attn_logit_softcap"].is_null());
  EXPECT_EQ(j["final_logit_softcap"], 30.0);
  EXPECT_EQ(j["tie_embeddings"], true);
  EXPECT_EQ(j["norm_weight_offset"], false);
  EXPECT_EQ(j["activation"], "gelu_tanh");
  EXPECT_EQ(j["chat_template"], "gemma4");
  EXPECT_EQ(j["tokens"]["stop"], json({1, 106}));
  EXPECT_EQ(j["tokens"]["bos"], 2);
  ASSERT_EQ(j["layers"].size(), 47u);
  const json& l5 = j["layers"][5];
  EXPECT_EQ(l5["index"], 5);
  EXPECT_EQ(l5["kind"], "full");
  EXPECT_EQ(l5["head_dim"], 512);
  EXPECT_EQ(l5["num_kv_heads"], 1);
  EXPECT_EQ(l5["window"], 0);
  EXPECT_EQ(l5["k_eq_v"], true);
  EXPECT_EQ(l5["q_norm_weight"], true);
  EXPECT_EQ(l5["rope"]["theta"], 1e6);
  EXPECT_EQ(l5["rope"]["rotated_pairs"], 64);
  EXPECT_EQ(l5["rope"]["freq_base_dim"], 512);
  EXPECT_EQ(l5["rope"]["type"], "proportional");
  EXPECT_EQ(j["layers"][0]["kind"], "sliding");
  EXPECT_EQ(j["layers"][0]["q_norm_weight"], false);
  EXPECT_EQ(j["layers"][21]["has_layer_scalar"], false);
  EXPECT_EQ(j["layers"][21]["missing_layer_scalar"], 1.0);
  EXPECT_EQ(j["unsupported"]["code"], "gemma4-12b-litert-direct-source-unverified");
  EXPECT_TRUE(j["unsupported"]["recommendation"].is_string());
  ASSERT_TRUE(j["notes"].is_array());
  EXPECT_FALSE(j["notes"].empty());

  const json h = lumen::spec::spec_to_json(
      lumen::spec::spec_from_hf_config(hf_12b_text_config(), "config.json"));
  EXPECT_TRUE(h["unsupported"].is_null());
  EXPECT_EQ(float(h["embedding_scale"].get<double>()), std::sqrt(3840.0f));
  EXPECT_EQ(h["num_layers"], 48);
}
