// Load-time quantization (model/quantize_weights.h): --quant names, the GGUF names of a model's
// matrices, the mix it plans, and the bytes it writes (those of quantize_row_ggml on the exact
// f32 rows, with the imatrix's importance when one is given).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "formats/gguf.h"
#include "model/quantize_weights.h"
#include "quant/ggml_blocks.h"
#include "quant/imatrix.h"
#include "quant/quant_mix.h"
#include "quant/quantize.h"
#include "tiny_model.h"
#include "test_helpers.h"

using lumen::test_support::error_of;

using namespace lumen;
using formats::GgmlType;

namespace {

// Two layers whose rows are whole 256-blocks (hidden 256, q 2 x 128, kv 1 x 128, ffn 512), so
// the K-quants apply; tied embeddings unless `untied`.
spec::ModelSpec kquant_spec(bool untied = false) {
  spec::ModelSpec s = test_support::tiny_model_spec(64);
  s.hidden_size = 256;
  s.embedding_scale = 16.0f;
  s.tie_embeddings = !untied;
  for (auto& l : s.layers) {
    l.num_q_heads = 2;
    l.num_kv_heads = 1;
    l.head_dim = 128;
    l.ffn_dim = 512;
    l.k_eq_v = false;
    l.rope.freq_base_dim = l.head_dim;
  }
  return s;
}

// A RandomCheckpoint whose output projection (untied) sits under the checkpoint's own
// unprefixed name, as bind_weights looks it up.
test_support::RandomCheckpoint checkpoint_of(const spec::ModelSpec& s, uint32_t seed = 3) {
  test_support::RandomCheckpoint c(s, seed);
  if (auto it = c.data.find("model.lm_head.weight"); it != c.data.end()) {
    std::vector<float> v = std::move(it->second);
    const std::vector<int64_t> shape = c.views.at("model.lm_head.weight").shape;
    c.data.erase(it);
    c.views.erase("model.lm_head.weight");
    c.add("lm_head.weight", shape, std::move(v));
  }
  return c;
}

std::vector<float> rows_f32(const quant::WeightMatrix& m) {
  std::vector<float> out(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) quant::dequantize_row(m, r, out.data() + r * m.cols);
  return out;
}

// What quantize_row_ggml makes of the rows, row by row.
std::vector<uint8_t> reference_bytes(const std::vector<float>& x, int64_t rows, int64_t cols, quant::WeightFormat f,
                                     const float* importance = nullptr) {
  const int type = quant::ggml_type_of(f);
  const size_t rb = quant::ggml_row_bytes(type, cols);
  std::vector<uint8_t> out(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) quant::quantize_row_ggml(type, x.data() + r * cols, cols, importance, out.data() + size_t(r) * rb);
  return out;
}

bool same_bytes(const quant::WeightMatrix& m, const std::vector<uint8_t>& want) {
  return m.storage_bytes() == want.size() && std::memcmp(m.data, want.data(), want.size()) == 0;
}

class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / ("lumen-qw-" + std::to_string(::getpid()) + "-" + name)).string()) {}
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST(QuantTarget, NamesAreLumenQuantizesTypesAndTheShortNames) {
  for (const char* n : {"Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "Q4_0", "IQ4_XS"}) {
    const auto t = model::parse_quant_target(n, "--quant");
    EXPECT_TRUE(t.mix) << n;
    EXPECT_EQ(t.name, n);
    EXPECT_EQ(t.file_type, quant::file_type_from_name(n, "--type"));
    std::string lower = n;
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(model::parse_quant_target(lower, "--quant").file_type, t.file_type) << lower;
  }
  EXPECT_EQ(model::parse_quant_target("q4", "--quant").file_type, quant::FileType::Q4_K_M);
  EXPECT_EQ(model::parse_quant_target("q4", "--quant").name, "Q4_K_M");
  EXPECT_EQ(model::parse_quant_target("Q4", "--quant").file_type, quant::FileType::Q4_K_M);
  EXPECT_EQ(model::parse_quant_target("q8", "--quant").file_type, quant::FileType::Q8_0);
  for (const auto& [n, f] : std::map<std::string, quant::WeightFormat>{
           {"f32", quant::WeightFormat::F32}, {"BF16", quant::WeightFormat::BF16}, {"f16", quant::WeightFormat::F16}}) {
    const auto t = model::parse_quant_target(n, "--quant");
    EXPECT_FALSE(t.mix) << n;
    EXPECT_EQ(t.format, f) << n;
  }
  const std::string e = error_of([] { model::parse_quant_target("q3", "--quant"); });
  EXPECT_NE(e.find("--quant"), std::string::npos) << e;
  EXPECT_NE(e.find("'q3'"), std::string::npos) << e;
  for (const char* n : {"Q4_K_M", "IQ4_XS", "Q8_0", "q4 (= Q4_K_M)"}) EXPECT_NE(e.find(n), std::string::npos) << e;
}

TEST(QuantizeWeights, EveryMatrixHasItsGgufAndCheckpointName) {
  spec::ModelSpec s = kquant_spec(/*untied=*/true);
  s.layers[1].num_experts = 4;
  s.layers[1].top_k_experts = 2;
  s.layers[1].expert_ffn_dim = 256;
  s.per_layer_input_dim = 32;
  s.per_layer_vocab = 64;
  const auto ckpt = checkpoint_of(s);
  model::ModelWeights w = ckpt.bind(s);
  const auto named = model::named_weights(w);
  std::set<std::string> gguf, checkpoint, expected;
  for (const auto& n : named) {
    EXPECT_TRUE(gguf.insert(n.gguf_name).second) << n.gguf_name;
    checkpoint.insert(n.checkpoint_name);
  }
  for (const auto& t : spec::expected_tensors(s))
    if (t.shape.size() > 1) expected.insert(t.name);
  EXPECT_EQ(checkpoint, expected);  // every matrix of the checkpoint, once
  const std::set<std::string> want_gguf = {
      "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
      "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "blk.0.inp_gate.weight",
      "blk.0.proj.weight", "blk.1.attn_q.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight",
      "blk.1.attn_output.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight",
      "blk.1.ffn_gate_inp.weight", "blk.1.ffn_gate_up_exps.weight", "blk.1.ffn_down_exps.weight",
      "blk.1.inp_gate.weight", "blk.1.proj.weight", "token_embd.weight", "output.weight",
      "per_layer_token_embd.weight", "per_layer_model_proj.weight"};
  EXPECT_EQ(gguf, want_gguf);

  // The plan: the mix of the same GGUF tensors; what llama.cpp never quantizes keeps its format.
  const auto target = model::parse_quant_target("Q4_K_M", "--quant");
  const auto formats = model::plan_formats(s, named, target, false);
  std::vector<quant::MixTensor> tensors;
  for (const auto& n : named) {
    std::vector<int64_t> ne = {n.cols(), n.rows()};
    if (n.stacked) ne.push_back(n.count());
    tensors.push_back({n.gguf_name, int(GgmlType::F32), ne});
  }
  quant::MixOptions o;
  o.file_type = quant::FileType::Q4_K_M;
  o.n_layers = 2;
  o.n_gqa = 2;
  o.n_expert = 4;
  const auto types = quant::choose_tensor_types(tensors, o);
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& g = named[i].gguf_name;
    if (g == "blk.1.ffn_gate_inp.weight" || g == "per_layer_model_proj.weight")
      EXPECT_EQ(formats[i], quant::WeightFormat::F32) << g;
    else
      EXPECT_EQ(quant::ggml_type_of(formats[i]), types[i]) << g;
  }
}

