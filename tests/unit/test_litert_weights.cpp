// The LiteRT constant map (spec/litert_map.h), the binder (model/weights_litert.h) and SHA-256.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "test_helpers.h"
#include "formats/sha256.h"
#include "model/weights_litert.h"
#include "quant/int4.h"
#include "quant/repack.h"
#include "spec/litert_map.h"
#include "tiny_model.h"

namespace lumen {
namespace {

using formats::TfliteType;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(formats::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(formats::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(formats::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Fed in odd pieces: the same digest as in one piece.
  std::string million(1000000, 'a');
  formats::Sha256 h;
  for (size_t i = 0; i < million.size();) {
    const size_t n = std::min<size_t>(1 + i % 97, million.size() - i);
    h.update(million.data() + i, n);
    i += n;
  }
  EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(LitertMap, RoleFromName) {
  auto r = spec::role_from_name("model.layers.3.self_attn.q_proj.weight");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->layer, 3);
  EXPECT_EQ(r->role, "self_attn.q_proj");
  r = spec::role_from_name("model.language_model.layers.12.mlp.down_proj.weight");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->layer, 12);
  EXPECT_EQ(r->role, "mlp.down_proj");
  r = spec::role_from_name("layers.0.layer_scalar");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->role, "layer_scalar");
  r = spec::role_from_name("model.layers.1.self_attn.qkv_proj.weight");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->transform, spec::MapTransform::SplitQkv);
  r = spec::role_from_name("model.embed_tokens.weight");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->layer, -1);
  EXPECT_EQ(r->role, "embed_tokens");
  // ';'-joined: the first recognised part decides.
  r = spec::role_from_name("jit(fn)/mul;model.layers.2.input_layernorm.weight");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->layer, 2);
  EXPECT_EQ(r->role, "input_layernorm");
  // litert-torch module paths (python package prefixes, ';'-joined fused locations).
  const std::string block = "litert_torch.generative.utilities.converter.ExportableModule/litert_torch.generative.examples.gemma3.decoder.Decoder_module/litert_torch.generative.examples.gemma3.decoder.DecoderBlock_17/";
  r = spec::role_from_name(block + "litert_torch.generative.layers.attention.CausalSelfAttention_atten_func;;" + block +
                           "litert_torch.generative.layers.attention.CausalSelfAttention_atten_func/torch.nn.modules.linear.Linear_qkv_projection;3");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->layer, 17);
  EXPECT_EQ(r->role, "self_attn.qkv_proj");
  EXPECT_EQ(r->transform, spec::MapTransform::SplitQkv);
  r = spec::role_from_name(block + "litert_torch.generative.layers.feed_forward.GatedFeedForward_ff/torch.nn.modules.linear.Linear_w3;;" +
                           block + "litert_torch.generative.layers.feed_forward.GatedFeedForward_ff/torch.nn.modules.linear.Linear_w1;");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->role, "mlp.up_proj");
  r = spec::role_from_name(block + "litert_torch.generative.layers.normalization.RMSNorm_pre_atten_norm;2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->role, "input_layernorm");
  r = spec::role_from_name("litert_torch.generative.examples.gemma3.decoder.Decoder_module/litert_torch.generative.layers.normalization.RMSNorm_final_norm;");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->role, "norm");
  EXPECT_FALSE(spec::role_from_name(block + "litert_torch.generative.layers.attention.CausalSelfAttention_atten_func;"));
  EXPECT_FALSE(spec::role_from_name("arith.constant12"));
  EXPECT_FALSE(spec::role_from_name("model.layers.2.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(spec::role_from_name(""));
  EXPECT_EQ(spec::checkpoint_name(4, "mlp.up_proj"), "layers.4.mlp.up_proj.weight");
  EXPECT_EQ(spec::checkpoint_name(4, "layer_scalar"), "layers.4.layer_scalar");
  EXPECT_EQ(spec::checkpoint_name(-1, "norm"), "norm.weight");
}

// Constants held in memory (the binder reads PackageConstant views, not files).
struct FakePackage {
  std::vector<std::string> storage;
  spec::PackageConstants pc;
  void add(std::string name, TfliteType type, std::vector<int32_t> shape, std::string bytes,
           std::optional<formats::TfliteQuantization> q = std::nullopt) {
    storage.reserve(64);
    storage.push_back(std::move(bytes));
    spec::PackageConstant c;
    c.index = pc.constants.size();
    c.name = std::move(name);
    c.type = type;
    c.shape = std::move(shape);
    c.quantization = std::move(q);
    c.bytes = storage.back();
    pc.constants.push_back(c);
  }
};

spec::ModelSpec wide_spec() {
  spec::ModelSpec s = test_support::tiny_model_spec();
  s.hidden_size = 64;  // whole 32-blocks, so int4/int8 rows map to Q4_0/Q8_0
  return s;
}

std::string nibbles_of(const std::vector<int>& k, int zero_point) {
  std::string out(k.size() / 2, '\0');
  for (size_t i = 0; i < k.size(); ++i) {
    const uint8_t nib = uint8_t(zero_point == 8 ? k[i] + 8 : k[i] & 15);
    out[i / 2] = char(uint8_t(out[i / 2]) | (i % 2 ? nib << 4 : nib));
  }
  return out;
}

std::vector<int> random_codes(size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int> k(n);
  for (int& x : k) x = d(rng);
  return k;
}

std::vector<float> dequantized(const model::LitertTensor& t) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> out(size_t(rows * cols));
  quant::WeightMatrix m{t.format, rows, cols, t.data.data()};
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(m, r, out.data() + r * cols);
  return out;
}

