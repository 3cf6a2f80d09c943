// RunConfig from a manifest's session/tokenizer blocks and from flags; the manifest field
// table; the manifest-vs-weights shape check.
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/manifest_fields.h"
#include "runtime/run_config.h"
#include "spec/model_spec.h"
#include "test_helpers.h"

using lumen::test_support::error_of;

namespace {

using nlohmann::json;
using namespace lumen;
using runtime::FieldStatus;

const std::string kSeed = std::string(LUMEN_SHARED_DIR) + "/manifests/litert-gemma-4-12b-it.json";

json seed() {
  std::ifstream in(kSeed);
  EXPECT_TRUE(in.good()) << kSeed;
  return json::parse(in);
}

json& session(json& m) { return m["runtime"]["manifestInference"]["session"]; }

void count_leaves(const json& node, const std::string& path, std::set<std::string>& out) {
  if (node.is_object() && !node.empty()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      count_leaves(*it, path.empty() ? it.key() : path + "." + it.key(), out);
  } else {
    out.insert(path);
  }
}

const runtime::ManifestField& field(const runtime::FieldTable& t, const std::string& path) {
  for (const auto& f : t.fields)
    if (f.path == path) return f;
  ADD_FAILURE() << "no field " << path;
  static runtime::ManifestField none;
  return none;
}

TEST(RunConfig, SeedManifestSessionAndTokenizerBlocks) {
  const auto c = runtime::run_config_from_manifest(seed(), "seed.json");
  EXPECT_EQ(c.kv.dtype, kv::KvElem::F16);
  EXPECT_EQ(c.kv.layout, kv::KvLayout::Contiguous);
  EXPECT_EQ(c.kv.page_size, 256);
  EXPECT_FALSE(c.kv.tiering);
  ASSERT_TRUE(c.decode_batch);
  EXPECT_EQ(*c.decode_batch, 1);
  EXPECT_EQ(c.stop_tokens, (std::vector<int32_t>{1, 106}));
  ASSERT_TRUE(c.add_bos);
  EXPECT_FALSE(*c.add_bos);
  EXPECT_EQ(c.tokenizer.type, "sentencepiece");
  EXPECT_EQ(c.tokenizer.vocab_size, 262144);
  EXPECT_EQ(c.tokenizer.bos, 2);
  EXPECT_EQ(c.tokenizer.where, "runtime.tokenizer.litertlm");
  EXPECT_EQ(c.prefill_chunk, 256);  // the manifest declares no chunk size
}

TEST(RunConfig, NoManifestGivesTheEngineDefaults) {
  const runtime::RunConfig c;
  EXPECT_EQ(c.kv.dtype, kv::KvElem::F32);
  EXPECT_EQ(c.kv.layout, kv::KvLayout::Paged);
  EXPECT_FALSE(c.decode_batch);
  EXPECT_TRUE(c.stop_tokens.empty());
}

TEST(RunConfig, FlagsWinOverTheManifest) {
  auto c = runtime::run_config_from_manifest(seed(), "seed.json");
  runtime::RunFlags f;
  f.kv_dtype = "bf16";
  f.kv_layout = "paged";
  f.page_size = "16";
  f.kv_cold = "int8";
  f.hot_window = "64";
  f.prefill_chunk = "7";
  runtime::apply_run_flags(c, f);
  EXPECT_EQ(c.kv.dtype, kv::KvElem::BF16);
  EXPECT_EQ(c.kv.layout, kv::KvLayout::Paged);
  EXPECT_EQ(c.kv.page_size, 16);
  EXPECT_TRUE(c.kv.tiering);
  EXPECT_EQ(c.kv.cold, kv::KvElem::Int8);
  EXPECT_EQ(c.kv.hot_window, 64);
  EXPECT_EQ(c.prefill_chunk, 7);

  runtime::RunFlags off;
  off.kv_cold = "off";
  off.kv_layout = "contiguous";
  runtime::apply_run_flags(c, off);
  EXPECT_FALSE(c.kv.tiering);
  EXPECT_EQ(c.kv.layout, kv::KvLayout::Contiguous);
}

TEST(RunConfig, BadFlagValuesNameTheFlag) {
  const std::vector<std::pair<std::function<void(runtime::RunFlags&)>, std::string>> cases = {
      {[](auto& f) { f.kv_dtype = "f8"; }, "--kv-dtype:"},
      {[](auto& f) { f.kv_dtype = "int8"; }, "--kv-dtype:"},
      {[](auto& f) { f.kv_layout = "ring"; }, "--kv-layout:"},
      {[](auto& f) { f.page_size = "0"; }, "--page-size:"},
      {[](auto& f) { f.page_size = "12x"; }, "--page-size:"},
      {[](auto& f) { f.kv_cold = "int3"; }, "--kv-cold:"},
      {[](auto& f) { f.kv_cold = "int8"; f.kv_layout = "contiguous"; }, "--kv-cold:"},
      {[](auto& f) { f.hot_window = "-1"; }, "--hot-window:"},
      {[](auto& f) { f.prefill_chunk = "0"; }, "--prefill-chunk:"},
  };
  for (const auto& [set, prefix] : cases) {
    runtime::RunConfig c;
    runtime::RunFlags f;
    set(f);
    const std::string msg = error_of([&] { runtime::apply_run_flags(c, f); });
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "'" << msg << "' should start with " << prefix;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
}

TEST(RunConfig, BadSessionValuesNameTheField) {
  const std::string s = "runtime.manifestInference.session.";
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& m) { session(m)["compute"]["defaults"]["mathDtype"] = "f16"; }, s + "compute.defaults.mathDtype"},
      {[](json& m) { session(m)["kvcache"]["kvDtype"] = "f8"; }, s + "kvcache.kvDtype"},
      {[](json& m) { session(m)["kvcache"]["layout"] = "ring"; }, s + "kvcache.layout"},
      {[](json& m) { session(m)["kvcache"]["quantization"]["mode"] = "int4"; }, s + "kvcache.quantization.mode"},
      {[](json& m) { session(m)["decodeLoop"]["batchSize"] = 0; }, s + "decodeLoop.batchSize"},
      {[](json& m) { session(m)["speculative"] = true; }, s + "speculative"},
      {[](json& m) { m["runtime"]["tokenizer"]["litertlm"]["addEosToken"] = true; }, "runtime.tokenizer.litertlm.addEosToken"},
  };
  for (const auto& [edit, path] : cases) {
    json m = seed();
    edit(m);
    const std::string msg = error_of([&] { runtime::run_config_from_manifest(m, "bad.json"); });
    EXPECT_EQ(msg.rfind("bad.json: " + path, 0), 0u) << msg;
    // The field table marks the same field refused and carries the same error.
    const auto t = runtime::manifest_field_table(m, "bad.json");
    EXPECT_EQ(t.error, msg);
    EXPECT_EQ(field(t, path).status, FieldStatus::Refused) << path;
    EXPECT_GE(t.counts().refused, 1);
  }
}

