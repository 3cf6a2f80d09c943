// A checkpoint described as llama.cpp's converter writes a gemma4 GGUF (spec/gguf_export.h,
// tokenizer/gguf_vocab_export.h): the keys for E2B's shape, the tensor names, the rope_freqs
// factors, the vocabulary's tokens, types, merges and special ids, and the refusals. (Equality
// with convert_hf_to_gguf.py itself: tests/parity/test_quantize_checkpoint.py.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "spec/gguf_export.h"
#include "spec/model_spec.h"
#include "tokenizer/gguf_vocab_export.h"
#include "test_helpers.h"

using lumen::test_support::error_of;

namespace {

using namespace lumen;
using nlohmann::json;
namespace fs = std::filesystem;

json e2b_export_config() {
  std::vector<std::string> types;
  for (int i = 0; i < 35; ++i) types.push_back(i % 5 == 4 ? "full_attention" : "sliding_attention");
  return {{"model_type", "gemma4_text"}, {"hidden_size", 1536}, {"intermediate_size", 6144},
          {"num_hidden_layers", 35}, {"num_attention_heads", 8}, {"num_key_value_heads", 1},
          {"head_dim", 256}, {"global_head_dim", 512}, {"sliding_window", 512},
          {"hidden_size_per_layer_input", 256}, {"vocab_size_per_layer_input", 262144},
          {"num_kv_shared_layers", 20}, {"use_double_wide_mlp", true}, {"attention_k_eq_v", false},
          {"layer_types", types}, {"final_logit_softcapping", 30.0}, {"max_position_embeddings", 131072}};
}

// Writes `md` with no tensors and reads it back.
formats::GgufFile round_trip(const formats::GgufMetadata& md, const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("lumen-gguf-export-" + std::to_string(::getpid()) + "-" + tag + ".gguf");
  formats::GgufWriter w(p.string(), md, {});
  w.finish();
  formats::GgufFile f = formats::GgufFile::open(p.string());
  fs::remove(p);  // the open file stays readable; nothing is left in the temp folder
  return f;
}

TEST(GgufExport, E2BKeysAsTheConverterWritesThem) {
  const json config = e2b_export_config();
  const spec::ModelSpec s = spec::spec_from_hf_config(config, "e2b.json");
  formats::GgufMetadata md;
  spec::add_gemma4_gguf_metadata(s, config, "e2b", md);
  const formats::GgufFile f = round_trip(md, "e2b");
  EXPECT_EQ(f.get_string("general.architecture"), "gemma4");
  EXPECT_EQ(f.get_int("gemma4.block_count"), 35);
  EXPECT_EQ(f.get_int("gemma4.context_length"), 131072);
  EXPECT_EQ(f.get_int("gemma4.embedding_length"), 1536);
  // Double-wide MLP on the 20 KV-shared layers: one width per layer.
  const auto ffn = f.get_int_array("gemma4.feed_forward_length");
  ASSERT_EQ(ffn.size(), 35u);
  EXPECT_EQ(ffn[14], 6144);
  EXPECT_EQ(ffn[15], 12288);
  // No num_global_key_value_heads in the config: one KV head count, as a scalar.
  EXPECT_EQ(f.get_int("gemma4.attention.head_count_kv"), 1);
  EXPECT_EQ(f.get_int("gemma4.attention.key_length"), 512);
  EXPECT_EQ(f.get_int("gemma4.attention.key_length_swa"), 256);
  EXPECT_EQ(f.get_int("gemma4.rope.dimension_count"), 512);
  EXPECT_EQ(f.get_int("gemma4.rope.dimension_count_swa"), 256);
  EXPECT_EQ(f.get_int("gemma4.attention.shared_kv_layers"), 20);
  EXPECT_EQ(f.get_int("gemma4.embedding_length_per_layer_input"), 256);
  EXPECT_EQ(f.get_int("gemma4.attention.sliding_window"), 512);
  EXPECT_FLOAT_EQ(float(f.get_float("gemma4.final_logit_softcapping")), 30.0f);
  const auto& pattern = f.get_array("gemma4.attention.sliding_window_pattern");
  EXPECT_EQ(pattern.size(), 35u);

  // With the full layers' KV heads named apart, the converter writes one count per layer
  // (transformers uses num_global_key_value_heads on the k == v full layers).
  json with_global = config;
  with_global["num_global_key_value_heads"] = 2;
  with_global["attention_k_eq_v"] = true;
  const spec::ModelSpec s2 = spec::spec_from_hf_config(with_global, "e2b.json");
  formats::GgufMetadata md2;
  spec::add_gemma4_gguf_metadata(s2, with_global, "e2b", md2);
  const auto kv = round_trip(md2, "e2b-kv").get_int_array("gemma4.attention.head_count_kv");
  ASSERT_EQ(kv.size(), 35u);
  EXPECT_EQ(kv[0], 1);
  EXPECT_EQ(kv[4], 2);

  // Proportional RoPE on the full layers: a quarter of the 256 pairs rotate.
  const std::vector<float> freqs = spec::gemma4_rope_freqs(s);
  ASSERT_EQ(freqs.size(), 256u);
  EXPECT_EQ(freqs[63], 1.0f);
  EXPECT_EQ(freqs[64], 1e30f);
}

TEST(GgufExport, TensorNames) {
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("norm.weight"), "output_norm.weight");
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("layers.12.self_attn.q_proj.weight"), "blk.12.attn_q.weight");
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("layers.0.pre_feedforward_layernorm.weight"), "blk.0.ffn_norm.weight");
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("layers.3.layer_scalar"), "blk.3.layer_output_scale.weight");
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("layers.3.per_layer_input_gate.weight"), "blk.3.inp_gate.weight");
  EXPECT_EQ(spec::gemma4_gguf_tensor_name("embed_tokens_per_layer.weight"), "per_layer_token_embd.weight");
  EXPECT_FALSE(spec::gemma4_gguf_tensor_name("layers.x.mlp.up_proj.weight"));
  EXPECT_FALSE(spec::gemma4_gguf_tensor_name("layers.1.self_attn.rotary.weight"));
  EXPECT_FALSE(spec::gemma4_gguf_tensor_name("vision_tower.weight"));
}

