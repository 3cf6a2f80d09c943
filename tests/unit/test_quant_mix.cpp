// llama.cpp's per-tensor mixes (quant/quant_mix.h) on Gemma 3 270M's tensors (18 layers,
// hidden 640: rows of 640 are not a whole number of 256-blocks, so most K-quants fall back).
// The Q4_K_M expectation is the type list of the real Gemma 3 270M Q4_K_M GGUF (Google's,
// written by llama-quantize): token_embd Q8_0, attn_output Q4_K, attn_q/k, ffn_gate/up
// Q5_0, attn_v Q8_0 and ffn_down Q6_K on layers 0 1 4 7 10 13 15 16 17 (else Q5_0 / Q4_K).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "base/error.h"
#include "formats/gguf.h"
#include "quant/quant_mix.h"

using namespace lumen;
using formats::GgmlType;

namespace {

constexpr int kLayers = 18;

std::vector<quant::MixTensor> gemma3_270m_tensors() {
  std::vector<quant::MixTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> ne) { t.push_back({std::move(name), int(GgmlType::F32), std::move(ne)}); };
  add("token_embd.weight", {640, 262144});
  add("output_norm.weight", {640});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {640});
    add(p + "attn_q.weight", {640, 1024});
    add(p + "attn_k.weight", {640, 256});
    add(p + "attn_v.weight", {640, 256});
    add(p + "attn_output.weight", {1024, 640});
    add(p + "attn_q_norm.weight", {256});
    add(p + "attn_k_norm.weight", {256});
    add(p + "post_attention_norm.weight", {640});
    add(p + "ffn_norm.weight", {640});
    add(p + "ffn_gate.weight", {640, 2048});
    add(p + "ffn_up.weight", {640, 2048});
    add(p + "ffn_down.weight", {2048, 640});
    add(p + "post_ffw_norm.weight", {640});
  }
  return t;
}

std::map<std::string, int> mix(quant::FileType ft, bool imatrix = false, std::vector<quant::TensorTypeOverride> o = {}) {
  const auto tensors = gemma3_270m_tensors();
  quant::MixOptions opt;
  opt.file_type = ft;
  opt.has_imatrix = imatrix;
  opt.n_layers = kLayers;
  opt.n_gqa = 4;
  opt.overrides = std::move(o);
  const auto types = quant::choose_tensor_types(tensors, opt);
  std::map<std::string, int> out;
  for (size_t i = 0; i < tensors.size(); ++i) out[tensors[i].name] = types[i];
  return out;
}

const std::set<int> kMoreBits = {0, 1, 4, 7, 10, 13, 15, 16, 17};

std::string blk(int l, const char* what) { return "blk." + std::to_string(l) + "." + what + ".weight"; }

}  // namespace

TEST(QuantMix, Q4_K_MMatchesTheRealGemma3File) {
  const auto m = mix(quant::FileType::Q4_K_M);
  EXPECT_EQ(m.at("token_embd.weight"), int(GgmlType::Q8_0));
  EXPECT_EQ(m.at("output_norm.weight"), int(GgmlType::F32));
  for (int l = 0; l < kLayers; ++l) {
    const bool more = kMoreBits.count(l) > 0;
    EXPECT_EQ(m.at(blk(l, "attn_q")), int(GgmlType::Q5_0)) << l;
    EXPECT_EQ(m.at(blk(l, "attn_k")), int(GgmlType::Q5_0)) << l;
    EXPECT_EQ(m.at(blk(l, "attn_v")), int(more ? GgmlType::Q8_0 : GgmlType::Q5_0)) << l;
    EXPECT_EQ(m.at(blk(l, "attn_output")), int(GgmlType::Q4_K)) << l;
    EXPECT_EQ(m.at(blk(l, "ffn_gate")), int(GgmlType::Q5_0)) << l;
    EXPECT_EQ(m.at(blk(l, "ffn_up")), int(GgmlType::Q5_0)) << l;
    EXPECT_EQ(m.at(blk(l, "ffn_down")), int(more ? GgmlType::Q6_K : GgmlType::Q4_K)) << l;
    EXPECT_EQ(m.at(blk(l, "attn_norm")), int(GgmlType::F32)) << l;
  }
}