TEST(LitertBinder, FixedScaleInt4MapsToQ4WithoutExpansion) {
  const spec::ModelSpec s = wide_spec();
  const auto k = random_codes(16 * 64, -8, 7, 1);
  formats::TfliteQuantization q;
  q.scale = {0.0625f};
  q.zero_point = {8};
  FakePackage p;
  p.add("model.layers.0.self_attn.q_proj.weight", TfliteType::INT4, {16, 64}, nibbles_of(k, 8), q);
  const spec::LitertMap map = spec::map_by_names(p.pc);
  ASSERT_EQ(map.entries.size(), 1u);
  const auto kern = model::decode_litert_entry(s, p.pc, map, map.entries[0], model::LitertTarget::Kernels);
  ASSERT_EQ(kern.size(), 1u);
  EXPECT_EQ(kern[0].format, quant::WeightFormat::Q4_0X4);
  EXPECT_EQ(kern[0].data.size(), quant::q4_0x4_bytes(16, 64));
  const auto f32 = model::decode_litert_entry(s, p.pc, map, map.entries[0], model::LitertTarget::F32);
  EXPECT_EQ(f32[0].format, quant::WeightFormat::F32);
  const auto got = dequantized(kern[0]);
  const auto* exact = reinterpret_cast<const float*>(f32[0].data.data());
  for (size_t i = 0; i < k.size(); ++i) {
    ASSERT_EQ(got[i], float(k[i]) * 0.0625f) << i;
    ASSERT_EQ(exact[i], float(k[i]) * 0.0625f) << i;
  }
}