TEST(GgufExport, RefusesWhatTheConverterDoesNotWrite) {
  json moe = e2b_export_config();
  moe["enable_moe_block"] = true;
  moe["num_experts"] = 8;
  moe["top_k_experts"] = 2;
  moe["moe_intermediate_size"] = 128;
  moe["num_kv_shared_layers"] = 0;
  moe["use_double_wide_mlp"] = false;
  moe["hidden_size_per_layer_input"] = 0;
  const spec::ModelSpec s = spec::spec_from_hf_config(moe, "moe.json");
  formats::GgufMetadata md;
  EXPECT_NE(error_of([&] { spec::add_gemma4_gguf_metadata(s, moe, "moe", md); }).find("mixture-of-experts"), std::string::npos);
  spec::ModelSpec g3 = spec::spec_from_hf_config(e2b_export_config(), "e2b.json");
  g3.family = "gemma3";
  EXPECT_NE(error_of([&] { spec::add_gemma4_gguf_metadata(g3, e2b_export_config(), "g3", md); }).find("Gemma 4 checkpoints only"),
            std::string::npos);
}

class VocabExport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lumen-vocab-export-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const json& j) { std::ofstream(dir_ / name) << j.dump(); }

  json tokenizer() const {
    json vocab = {{"<pad>", 0}, {"<eos>", 1}, {"<bos>", 2}, {"<unk>", 3}, {"<|channel>", 4}, {"<0x0A>", 5},
                  {"a", 6}, {"b", 7}, {"a b", 8}, {"<|turn>", 9}};
    return {{"added_tokens", json::array({{{"id", 0}, {"content", "<pad>"}, {"special", true}},
                                          {{"id", 2}, {"content", "<bos>"}, {"special", true}},
                                          {{"id", 10}, {"content", "<extra>"}, {"special", false}}})},
            {"post_processor", {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}}}}, {{"Sequence", {{"id", "A"}}}}})}}},
            {"decoder", {{"type", "Sequence"}}},
            {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"vocab", vocab},
                       {"merges", json::array({json::array({"a", " b"}), "a b"})}}}};
  }
  fs::path dir_;
};

TEST_F(VocabExport, TokensTypesMergesAndSpecials) {
  write("tokenizer.json", tokenizer());
  write("tokenizer_config.json", {{"bos_token", "<bos>"}, {"pad_token", {{"content", "<pad>"}}}, {"eos_token", "<eos>"},
                                  {"extra_special_tokens", json::array({"<|turn>", "<|channel>"})},
                                  {"add_eos_token", false}, {"chat_template", "{{ bos_token }}"}});
  write("config.json", {{"eos_token_id", 1}, {"bos_token_id", 7}});
  formats::GgufMetadata md;
  EXPECT_EQ(tokenizer::add_gemma4_vocab_to_gguf(dir_.string(), md), 13);  // the converter's count: 11 + 2 added
  const formats::GgufFile f = round_trip(md, "vocab");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gemma4");
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 11u);
  EXPECT_EQ(tokens[8], "a b");
  EXPECT_EQ(tokens[10], "<extra>");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  EXPECT_EQ(types[0], 3);   // <pad>: a named special token
  EXPECT_EQ(types[1], 3);   // <eos>
  EXPECT_EQ(types[3], 1);   // <unk>: not named in tokenizer_config
  EXPECT_EQ(types[4], 4);   // <|channel>: special, but rendered (USER_DEFINED)
  EXPECT_EQ(types[5], 6);   // a byte
  EXPECT_EQ(types[9], 3);   // an extra special token
  EXPECT_EQ(types[10], 4);  // an added token past the vocabulary
  EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores")[6], -1000.0f);
  const auto merges = f.get_string_array("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 2u);
  EXPECT_EQ(merges[0], "a \xC4\xA0" "b");  // the space inside a part as U+0120
  EXPECT_EQ(merges[1], "a b");
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 2);  // tokenizer_config first, config.json after
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 0);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), "{{ bos_token }}");
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_space_prefix"));
}

TEST_F(VocabExport, BadTokenizersAreNamed) {
  formats::GgufMetadata md;
  EXPECT_NE(error_of([&] { tokenizer::add_gemma4_vocab_to_gguf(dir_.string(), md); }).find("tokenizer.json: no such file"),
            std::string::npos);
  json t = tokenizer();
  t["model"]["type"] = "Unigram";
  write("tokenizer.json", t);
  EXPECT_NE(error_of([&] { tokenizer::add_gemma4_vocab_to_gguf(dir_.string(), md); }).find("byte-fallback BPE"), std::string::npos);
  t = tokenizer();
  t["added_tokens"].push_back({{"id", 12}, {"content", "<gap>"}});
  write("tokenizer.json", t);
  EXPECT_NE(error_of([&] { tokenizer::add_gemma4_vocab_to_gguf(dir_.string(), md); }).find("expected 11"), std::string::npos);
}

}  // namespace