TEST(QuantizeWeights, BytesAreTheQuantizersOnTheExactRows) {
  const spec::ModelSpec s = kquant_spec();
  const auto ckpt = checkpoint_of(s);
  model::ModelWeights w = ckpt.bind(s);
  std::map<std::string, std::vector<float>> before;
  for (const auto& n : model::named_weights(w)) before[n.gguf_name] = rows_f32(*n.matrix);
  const void* embed_before = w.embed_tokens.data;
  model::quantize_weights(w, s, model::parse_quant_target("q4", "--quant"));

  // Q4_K_M on 2 layers: attn_v and ffn_down raised to Q6_K on the last layer (7 n / 8 = 1; the
  // first eighth, n / 8 = 0 layers, is empty), the tied embedding Q6_K, the rest Q4_K.
  std::map<std::string, quant::WeightFormat> want = {{"token_embd.weight", quant::WeightFormat::Q6_K}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* r : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) want[p + r + ".weight"] = quant::WeightFormat::Q4_K;
    for (const char* r : {"attn_v", "ffn_down"})
      want[p + r + ".weight"] = l == 1 ? quant::WeightFormat::Q6_K : quant::WeightFormat::Q4_K;
  }
  const auto named = model::named_weights(w);
  ASSERT_EQ(named.size(), want.size());
  for (const auto& n : named) {
    const quant::WeightMatrix& m = *n.matrix;
    EXPECT_EQ(m.format, want.at(n.gguf_name)) << n.gguf_name;
    EXPECT_TRUE(same_bytes(m, reference_bytes(before.at(n.gguf_name), m.rows, m.cols, m.format))) << n.gguf_name;
  }
  EXPECT_NE(w.embed_tokens.data, embed_before);
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);  // still tied
  EXPECT_EQ(w.lm_head.format, quant::WeightFormat::Q6_K);

  // Quantizing again to the same type keeps every matrix (a matrix in its planned format is
  // not requantized, as lumen quantize copies it).
  std::map<std::string, const void*> data;
  for (const auto& n : named) data[n.gguf_name] = n.matrix->data;
  model::quantize_weights(w, s, model::parse_quant_target("Q4_K_M", "--quant"));
  for (const auto& n : model::named_weights(w)) EXPECT_EQ(n.matrix->data, data.at(n.gguf_name)) << n.gguf_name;
}

