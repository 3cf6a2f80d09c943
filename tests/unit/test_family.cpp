// The rest of the Gemma 4 family in the spec and the graph: KV-shared layers, the double-wide
// MLP, mixture of experts, per-layer inputs and their caches, and the manifest's
// session.perLayerInputs block. (Exact agreement with transformers: tests/parity/test_family.py.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul_decode.h"
#include "kv/contiguous_cache.h"
#include "kv/kv_config.h"
#include "kv/paged_cache.h"
#include "model/gemma_model.h"
#include "quant/convert.h"
#include "runtime/run_config.h"
#include "spec/model_spec.h"
#include "spec/spec_internal.h"
#include "tiny_model.h"
#include "test_helpers.h"

using lumen::test_support::error_of;

namespace {

using namespace lumen;
using nlohmann::json;

std::vector<std::string> e2b_layer_types() {
  std::vector<std::string> t;
  for (int i = 0; i < 35; ++i) t.push_back(i % 5 == 4 ? "full_attention" : "sliding_attention");
  return t;
}

// google/gemma-4-E2B's text config (the keys that shape the model).
json e2b_config() {
  return {{"model_type", "gemma4_text"}, {"hidden_size", 1536}, {"intermediate_size", 6144},
          {"num_hidden_layers", 35}, {"num_attention_heads", 8}, {"num_key_value_heads", 1},
          {"head_dim", 256}, {"global_head_dim", 512}, {"sliding_window", 512},
          {"hidden_size_per_layer_input", 256}, {"vocab_size_per_layer_input", 262144},
          {"num_kv_shared_layers", 20}, {"use_double_wide_mlp", true}, {"attention_k_eq_v", false},
          {"layer_types", e2b_layer_types()}, {"final_logit_softcapping", 30.0}};
}

TEST(FamilySpec, E2BSharesKvAsTransformersAndWidensTheSharedLayersMlp) {
  const spec::ModelSpec s = spec::spec_from_hf_config(e2b_config(), "e2b.json");
  ASSERT_EQ(s.num_layers(), 35);
  EXPECT_EQ(s.first_kv_shared_layer(), 15);
  EXPECT_EQ(s.per_layer_input_dim, 256);
  EXPECT_EQ(s.per_layer_vocab, 262144);
  for (int i = 0; i < 35; ++i) {
    const auto& l = s.layers[size_t(i)];
    if (i < 15) {
      EXPECT_TRUE(l.stores_kv()) << i;
      EXPECT_EQ(l.ffn_dim, 6144) << i;
    } else {
      // Sliding layers read layer 13, full ones layer 14 (the last of each kind before 15).
      EXPECT_EQ(l.kv_source, l.kind == spec::AttentionKind::Full ? 14 : 13) << i;
      EXPECT_EQ(l.ffn_dim, 2 * 6144) << i;
      EXPECT_FALSE(l.k_norm) << i;
    }
  }
  // A shared layer has no k/v projections or k-norm in the checkpoint; it keeps q and o.
  std::set<std::string> names;
  for (const auto& t : spec::expected_tensors(s)) names.insert(t.name);
  EXPECT_TRUE(names.count("layers.14.self_attn.k_proj.weight"));
  EXPECT_FALSE(names.count("layers.15.self_attn.k_proj.weight"));
  EXPECT_FALSE(names.count("layers.15.self_attn.v_proj.weight"));
  EXPECT_FALSE(names.count("layers.15.self_attn.k_norm.weight"));
  EXPECT_TRUE(names.count("layers.15.self_attn.q_proj.weight"));
  EXPECT_TRUE(names.count("layers.3.per_layer_input_gate.weight"));
  EXPECT_TRUE(names.count("embed_tokens_per_layer.weight"));
}

TEST(FamilySpec, MoeConfigGivesEveryLayerTheExpertsAndTheirTensors) {
  json c = {{"model_type", "gemma4_text"}, {"hidden_size", 64}, {"intermediate_size", 96},
            {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
            {"head_dim", 16}, {"global_head_dim", 32}, {"hidden_size_per_layer_input", 0},
            {"enable_moe_block", true}, {"num_experts", 8}, {"top_k_experts", 3},
            {"moe_intermediate_size", 24}, {"vocab_size", 100}};
  const spec::ModelSpec s = spec::spec_from_hf_config(c, "moe.json");
  for (const auto& l : s.layers) {
    EXPECT_EQ(l.num_experts, 8);
    EXPECT_EQ(l.top_k_experts, 3);
    EXPECT_EQ(l.expert_ffn_dim, 24);
  }
  bool gate_up = false;
  for (const auto& t : spec::expected_tensors(s))
    if (t.name == "layers.1.experts.gate_up_proj") gate_up = t.shape == std::vector<int64_t>{8, 48, 64};
  EXPECT_TRUE(gate_up);
  c["top_k_experts"] = 9;
  EXPECT_NE(error_of([&] { spec::spec_from_hf_config(c, "moe.json"); }).find("moe.json: `top_k_experts` must be in 1 .. num_experts (8)"),
            std::string::npos);
  c.erase("top_k_experts");
  EXPECT_NE(error_of([&] { spec::spec_from_hf_config(c, "moe.json"); }).find("`top_k_experts` is missing"), std::string::npos);
}

TEST(FamilySpec, SharingErrorsNameTheField) {
  json c = e2b_config();
  c["num_kv_shared_layers"] = 35;
  EXPECT_NE(error_of([&] { spec::spec_from_hf_config(c, "c.json"); }).find("`num_kv_shared_layers` 35 must be in 0 .. 34"),
            std::string::npos);
  // The last 5 layers are one full layer after 4 sliding: sharing 31 leaves no full layer to read.
  c["num_kv_shared_layers"] = 31;
  EXPECT_NE(error_of([&] { spec::spec_from_hf_config(c, "c.json"); }).find("has no earlier full layer"), std::string::npos);
}

// A tiny spec with every family feature: sliding/full layers, the last `shared` of them
// KV-shared (double-wide), experts, per-layer inputs.
spec::ModelSpec family_spec(int shared, bool moe, int ple_dim, int window = 3) {
  spec::ModelSpec s;
  s.vocab_size = 40;
  s.hidden_size = 16;
  s.max_positions = 128;
  s.rms_eps = 1e-6f;
  s.embedding_scale = 4.0f;
  s.final_logit_softcap = 30.0f;
  const spec::AttentionKind kinds[] = {spec::AttentionKind::Sliding, spec::AttentionKind::Full,
                                       spec::AttentionKind::Sliding, spec::AttentionKind::Sliding,
                                       spec::AttentionKind::Full};
  for (auto kind : kinds) {
    spec::LayerSpec ls;
    const bool full = kind == spec::AttentionKind::Full;
    ls.kind = kind;
    ls.num_q_heads = 2;
    ls.num_kv_heads = full ? 1 : 2;
    ls.head_dim = full ? 16 : 8;
    ls.window = full ? 0 : window;
    ls.ffn_dim = 24;
    ls.rope.theta = full ? 1e6 : 1e4;
    ls.rope.type = full ? "proportional" : "default";
    ls.rope.partial_factor = full ? 0.25 : 1.0;
    ls.rope.freq_base_dim = ls.head_dim;
    if (moe) {
      ls.num_experts = 6;
      ls.top_k_experts = 2;
      ls.expert_ffn_dim = 8;
    }
    s.layers.push_back(ls);
  }
  s.per_layer_input_dim = ple_dim;
  s.per_layer_vocab = ple_dim ? s.vocab_size : 0;
  spec::detail::assign_kv_sharing(s, shared, true, "num_kv_shared_layers");
  return s;
}

std::vector<float> prefill_logits(const model::GemmaModel& m, model::SequenceKv& cache, const std::vector<int32_t>& toks,
                                  size_t chunk) {
  model::SequenceKv* caches[] = {&cache};
  std::vector<float> all, out;
  for (size_t s = 0; s < toks.size(); s += chunk) {
    std::vector<model::BatchRow> rows;
    for (size_t i = s; i < std::min(toks.size(), s + chunk); ++i) rows.push_back({0, int32_t(i), toks[i], true});
    m.forward(rows, caches, out);
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

const std::vector<int32_t> kTokens = {2, 5, 9, 13, 1, 7, 3, 30, 8, 17, 4, 22, 11, 39, 6, 19, 25, 12};

TEST(FamilyGraph, SharedLayersReadTheirSourceAcrossChunksAndSlidingReleases) {
  // Window 3 with pages of 2: the source layers release positions as the prompt advances,
  // so a shared layer reading them after the release would fail or read the wrong rows.
  const spec::ModelSpec s = family_spec(2, false, 0);
  ASSERT_EQ(s.layers[3].kv_source, 2);
  ASSERT_EQ(s.layers[4].kv_source, 1);
  test_support::TinyModel tm(s);
  kv::ContiguousCache ref(s);
  const auto want = prefill_logits(tm.model(), ref, kTokens, 1);
  kv::KvConfig pc;
  pc.page_size = 2;
  for (size_t chunk : {size_t(1), size_t(5), kTokens.size()}) {
    kv::PagedCache paged(s, pc);
    const auto got = prefill_logits(tm.model(), paged, kTokens, chunk);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << "chunk " << chunk << " at " << i;
    EXPECT_EQ(paged.pages_held(3), 0);  // a shared layer stores nothing
    EXPECT_EQ(paged.resumable_length(int32_t(kTokens.size())), int32_t(kTokens.size()));
  }
  // Sharing changes the result (the shared layers do not just compute their own KV).
  const spec::ModelSpec own = family_spec(0, false, 0);
  EXPECT_EQ(kv::kv_footprint(own, pc).bounded_bytes_per_token,
            kv::kv_footprint(s, pc).bounded_bytes_per_token + 2 * 2 * 8 * 4);
}

TEST(FamilyGraph, RowsWithoutLogitsSkipTheSharedLayersWithTheSameResult) {
  const spec::ModelSpec s = family_spec(2, true, 8);
  test_support::TinyModel tm(s);
  kv::ContiguousCache a(s), b(s);
  model::SequenceKv* ca[] = {&a};
  model::SequenceKv* cb[] = {&b};
  std::vector<model::BatchRow> all_rows, last_only;
  for (size_t i = 0; i < kTokens.size(); ++i) {
    all_rows.push_back({0, int32_t(i), kTokens[i], true});
    last_only.push_back({0, int32_t(i), kTokens[i], i + 1 == kTokens.size() || i == 4});
  }
  std::vector<float> full, some;
  tm.model().forward(all_rows, ca, full);
  tm.model().forward(last_only, cb, some);
  const int64_t V = s.vocab_size;
  ASSERT_EQ(some.size(), size_t(2 * V));
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_NEAR(some[size_t(v)], full[size_t(4 * V + v)], 1e-5);
    EXPECT_NEAR(some[size_t(V + v)], full[size_t((int64_t(kTokens.size()) - 1) * V + v)], 1e-5);
  }
}

TEST(FamilyGraph, ExpertsGroupedInPrefillEqualTheDecodePathAndReadOnlyChosenExperts) {
  const spec::ModelSpec s = family_spec(0, true, 0);
  test_support::TinyModel tm(s);
  kv::ContiguousCache a(s), b(s);
  const auto batch = prefill_logits(tm.model(), a, kTokens, kTokens.size());
  tm.model().reset_expert_counters();
  const auto steps = prefill_logits(tm.model(), b, kTokens, 1);
  for (size_t i = 0; i < batch.size(); ++i) ASSERT_NEAR(batch[i], steps[i], 1e-5) << i;
  // One token per step: the chosen 2 of 6 experts per layer, each expert's two matrices once.
  const auto c = tm.model().expert_counters();
  const size_t per_expert = (2 * 8 * 16 + 16 * 8) * 4;
  EXPECT_EQ(c.bytes, kTokens.size() * s.layers.size() * 2 * per_expert);
  EXPECT_EQ(c.selections, kTokens.size() * s.layers.size() * 2);
}

TEST(FamilyGraph, PerLayerInputCachesGiveBitIdenticalLogits) {
  const spec::ModelSpec s = family_spec(2, false, 8);
  test_support::TinyModel tm(s);
  model::PerLayerInputs* pli = tm.model().per_layer_inputs();
  ASSERT_NE(pli, nullptr);
  std::vector<int32_t> toks = kTokens;
  toks.insert(toks.end(), kTokens.begin(), kTokens.end());  // repeats: cache hits
  model::PerLayerInputConfig off;
  off.row_cache = off.hot_cache = off.prefetch = false;
  pli->configure(off);
  kv::ContiguousCache c0(s);
  const auto want = prefill_logits(tm.model(), c0, toks, 3);
  EXPECT_EQ(pli->stats().row_misses, toks.size());  // every token read its row
  const size_t row_bytes = size_t(s.num_layers()) * 8 * 4;

  struct Case {
    const char* name;
    model::PerLayerInputConfig c;
  };
  std::vector<Case> cases;
  {
    model::PerLayerInputConfig c = off;
    c.row_cache = true;  // roomy: the second pass hits
    cases.push_back({"row cache", c});
    c.row_cache_bytes = int64_t(3 * row_bytes);  // three rows: evictions at the byte limit
    cases.push_back({"row cache at its byte limit", c});
    c.row_cache_bytes = 1 << 20;
    c.row_cache_rows = 2;
    cases.push_back({"row cache at its row limit", c});
    c.prefetch = true;
    c.rows_ahead = 4;
    cases.push_back({"row cache + prefetch", c});
    c.hot_cache = true;
    cases.push_back({"everything", c});
    model::PerLayerInputConfig h = off;
    h.hot_cache = true;
    cases.push_back({"hot cache", h});
    h.hot_tokens = 5;
    cases.push_back({"hot cache at its token limit", h});
    h.prefetch = true;
    cases.push_back({"prefetch without row cache", h});
    h.resident = true;
    cases.push_back({"resident table", h});
  }
  for (const auto& k : cases) {
    pli->configure(k.c);
    kv::ContiguousCache cache(s);
    const auto got = prefill_logits(tm.model(), cache, toks, 3);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << k.name;
    const auto st = pli->stats();
    if (std::string(k.name) == "row cache") {
      EXPECT_EQ(st.row_misses, kTokens.size() - 0);
      EXPECT_EQ(st.row_hits, kTokens.size());
      EXPECT_EQ(st.row_evictions, 0u);
    }
    if (std::string(k.name) == "row cache at its byte limit") {
      EXPECT_EQ(st.row_entries, 3u);
      EXPECT_EQ(st.row_bytes, 3 * row_bytes);
      EXPECT_EQ(st.row_evictions, st.row_misses - 3);
    }
    if (std::string(k.name) == "row cache at its row limit") {
      EXPECT_EQ(st.row_entries, 2u);
    }
    if (std::string(k.name) == "hot cache") {
      EXPECT_EQ(st.hot_hits, kTokens.size());  // the second pass
      EXPECT_EQ(st.row_misses, kTokens.size());
    }
    if (std::string(k.name) == "hot cache at its token limit") {
      EXPECT_EQ(st.hot_entries, 5u);
    }
  }
  // A lossy decoded dtype is refused: hits and misses would differ.
  model::PerLayerInputConfig lossy = off;
  lossy.row_cache = true;
  lossy.decoded = model::RowDtype::F16;
  EXPECT_NE(error_of([&] { pli->configure(lossy); }).find("decoded dtype f16 cannot hold the table's f32 values exactly"),
            std::string::npos);
}

TEST(FamilyGraph, PerLayerInputsChangeTheLogits) {
  // The inputs are not a no-op: a model whose table and projection are zero differs.
  const spec::ModelSpec s = family_spec(0, false, 8);
  test_support::RandomCheckpoint ck(s, 3);
  model::GemmaModel a(s, ck.bind(s));
  test_support::RandomCheckpoint zero(s, 3);
  for (const char* name : {"model.embed_tokens_per_layer.weight", "model.per_layer_model_projection.weight"})
    std::fill(zero.data[name].begin(), zero.data[name].end(), 0.0f);
  model::GemmaModel b(s, zero.bind(s));
  kv::ContiguousCache ca(s), cb(s);
  const auto la = prefill_logits(a, ca, kTokens, 4), lb = prefill_logits(b, cb, kTokens, 4);
  float diff = 0;
  for (size_t i = 0; i < la.size(); ++i) diff = std::max(diff, std::fabs(la[i] - lb[i]));
  EXPECT_GT(diff, 1e-2f);
}

TEST(FamilyKernels, MatvecEachEqualsOneMatmulPerMatrixOnEveryIsa) {
  // The decode step's expert down projections: several Q4_0X4 matrices, each with its own input,
  // in one pool call; the same floats as a call per matrix.
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t rows = 20, cols = 72;  // padded rows and columns
  std::vector<std::vector<std::byte>> store;
  std::vector<quant::WeightMatrix> ws;
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < 5; ++i) {
    std::vector<float> f(size_t(rows * cols));
    for (auto& v : f) v = nd(rng);
    const quant::WeightMatrix src{quant::WeightFormat::F32, rows, cols, f.data()};
    auto& buf = store.emplace_back(quant::format_storage_bytes(quant::WeightFormat::Q4_0X4, rows, cols));
    quant::convert_rows(src, quant::WeightFormat::Q4_0X4, 0, rows, buf.data());
    ws.push_back({quant::WeightFormat::Q4_0X4, rows, cols, buf.data()});
    auto& x = xs.emplace_back(size_t(cols));
    for (auto& v : x) v = nd(rng);
  }
  xs[3] = xs[1];  // a shared input among distinct ones
  const kernels::Isa before = kernels::active_isa();
  for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (!kernels::cpu_supports(isa)) continue;
    kernels::set_isa(isa);
    std::vector<std::vector<float>> fused(ws.size(), std::vector<float>(size_t(rows))), alone = fused;
    std::vector<const quant::WeightMatrix*> w;
    std::vector<const float*> x;
    std::vector<float*> y;
    for (size_t i = 0; i < ws.size(); ++i) {
      w.push_back(&ws[i]);
      x.push_back(xs[i].data());
      y.push_back(fused[i].data());
      kernels::matmul(xs[i].data(), 1, ws[i], alone[i].data());
    }
    kernels::matvec_each(x, w, y);
    for (size_t i = 0; i < ws.size(); ++i)
      EXPECT_EQ(std::memcmp(fused[i].data(), alone[i].data(), size_t(rows) * 4), 0) << kernels::isa_name(isa) << " " << i;
  }
  kernels::set_isa(before);
}

TEST(FamilyRunConfig, PerLayerInputsBlockOfTheSeedManifestParsesAndBadValuesNameTheField) {
  const json seed = {{"materialization", "gpu_split_tables"},
                     {"rowCache", {{"mode", "lru"}, {"maxRows", 512}, {"maxBytes", 268435456}, {"decodedDtype", "f32"}}},
                     {"prefetch", {{"mode", "next_token"}, {"rowsAhead", 1}}},
                     {"gpuUpload", {{"mode", "per_step_slices"}, {"stagingRows", 2}}},
                     {"hotCache", {{"mode", "prepared_tokens"}, {"maxTokens", 4096}, {"maxBytes", 268435456}, {"outputDtype", "f32"}}}};
  const std::string where = "runtime.manifestInference.session.perLayerInputs";
  const auto c = runtime::per_layer_inputs_from_json(seed, "m.json", where);
  EXPECT_FALSE(c.resident);
  EXPECT_TRUE(c.row_cache);
  EXPECT_EQ(c.row_cache_rows, 512);
  EXPECT_EQ(c.row_cache_bytes, 268435456);
  EXPECT_TRUE(c.prefetch);
  EXPECT_EQ(c.rows_ahead, 1);
  EXPECT_TRUE(c.hot_cache);
  EXPECT_EQ(c.hot_tokens, 4096);
  auto bad = [&](const char* block, const char* key, json value) {
    json j = seed;
    if (*block) j[block][key] = value;
    else j[key] = value;
    return error_of([&] { runtime::per_layer_inputs_from_json(j, "m.json", where); });
  };
  EXPECT_NE(bad("hotCache", "mode", "tokenizer_scores").find("m.json: " + where + ".hotCache.mode: 'tokenizer_scores'"),
            std::string::npos);
  EXPECT_NE(bad("hotCache", "outputDtype", "f16").find(".hotCache.outputDtype: 'f16' is not supported"), std::string::npos);
  EXPECT_NE(bad("rowCache", "maxRows", 0).find(".rowCache.maxRows: expected a positive integer"), std::string::npos);
  EXPECT_NE(bad("", "materialization", "disk").find(".materialization: unknown mode 'disk'"), std::string::npos);
  EXPECT_NE(bad("gpuUpload", "mode", "dma").find(".gpuUpload.mode: unknown mode 'dma'"), std::string::npos);
  EXPECT_NE(bad("", "cacheEverything", true).find(".cacheEverything: unknown field"), std::string::npos);

  runtime::RunConfig rc;
  runtime::RunFlags f;
  f.ple_row_cache = "64";
  f.ple_row_cache_bytes = "1MiB";
  f.ple_prefetch = "off";
  f.ple_hot_cache = "off";
  f.ple_table = "resident";
  runtime::apply_run_flags(rc, f);
  EXPECT_EQ(rc.per_layer_inputs.row_cache_rows, 64);
  EXPECT_EQ(rc.per_layer_inputs.row_cache_bytes, 1 << 20);
  EXPECT_FALSE(rc.per_layer_inputs.prefetch);
  EXPECT_FALSE(rc.per_layer_inputs.hot_cache);
  EXPECT_TRUE(rc.per_layer_inputs.resident);
  f.ple_row_cache_bytes = "12 parsecs";
  EXPECT_NE(error_of([&] { runtime::apply_run_flags(rc, f); }).find("--ple-row-cache-bytes: '12 parsecs'"), std::string::npos);
}

}  // namespace