TEST(LitertBinder, PerChannelInt4AndInt8) {
  const spec::ModelSpec s = wide_spec();
  const int rows = 24;  // gate_proj [ffn 24, hidden 64]
  const auto k4 = random_codes(size_t(rows) * 64, -8, 7, 2);
  const auto k8 = random_codes(size_t(64) * rows, -127, 127, 3);
  formats::TfliteQuantization q0, q8, qi8;
  for (int r = 0; r < rows; ++r) {
    q0.scale.push_back(0.01f + 0.001f * float(r) / 3.0f);  // not f16 values: expanded to f32
    q0.zero_point.push_back(0);
    q8.scale.push_back(float(r + 1) / 64.0f);  // f16 values: Q4_0 1:1
    q8.zero_point.push_back(8);
  }
  for (int r = 0; r < 64; ++r) {
    qi8.scale.push_back(float(r + 1) / 1024.0f);
    qi8.zero_point.push_back(0);
  }
  std::string i8(k8.size(), '\0');
  for (size_t i = 0; i < k8.size(); ++i) i8[i] = char(int8_t(k8[i]));
  FakePackage p;
  p.add("model.layers.0.mlp.up_proj.weight", TfliteType::INT4, {rows, 64}, nibbles_of(k4, 0), q0);
  p.add("model.layers.0.mlp.gate_proj.weight", TfliteType::INT4, {rows, 64}, nibbles_of(k4, 8), q8);
  p.add("model.layers.0.mlp.down_proj.weight", TfliteType::INT8, {64, rows}, i8, qi8);
  const spec::LitertMap map = spec::map_by_names(p.pc);
  ASSERT_EQ(map.entries.size(), 3u);
  const auto up = model::decode_litert_entry(s, p.pc, map, map.entries[0], model::LitertTarget::Kernels)[0];
  EXPECT_EQ(up.format, quant::WeightFormat::F32);
  const auto gate = model::decode_litert_entry(s, p.pc, map, map.entries[1], model::LitertTarget::Kernels)[0];
  EXPECT_EQ(gate.format, quant::WeightFormat::Q4_0X4);
  // down_proj [64, 24]: 24 columns are not whole 32-blocks, so f32.
  const auto down = model::decode_litert_entry(s, p.pc, map, map.entries[2], model::LitertTarget::Kernels)[0];
  EXPECT_EQ(down.format, quant::WeightFormat::F32);
  const auto gu = dequantized(up), gg = dequantized(gate), gd = dequantized(down);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < 64; ++i) {
      const size_t e = size_t(r) * 64 + size_t(i);
      ASSERT_EQ(gu[e], q0.scale[size_t(r)] * float(k4[e]));
      ASSERT_EQ(gg[e], q8.scale[size_t(r)] * float(k4[e]));
    }
  for (int r = 0; r < 64; ++r)
    for (int i = 0; i < rows; ++i) {
      const size_t e = size_t(r) * size_t(rows) + size_t(i);
      ASSERT_EQ(gd[e], qi8.scale[size_t(r)] * float(k8[e]));
    }
}

TEST(LitertBinder, Int8EmbeddingMapsToQ8AndFusedQkvSplits) {
  spec::ModelSpec s = wide_spec();
  s.vocab_size = 32;
  const auto k8 = random_codes(32 * 64, -127, 127, 4);
  std::string i8(k8.size(), '\0');
  for (size_t i = 0; i < k8.size(); ++i) i8[i] = char(int8_t(k8[i]));
  formats::TfliteQuantization q;
  q.scale.assign(32, 0.125f);
  q.zero_point.assign(32, 0);
  // Layer 0: 2 q heads x 8 + 2 kv heads x 8 (k) + 16 (v) = 48 rows.
  const auto kq = random_codes(48 * 64, -8, 7, 5);
  FakePackage p;
  p.add("model.embed_tokens.weight", TfliteType::INT8, {32, 64}, i8, q);
  p.add("model.layers.0.self_attn.qkv_proj.weight", TfliteType::INT4, {48, 64}, nibbles_of(kq, 8));
  spec::LitertMap map = spec::map_by_names(p.pc);
  map.fixed_int4 = spec::FixedInt4{};
  const auto emb = model::decode_litert_entry(s, p.pc, map, map.entries[0], model::LitertTarget::Kernels)[0];
  EXPECT_EQ(emb.format, quant::WeightFormat::Q8_0X4);
  const auto ge = dequantized(emb);
  for (size_t i = 0; i < k8.size(); ++i) ASSERT_EQ(ge[i], 0.125f * float(k8[i]));
  const auto parts = model::decode_litert_entry(s, p.pc, map, map.entries[1], model::LitertTarget::Kernels);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].role, "self_attn.q_proj");
  EXPECT_EQ(parts[1].role, "self_attn.k_proj");
  EXPECT_EQ(parts[2].role, "self_attn.v_proj");
  int64_t first = 0;
  for (const auto& t : parts) {
    const auto g = dequantized(t);
    for (int64_t i = 0; i < t.shape[0] * 64; ++i) ASSERT_EQ(g[size_t(i)], float(kq[size_t(first * 64 + i)]) * 0.0625f);
    first += t.shape[0];
  }
  // Without the map's fixed_int4 an INT4 constant without parameters is refused.
  map.fixed_int4.reset();
  try {
    model::decode_litert_entry(s, p.pc, map, map.entries[1], model::LitertTarget::Kernels);
    FAIL() << "accepted INT4 without a scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("constant 1 'model.layers.0.self_attn.qkv_proj.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fixed_int4"), std::string::npos) << e.what();
  }
}