TEST(QuantizeWeights, ImatrixWeightsTheQuantizerAndMustFitTheModel) {
  const spec::ModelSpec s = kquant_spec();
  const auto ckpt = checkpoint_of(s);
  model::ModelWeights w = ckpt.bind(s);
  const std::vector<float> q0 = rows_f32(w.layers[0].q_proj);

  quant::Imatrix im;
  std::vector<float> sums(256);
  for (size_t i = 0; i < sums.size(); ++i) sums[i] = float((i * 37) % 101) + 0.5f;
  im.entries["blk.0.attn_q.weight"] = {sums, {10.0f}};
  TempFile file("good.imatrix.gguf");
  quant::write_imatrix(file.path(), im);
  model::quantize_weights(w, s, model::parse_quant_target("Q4_0", "--quant"), file.path(), "tiny");
  std::vector<float> importance(256);
  for (size_t i = 0; i < 256; ++i) importance[i] = sums[i] / 10.0f;
  const quant::WeightMatrix& q = w.layers[0].q_proj;
  ASSERT_EQ(q.format, quant::WeightFormat::Q4_0);
  EXPECT_TRUE(same_bytes(q, reference_bytes(q0, q.rows, q.cols, q.format, importance.data())));
  EXPECT_FALSE(same_bytes(q, reference_bytes(q0, q.rows, q.cols, q.format)));  // the importance mattered

  // An entry for a tensor the model lacks, or of another row length: one error naming the file,
  // the entry and the model.
  for (const auto& [name, n] : std::map<std::string, size_t>{{"blk.7.attn_q.weight", 256}, {"blk.0.attn_k.weight", 128}}) {
    quant::Imatrix bad;
    bad.entries[name] = {std::vector<float>(n, 1.0f), {1.0f}};
    TempFile bad_file("bad.imatrix.gguf");
    quant::write_imatrix(bad_file.path(), bad);
    model::ModelWeights w2 = ckpt.bind(s);
    const std::string e =
        error_of([&] { model::quantize_weights(w2, s, model::parse_quant_target("Q4_0", "--quant"), bad_file.path(), "tiny"); });
    EXPECT_NE(e.find(bad_file.path()), std::string::npos) << e;
    EXPECT_NE(e.find(name), std::string::npos) << e;
    EXPECT_NE(e.find("tiny"), std::string::npos) << e;
    EXPECT_NE(e.find("another model"), std::string::npos) << e;
  }
}