TEST(FieldTable, SeedManifestEveryFieldIsClassified) {
  const json m = seed();
  const auto t = runtime::manifest_field_table(m, "seed.json");
  std::set<std::string> leaves;
  count_leaves(m, "", leaves);
  ASSERT_EQ(t.fields.size(), leaves.size());
  std::set<std::string> seen;
  for (const auto& f : t.fields) {
    EXPECT_TRUE(leaves.count(f.path)) << f.path;
    EXPECT_TRUE(seen.insert(f.path).second) << "twice: " << f.path;
    EXPECT_FALSE(f.note.empty()) << f.path;
  }
  const auto c = t.counts();
  EXPECT_EQ(c.total(), int(leaves.size()));
  EXPECT_EQ(c.refused, 0) << t.error;
  EXPECT_TRUE(t.error.empty()) << t.error;
  EXPECT_GT(c.honoured, 0);
  EXPECT_GT(c.checked, 0);
  EXPECT_GT(c.ignored, 0);

  EXPECT_EQ(field(t, "runtime.architecture.numLayers").status, FieldStatus::Checked);
  EXPECT_EQ(field(t, "runtime.manifestInference.session.kvcache.kvDtype").status, FieldStatus::Honoured);
  EXPECT_EQ(field(t, "runtime.manifestInference.session.kvcache.layout").status, FieldStatus::Honoured);
  // Tiering is off in the seed: its parameters have no effect.
  EXPECT_EQ(field(t, "runtime.manifestInference.session.kvcache.tiering.hotWindow").status, FieldStatus::Ignored);
  EXPECT_EQ(field(t, "runtime.manifestInference.session.decodeLoop.readbackMode").status, FieldStatus::Ignored);
  // The 12B has no per-layer inputs: the block's values are checked, with the reason.
  EXPECT_EQ(field(t, "runtime.manifestInference.session.perLayerInputs.gpuUpload.mode").status, FieldStatus::Checked);
  EXPECT_EQ(field(t, "runtime.manifestInference.session.perLayerInputs.rowCache.maxRows").status, FieldStatus::Checked);
  EXPECT_EQ(field(t, "runtime.manifestInference.unsupported.code").status, FieldStatus::Honoured);
  EXPECT_EQ(field(t, "package.litertlm.layerScalarLayers").status, FieldStatus::Checked);
  EXPECT_EQ(field(t, "package.litertlm.graphAdapter").status, FieldStatus::Ignored);
  EXPECT_EQ(field(t, "runtime.rawConfig.text_config.rope_scaling.factor").status, FieldStatus::Ignored);
  EXPECT_EQ(field(t, "runtime.tokenizer.litertlm.eosTokens").status, FieldStatus::Honoured);

  // JSON form carries the same counts.
  const json j = runtime::field_table_to_json(t);
  EXPECT_EQ(j["counts"]["total"], c.total());
  EXPECT_EQ(j["counts"]["honoured"], c.honoured);
  EXPECT_EQ(j["fields"].size(), t.fields.size());
}