TEST(LitertBinder, WrongShapeAndMissingTensorsNameTheConstant) {
  const spec::ModelSpec s = wide_spec();
  FakePackage p;
  p.add("model.layers.0.self_attn.q_proj.weight", TfliteType::FLOAT32, {64, 16}, std::string(64 * 16 * 4, '\0'));
  const spec::LitertMap map = spec::map_by_names(p.pc);
  try {
    model::decode_litert_entry(s, p.pc, map, map.entries[0], model::LitertTarget::Kernels);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("constant 0 'model.layers.0.self_attn.q_proj.weight' (FLOAT32 [64, 16])"), std::string::npos) << m;
    EXPECT_NE(m.find("[16, 64]"), std::string::npos) << m;
  }
  FakePackage q;
  q.add("model.layers.0.input_layernorm.weight", TfliteType::FLOAT32, {64}, std::string(64 * 4, '\0'));
  try {  // a layer without any constant is the finding
    model::bind_litert_weights(s, q.pc, spec::map_by_names(q.pc));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no constant maps to layer 1 (mapped by the name rules"), std::string::npos) << e.what();
  }
  q.add("model.layers.1.input_layernorm.weight", TfliteType::FLOAT32, {64}, std::string(64 * 4, '\0'));
  try {
    model::bind_litert_weights(s, q.pc, spec::map_by_names(q.pc));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no constant maps to layer 0 self_attn.q_proj"), std::string::npos) << e.what();
  }
  // Two constants for one (layer, role).
  q.add("model.layers.0.input_layernorm.weight", TfliteType::FLOAT32, {64}, std::string(64 * 4, '\0'));
  try {
    spec::map_by_names(q.pc);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("constant 2"), std::string::npos) << m;
    EXPECT_NE(m.find("constant 0"), std::string::npos) << m;
    EXPECT_NE(m.find("both map to layer 0 input_layernorm"), std::string::npos) << m;
  }
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = test_support::process_temp_dir("lumen-litert-map-") / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(LitertMap, MapFileIsCheckedAgainstThePackage) {
  FakePackage p;
  p.add("arith.constant0", TfliteType::FLOAT32, {64}, std::string(256, '\0'));
  p.add("arith.constant1", TfliteType::FLOAT32, {64}, std::string(256, '\0'));
  p.pc.package = "pkg.litertlm";
  p.pc.table_sha256 = std::string(64, 'a');
  const std::string head = R"({"schema": "lumen.litert-map/v1", "package_tensor_table_sha256": ")" + p.pc.table_sha256 + "\", ";
  const auto ok = spec::load_map_file(
      write_temp("ok", head + R"("entries": [{"constant": 1, "layer": 0, "role": "input_layernorm", "transform": "gain_plus_1"},
                                   {"name": "arith.constant0", "role": "norm"}]})"),
      p.pc);
  ASSERT_EQ(ok.entries.size(), 2u);
  EXPECT_EQ(ok.entries[0].transform, spec::MapTransform::GainPlusOne);
  EXPECT_EQ(ok.entries[1].layer, -1);
  EXPECT_EQ(ok.kind, "file");
  EXPECT_EQ(ok.sha256.size(), 64u);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{", "not valid JSON"},
      {R"({"schema": "lumen.litert-map/v2", "entries": []})", "expected \"lumen.litert-map/v1\""},
      {R"({"schema": "lumen.litert-map/v1", "package_tensor_table_sha256": "bbbb", "entries": []})", "written for another package"},
      {head + R"("entries": [{"constant": 2, "layer": 0, "role": "input_layernorm"}]})", "is not a constant of pkg.litertlm"},
      {head + R"("entries": [{"constant": 0, "layer": 0, "role": "self_attn.x_proj"}]})", "unknown role 'self_attn.x_proj'"},
      {head + R"("entries": [{"constant": 0, "layer": 0, "role": "norm"}]})", "is not a layer tensor"},
      {head + R"("entries": [{"constant": 0, "role": "input_layernorm"}]})", "needs a `layer`"},
      {head + R"("entries": [{"constant": 0, "layer": 4294967296, "role": "input_layernorm"}]})", "is not -1 or a layer index"},
      {head + R"("entries": [{"constant": 0, "layer": -2, "role": "input_layernorm"}]})", "is not -1 or a layer index"},
      {head + R"("entries": [{"name": "nope", "layer": 0, "role": "input_layernorm"}]})", "no constant of pkg.litertlm is named"},
      {head + R"("entries": [{"constant": 0, "layer": 1, "role": "input_layernorm"}, {"constant": 1, "layer": 1, "role": "input_layernorm"}]})",
       "both map to layer 1 input_layernorm"},
      {head + R"("entries": [{"constant": 0, "layer": 1, "role": "input_layernorm"}, {"constant": 0, "layer": 1, "role": "input_layernorm"}]})",
       "is listed twice"},
      {head + R"("entries": [{"constant": 0, "layer": 1, "role": "input_layernorm", "transform": "split_qkv"}]})", "does not apply"},
      {head + R"("fixed_int4": {"scale": -1}, "entries": []})", "fixed_int4.scale"},
      {head + R"("fixed_int4": {"scale": 1, "storage": 3}, "entries": []})", "`fixed_int4.storage` is not a string"},
      {head + R"("entries": 3})", "`entries` is missing or not an array"},
  };
  int i = 0;
  for (const auto& [text, want] : bad) {
    const std::string path = write_temp("bad" + std::to_string(i++), text);
    try {
      spec::load_map_file(path, p.pc);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(want), std::string::npos) << m;
      EXPECT_EQ(m.rfind(path, 0), 0u) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos);
    }
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace lumen