TEST(QuantizeWeights, FusedQkvIsOneTensorAndItsSlicesFollow) {
  const spec::ModelSpec s = kquant_spec();
  const auto ckpt = checkpoint_of(s);
  model::ModelWeights w = ckpt.bind(s);
  // Layer 1 as a GGUF with llama.cpp's fused attn_qkv holds it: q, k, v rows back to back.
  model::LayerWeights& l = w.layers[1];
  std::vector<float> fused = rows_f32(l.q_proj);
  for (const auto* m : {&l.k_proj, &l.v_proj}) {
    const auto r = rows_f32(*m);
    fused.insert(fused.end(), r.begin(), r.end());
  }
  const int64_t q_rows = l.q_proj.rows, kv_rows = l.k_proj.rows, cols = l.q_proj.cols;
  l.qkv = {quant::WeightFormat::F32, q_rows + 2 * kv_rows, cols, fused.data()};
  l.q_proj.data = fused.data();
  l.k_proj.data = fused.data() + q_rows * cols;
  l.v_proj.data = fused.data() + (q_rows + kv_rows) * cols;
  const auto named = model::named_weights(w);
  EXPECT_EQ(std::count_if(named.begin(), named.end(), [](const auto& n) { return n.gguf_name == "blk.1.attn_qkv.weight"; }), 1);
  EXPECT_EQ(std::count_if(named.begin(), named.end(), [](const auto& n) { return n.gguf_name == "blk.1.attn_q.weight"; }), 0);

  // llama.cpp counts attn_qkv with the attn_v tensors: on the last layer Q4_K_M raises it to Q6_K.
  model::quantize_weights(w, s, model::parse_quant_target("Q4_K_M", "--quant"));
  ASSERT_EQ(l.qkv.format, quant::WeightFormat::Q6_K);
  EXPECT_EQ(w.layers[0].v_proj.format, quant::WeightFormat::Q4_K);
  EXPECT_TRUE(same_bytes(l.qkv, reference_bytes(fused, l.qkv.rows, cols, quant::WeightFormat::Q6_K)));
  const size_t rb = l.qkv.row_bytes();
  const auto* base = static_cast<const std::byte*>(l.qkv.data);
  for (const auto& [m, r0, n] : {std::tuple{&l.q_proj, int64_t(0), q_rows}, std::tuple{&l.k_proj, q_rows, kv_rows},
                                 std::tuple{&l.v_proj, q_rows + kv_rows, kv_rows}}) {
    EXPECT_EQ(m->format, quant::WeightFormat::Q6_K);
    EXPECT_EQ(m->rows, n);
    EXPECT_EQ(m->data, base + size_t(r0) * rb);
  }
}

TEST(QuantizeWeights, FloatTargetsAreNotAMix) {
  const spec::ModelSpec s = kquant_spec();
  const auto ckpt = checkpoint_of(s);
  model::ModelWeights w = ckpt.bind(s);
  const auto named = model::named_weights(w);
  EXPECT_NE(error_of([&] { model::plan_formats(s, named, model::parse_quant_target("bf16", "--quant"), false); }), "");
}

// At load the per-layer input table stays as stored (mapped, gathered a row per token); every
// other matrix follows the mix.
TEST(QuantizeWeights, PerLayerTableStaysAsStoredAtLoad) {
  spec::ModelSpec s = kquant_spec();
  s.per_layer_input_dim = 32;
  s.per_layer_vocab = 64;
  const auto ckpt = checkpoint_of(s);
  model::ModelWeights w = ckpt.bind(s);
  const void* table = w.per_layer_table.data;
  model::quantize_weights(w, s, model::parse_quant_target("Q8_0", "--quant"));
  EXPECT_EQ(w.per_layer_table.data, table);
  EXPECT_EQ(w.per_layer_table.format, quant::WeightFormat::F32);
  EXPECT_EQ(w.layers[0].per_layer_gate.format, quant::WeightFormat::Q8_0);
  EXPECT_EQ(w.layers[1].per_layer_projection.format, quant::WeightFormat::Q8_0);
  EXPECT_EQ(w.per_layer_model_projection.format, quant::WeightFormat::F32);  // llama.cpp never quantizes it
}