TEST(FieldTable, TokenizerBlockAtTheTopLevelIsClassifiedTheSame) {
  json m = seed();
  m["tokenizer"] = m["runtime"]["tokenizer"]["litertlm"];
  m["runtime"].erase("tokenizer");
  const auto t = runtime::manifest_field_table(m, "m.json");
  EXPECT_TRUE(t.error.empty()) << t.error;
  EXPECT_EQ(field(t, "tokenizer.eosTokens").status, FieldStatus::Honoured);
  EXPECT_EQ(field(t, "tokenizer.bosTokenId").status, FieldStatus::Checked);
  const auto c = runtime::run_config_from_manifest(m, "m.json");
  EXPECT_EQ(c.stop_tokens, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(c.tokenizer.where, "tokenizer");
}

TEST(FieldTable, TieringTurnsItsFieldsOnAndUnknownFieldsAreRefused) {
  json m = seed();
  session(m)["kvcache"]["tiering"]["mode"] = "on";
  session(m)["kvcache"]["layout"] = "paged";
  auto t = runtime::manifest_field_table(m, "m.json");
  EXPECT_EQ(field(t, "runtime.manifestInference.session.kvcache.tiering.hotWindow").status, FieldStatus::Honoured);
  // compression none: its block size has no effect.
  EXPECT_EQ(field(t, "runtime.manifestInference.session.kvcache.tiering.compression.blockSize").status, FieldStatus::Ignored);
  EXPECT_TRUE(t.error.empty()) << t.error;

  m["runtime"]["manifestInference"]["attention"]["slidingWindowShape"] = "square";
  t = runtime::manifest_field_table(m, "m.json");
  EXPECT_EQ(field(t, "runtime.manifestInference.attention.slidingWindowShape").status, FieldStatus::Refused);
  EXPECT_NE(t.error.find("runtime.manifestInference.attention.slidingWindowShape"), std::string::npos) << t.error;
}

// The seed spec with one more sliding layer: the 12B source checkpoint's 48 layers.
json with_48_layers(json m) {
  m["runtime"]["architecture"]["numLayers"] = 48;
  m["runtime"]["rawConfig"]["text_config"]["num_hidden_layers"] = 48;
  m["runtime"]["rawConfig"]["text_config"]["layer_types"].push_back("sliding_attention");
  m["runtime"]["manifestInference"]["layerPattern"]["layerTypes"].push_back("sliding_attention");
  return m;
}

TEST(SpecMatch, LayerCountAndShapesMustEqualTheWeights) {
  const spec::ModelSpec manifest = spec::spec_from_manifest(seed(), "seed.json");
  const spec::ModelSpec weights48 = spec::spec_from_manifest(with_48_layers(seed()), "weights/config.json");
  const std::string msg = error_of([&] { spec::check_manifest_matches_weights(manifest, weights48); });
  EXPECT_EQ(msg,
            "seed.json: runtime.architecture.numLayers 47 does not match the weights' 48 layers (weights/config.json)");

  EXPECT_TRUE(spec::check_manifest_matches_weights(manifest, manifest).empty());

  // The seed's LiteRT layer lists (q/k norm gains on 25 layers, scalars on 42) against weights
  // with every tensor: the first layer left out is named.
  json all_tensors = seed();
  all_tensors["runtime"]["manifestInference"]["attention"]["queryKeyNormWeightLayers"] = nullptr;
  const spec::ModelSpec full_qk = spec::spec_from_manifest(all_tensors, "w.json");
  EXPECT_EQ(error_of([&] { spec::check_manifest_matches_weights(manifest, full_qk); }),
            "seed.json: runtime.manifestInference.attention.queryKeyNormWeightLayers leaves out layer 0, but the "
            "weights have learned q/k norm gains there (w.json)");
  all_tensors["package"]["litertlm"]["layerScalarLayers"] = nullptr;
  json no_qk_list = seed();
  no_qk_list["runtime"]["manifestInference"]["attention"]["queryKeyNormWeightLayers"] = nullptr;
  EXPECT_NE(error_of([&] {
              spec::check_manifest_matches_weights(spec::spec_from_manifest(no_qk_list, "m.json"),
                                                   spec::spec_from_manifest(all_tensors, "w.json"));
            }).find("package.litertlm.layerScalarLayers leaves out layer 21"),
            std::string::npos);

  json wide = seed();
  wide["runtime"]["architecture"]["intermediateSize"] = 15000;
  wide["runtime"]["rawConfig"]["text_config"]["intermediate_size"] = 15000;
  const std::string ffn = error_of(
      [&] { spec::check_manifest_matches_weights(manifest, spec::spec_from_manifest(wide, "w.json")); });
  EXPECT_NE(ffn.find("runtime.architecture.intermediateSize 15360 does not match the weights' FFN width 15000"),
            std::string::npos)
      << ffn;

  // A behaviour difference is the manifest's to decide: a note, not an error.
  json theta = seed();
  theta["runtime"]["manifestInference"]["rope"]["ropeTheta"] = 500000;
  theta["runtime"]["rawConfig"]["text_config"]["rope_theta"] = 500000;
  const auto notes = spec::check_manifest_matches_weights(manifest, spec::spec_from_manifest(theta, "w.json"));
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("RoPE theta"), std::string::npos) << notes[0];
}

}  // namespace