namespace lumen {
namespace {

TEST(Gemma3HfConfig, SpecFromTextConfig) {
  const auto cfg = nlohmann::json::parse(R"({
    "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640, "intermediate_size": 2048,
    "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
    "max_position_embeddings": 32768, "sliding_window": 512, "sliding_window_pattern": 6,
    "query_pre_attn_scalar": 256, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh", "eos_token_id": 1,
    "final_logit_softcapping": null, "rope_scaling": null, "tie_word_embeddings": true})");
  const spec::ModelSpec s = spec::spec_from_hf_config(cfg, "config.json");
  EXPECT_EQ(s.family, "gemma3");
  EXPECT_TRUE(s.norm_weight_offset);
  EXPECT_EQ(s.num_layers(), 18);
  EXPECT_FLOAT_EQ(s.attention_scale, 1.0f / 16.0f);
  EXPECT_FALSE(s.final_logit_softcap);
  for (int l = 0; l < 18; ++l) {
    const auto& ls = s.layers[size_t(l)];
    EXPECT_EQ(ls.kind, (l + 1) % 6 == 0 ? spec::AttentionKind::Full : spec::AttentionKind::Sliding) << l;
    EXPECT_EQ(ls.window, (l + 1) % 6 == 0 ? 0 : 512);
    EXPECT_DOUBLE_EQ(ls.rope.theta, (l + 1) % 6 == 0 ? 1e6 : 1e4);
    EXPECT_FALSE(ls.k_eq_v);
    EXPECT_FALSE(ls.v_norm);
    EXPECT_FALSE(ls.has_layer_scalar);
  }
  auto bad = cfg;
  bad["hidden_activation"] = "silu";
  EXPECT_THROW(spec::spec_from_hf_config(bad, "config.json"), Error);
  bad = cfg;
  bad.erase("num_hidden_layers");
  try {
    spec::spec_from_hf_config(bad, "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lumen