TEST(QuantMix, OtherMixes) {
  auto m = mix(quant::FileType::Q4_K_S);
  for (int l = 0; l < kLayers; ++l) {
    EXPECT_EQ(m.at(blk(l, "attn_v")), int(l < 4 ? GgmlType::Q5_1 : GgmlType::Q5_0)) << l;  // Q5_K falls back
    EXPECT_EQ(m.at(blk(l, "ffn_down")), int(l < 2 ? GgmlType::Q5_K : GgmlType::Q4_K)) << l;
  }
  m = mix(quant::FileType::Q5_K_M);
  for (int l = 0; l < kLayers; ++l)
    EXPECT_EQ(m.at(blk(l, "ffn_down")), int(kMoreBits.count(l) ? GgmlType::Q6_K : GgmlType::Q5_K)) << l;
  EXPECT_EQ(m.at(blk(3, "attn_q")), int(GgmlType::Q5_1));
  m = mix(quant::FileType::Q6_K);
  EXPECT_EQ(m.at(blk(3, "attn_q")), int(GgmlType::Q8_0));
  EXPECT_EQ(m.at(blk(3, "ffn_down")), int(GgmlType::Q6_K));
  m = mix(quant::FileType::Q8_0);
  EXPECT_EQ(m.at("token_embd.weight"), int(GgmlType::Q8_0));
  EXPECT_EQ(m.at(blk(3, "ffn_down")), int(GgmlType::Q8_0));
  // IQ4_XS: attn_v Q5_K (4 query heads per KV head) -> Q5_1; ffn_down's first eighth Q5_K
  // without an imatrix only; the embedding Q6_K -> Q8_0.
  m = mix(quant::FileType::IQ4_XS);
  EXPECT_EQ(m.at(blk(0, "attn_v")), int(GgmlType::Q5_1));
  EXPECT_EQ(m.at(blk(0, "ffn_down")), int(GgmlType::Q5_K));
  EXPECT_EQ(m.at(blk(2, "ffn_down")), int(GgmlType::IQ4_XS));
  EXPECT_EQ(m.at(blk(2, "attn_q")), int(GgmlType::IQ4_NL));
  EXPECT_EQ(mix(quant::FileType::IQ4_XS, true).at(blk(0, "ffn_down")), int(GgmlType::IQ4_XS));
  // Q4_0: the embedding to Q6_K -> Q8_0; with an imatrix the first eighth of ffn_down Q4_1.
  m = mix(quant::FileType::Q4_0);
  EXPECT_EQ(m.at("token_embd.weight"), int(GgmlType::Q8_0));
  EXPECT_EQ(m.at(blk(0, "ffn_down")), int(GgmlType::Q4_0));
  EXPECT_EQ(mix(quant::FileType::Q4_0, true).at(blk(1, "ffn_down")), int(GgmlType::Q4_1));
  EXPECT_EQ(mix(quant::FileType::Q4_0, true).at(blk(2, "ffn_down")), int(GgmlType::Q4_0));
  m = mix(quant::FileType::BF16);
  EXPECT_EQ(m.at(blk(2, "ffn_down")), int(GgmlType::BF16));
  EXPECT_EQ(m.at("output_norm.weight"), int(GgmlType::F32));
}

TEST(QuantMix, OverridesWinAndStillFallBack) {
  const auto m = mix(quant::FileType::Q4_K_M, false,
                     {quant::parse_tensor_type_override("ATTN_V=q8_0"), quant::parse_tensor_type_override("blk\\.1\\.ffn_up=q6_k"),
                      quant::parse_tensor_type_override("token_embd=q4_0")});
  for (int l = 0; l < kLayers; ++l) EXPECT_EQ(m.at(blk(l, "attn_v")), int(GgmlType::Q8_0)) << l;
  EXPECT_EQ(m.at(blk(1, "ffn_up")), int(GgmlType::Q8_0));  // Q6_K does not fit 640: Q8_0
  EXPECT_EQ(m.at(blk(11, "ffn_up")), int(GgmlType::Q5_0));
  EXPECT_EQ(m.at("token_embd.weight"), int(GgmlType::Q4_0));
  // An overridden attn_v does not count in the mix's layer counters: ffn_down is unchanged.
  EXPECT_EQ(m.at(blk(4, "ffn_down")), int(GgmlType::Q6_K));
}

TEST(QuantMix, NamesAndErrors) {
  EXPECT_EQ(quant::file_type_from_name("q4_k_m", "--type"), quant::FileType::Q4_K_M);
  EXPECT_EQ(quant::file_type_from_name("Q5_K", "--type"), quant::FileType::Q5_K_M);
  EXPECT_EQ(quant::file_type_from_name("iq4_xs", "--type"), quant::FileType::IQ4_XS);
  try {
    quant::file_type_from_name("Q3_X", "--type");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--type"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("Q4_K_M"), std::string::npos);
  }
  EXPECT_EQ(quant::ggml_type_from_name("iq4_nl"), int(GgmlType::IQ4_NL));
  EXPECT_EQ(quant::ggml_type_from_name("nope"), -1);
  EXPECT_THROW(quant::parse_tensor_type_override("attn_v"), Error);
  EXPECT_THROW(quant::parse_tensor_type_override("=q8_0"), Error);
  EXPECT_THROW(quant::parse_tensor_type_override("attn_v="), Error);
  EXPECT_THROW(quant::parse_tensor_type_override("attn_v=q9_9"), Error);
  EXPECT_THROW(quant::parse_tensor_type_override("attn_v(=q8_0"), Error);
}

TEST(QuantMix, OddRowsFallBackToF16AndOrderIsLlamaCpps) {
  quant::MixOptions opt;
  opt.file_type = quant::FileType::Q4_K_M;
  opt.n_layers = 1;
  const std::vector<quant::MixTensor> t = {{"blk.0.ffn_up.weight", int(GgmlType::F32), {96, 8}},
                                           {"blk.0.ffn_down.weight", int(GgmlType::F32), {40, 8}}};
  const auto types = quant::choose_tensor_types(t, opt);
  EXPECT_EQ(types[0], int(GgmlType::Q5_0));
  EXPECT_EQ(types[1], int(GgmlType::F16));
  const auto order = quant::llama_tensor_order(
      {"blk.10.attn_q.weight", "token_embd.weight", "blk.2.ffn_up.weight", "output_norm.weight", "blk.2.attn_k.weight"});
  EXPECT_EQ(order, (std::vector<size_t>{3, 1, 4, 2, 0}));
}

// With experts, llama.cpp takes ffn_down's layer from the name (the dense ffn_down and the
// experts' ffn_down_exps of a block are the same layer), not from a running count; 8 experts
// raise attn_k / attn_v to Q8_0 and attn_output to Q5_K.
TEST(QuantMix, ExpertModelsTakeTheLayerFromTheName) {
  constexpr int kBlocks = 8;
  std::vector<quant::MixTensor> t;
  for (int l = 0; l < kBlocks; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.push_back({p + "ffn_down.weight", int(GgmlType::F32), {256, 256}});
    t.push_back({p + "ffn_down_exps.weight", int(GgmlType::F32), {256, 256, 4}});
    t.push_back({p + "attn_k.weight", int(GgmlType::F32), {256, 256}});
    t.push_back({p + "attn_v.weight", int(GgmlType::F32), {256, 256}});
    t.push_back({p + "attn_output.weight", int(GgmlType::F32), {256, 256}});
  }
  quant::MixOptions opt;
  opt.file_type = quant::FileType::Q4_K_M;
  opt.n_layers = kBlocks;
  auto type_of = [&](const std::vector<int>& types, const std::string& name) {
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].name == name) return types[i];
    return -1;
  };
  opt.n_expert = 4;
  auto types = quant::choose_tensor_types(t, opt);
  for (int l = 0; l < kBlocks; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    // use_more_bits(l, 8): layers 0, 3, 6, 7.
    const int want = (l == 0 || l == 3 || l == 6 || l == 7) ? int(GgmlType::Q6_K) : int(GgmlType::Q4_K);
    EXPECT_EQ(type_of(types, p + "ffn_down.weight"), want) << l;
    EXPECT_EQ(type_of(types, p + "ffn_down_exps.weight"), want) << l;
    EXPECT_EQ(type_of(types, p + "attn_k.weight"), int(GgmlType::Q4_K)) << l;
    EXPECT_EQ(type_of(types, p + "attn_output.weight"), int(GgmlType::Q4_K)) << l;
  }
  // Without experts the count runs over both tensors of a block: block 1's ffn_down is the 3rd.
  opt.n_expert = 0;
  types = quant::choose_tensor_types(t, opt);
  EXPECT_NE(type_of(types, "blk.1.ffn_down.weight"), type_of(types, "blk.1.ffn_down_exps.weight"));
  opt.n_expert = 8;
  types = quant::choose_tensor_types(t, opt);
  EXPECT_EQ(type_of(types, "blk.2.attn_k.weight"), int(GgmlType::Q8_0));
  EXPECT_EQ(type_of(types, "blk.2.attn_v.weight"), int(GgmlType::Q8_0));
  EXPECT_EQ(type_of(types, "blk.2.attn_output.weight"), int(GgmlType::Q5_K));
  t.push_back({"ffn_down_exps.weight", int(GgmlType::F32), {256, 256, 4}});  // no block number
  EXPECT_THROW(quant::choose_tensor_types(t, opt), Error);
}
