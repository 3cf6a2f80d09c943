// Graph-level tests on small in-memory models: the sliding-window mask edges, K=V on full
// layers, batching (prefill in one step == token by token; two sequences in one batch ==
// each alone), and the checks on the weights a spec binds.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "base/error.h"
#include "kv/contiguous_cache.h"
#include "model/gemma_model.h"
#include "model/weights.h"
#include "tiny_model.h"
#include "test_helpers.h"

using lumen::test_support::max_abs_diff;

using namespace lumen;

namespace {

spec::ModelSpec tiny_spec(int window, bool k_eq_v_full) {
  spec::ModelSpec s = test_support::tiny_model_spec(32, window, 64, k_eq_v_full);
  s.max_positions = 0;  // as the graph tests always built it: no context limit
  return s;
}

struct FakeCheckpoint : test_support::RandomCheckpoint {
  explicit FakeCheckpoint(const spec::ModelSpec& s, uint32_t seed = 1)
      : RandomCheckpoint(s, seed, {}, "fake.safetensors") {}
  model::ModelWeights bind(const spec::ModelSpec& s) const { return RandomCheckpoint::bind(s, "fake"); }
};

std::vector<float> last_logits(const model::GemmaModel& m, const std::vector<int32_t>& tokens) {
  kv::ContiguousCache cache(m.spec());
  model::SequenceKv* caches[] = {&cache};
  std::vector<model::BatchRow> rows;
  for (size_t i = 0; i < tokens.size(); ++i) rows.push_back({0, int32_t(i), tokens[i], i + 1 == tokens.size()});
  std::vector<float> logits;
  m.forward(rows, caches, logits);
  return logits;
}

// A spec whose only attention is one sliding layer, so the last position's logits depend
// on an earlier token only through that layer's window.
spec::ModelSpec sliding_only(int window) {
  spec::ModelSpec s = tiny_spec(window, true);
  s.layers.resize(1);
  return s;
}

}  // namespace

TEST(SlidingMask, KeyAtDistanceWindowMinusOneIsVisibleAndAtWindowIsNot) {
  const int W = 4;
  spec::ModelSpec s = sliding_only(W);
  FakeCheckpoint ck(s);
  model::GemmaModel m(s, ck.bind(s));
  std::vector<int32_t> base = {5, 9, 3, 7, 11, 2, 8, 6, 4, 10};
  const int last = int(base.size()) - 1;
  auto ref = last_logits(m, base);
  for (int dist : {W - 1, W, W + 1}) {
    auto changed = base;
    changed[size_t(last - dist)] = 30;  // another token at distance `dist` from the query
    auto got = last_logits(m, changed);
    if (dist <= W - 1)
      EXPECT_GT(max_abs_diff(ref, got), 1e-4) << "distance " << dist << " must be visible";
    else
      EXPECT_EQ(max_abs_diff(ref, got), 0.0) << "distance " << dist << " must be masked";
  }
}

TEST(SlidingMask, FullLayerSeesTheWholePrefix) {
  spec::ModelSpec s = tiny_spec(2, true);
  FakeCheckpoint ck(s);
  model::GemmaModel m(s, ck.bind(s));
  std::vector<int32_t> base = {5, 9, 3, 7, 11, 2, 8, 6};
  auto changed = base;
  changed[0] = 30;
  EXPECT_GT(max_abs_diff(last_logits(m, base), last_logits(m, changed)), 1e-4);
}

TEST(KEqualsV, EqualsAModelWhoseVProjIsACopyOfKProj) {
  spec::ModelSpec shared = tiny_spec(4, true);
  spec::ModelSpec separate = tiny_spec(4, false);
  FakeCheckpoint ck(shared);
  FakeCheckpoint ck2 = ck;
  // The separate model's full layer has its own v_proj: make it the same matrix as k_proj.
  ck2.add("model.layers.1.self_attn.v_proj.weight", {16, 16}, ck.data["model.layers.1.self_attn.k_proj.weight"]);
  for (auto& [name, view] : ck2.views) view.data = reinterpret_cast<const std::byte*>(ck2.data[name].data());
  model::GemmaModel a(shared, ck.bind(shared));
  model::GemmaModel b(separate, ck2.bind(separate));
  std::vector<int32_t> toks = {2, 7, 1, 9, 4, 4, 12};
  EXPECT_LT(max_abs_diff(last_logits(a, toks), last_logits(b, toks)), 1e-6);
  // ... and differs from a model with another v_proj (the test can fail).
  std::vector<float> other = ck.data["model.layers.1.self_attn.k_proj.weight"];
  for (auto& v : other) v = -v * 0.7f;
  ck2.add("model.layers.1.self_attn.v_proj.weight", {16, 16}, other);
  model::GemmaModel c(separate, ck2.bind(separate));
  EXPECT_GT(max_abs_diff(last_logits(a, toks), last_logits(c, toks)), 1e-4);
}

TEST(Batching, PrefillInOneStepEqualsTokenByTokenAndSequencesAreIndependent) {
  spec::ModelSpec s = tiny_spec(3, true);
  FakeCheckpoint ck(s);
  model::GemmaModel m(s, ck.bind(s));
  const std::vector<int32_t> a = {2, 5, 9, 13, 1, 7, 3, 30, 8};
  const std::vector<int32_t> b = {2, 11, 4, 6};
  // One step, all positions of a.
  kv::ContiguousCache one(s);
  model::SequenceKv* c1[] = {&one};
  std::vector<model::BatchRow> rows;
  for (size_t i = 0; i < a.size(); ++i) rows.push_back({0, int32_t(i), a[i], true});
  std::vector<float> all;
  m.forward(rows, c1, all);
  // Token by token, interleaved with sequence b in the same batch.
  kv::ContiguousCache ca(s), cb(s);
  model::SequenceKv* c2[] = {&ca, &cb};
  const int64_t V = s.vocab_size;
  std::vector<float> b_last;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<model::BatchRow> step = {{0, int32_t(i), a[i], true}};
    if (i < b.size()) step.push_back({1, int32_t(i), b[i], true});
    std::vector<float> out;
    m.forward(step, c2, out);
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(out[size_t(v)], all[i * V + size_t(v)], 1e-5);
    if (i + 1 == b.size()) b_last.assign(out.begin() + V, out.begin() + 2 * V);
  }
  // b inside the shared batches gave what b gives alone.
  EXPECT_LT(max_abs_diff(last_logits(m, b), b_last), 1e-5);
}

TEST(Weights, WrongShapeMissingTensorAndUnexpectedTensorAreOneLineErrors) {
  spec::ModelSpec s = tiny_spec(4, true);
  {
    FakeCheckpoint ck(s);
    ck.views.erase("model.layers.1.mlp.up_proj.weight");
    try {
      ck.bind(s);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << e.what();
    }
  }
  {
    FakeCheckpoint ck(s);
    ck.add("model.norm.weight", {17}, std::vector<float>(17, 1.0f));
    try {
      ck.bind(s);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has shape [17] but the model spec needs [16]"), std::string::npos) << e.what();
    }
  }
  {
    FakeCheckpoint ck(s);
    ck.add("model.layers.1.self_attn.v_proj.weight", {16, 16}, std::vector<float>(256, 0.0f));
    EXPECT_THROW(ck.bind(s), Error);
  }
  {
    FakeCheckpoint ck(s);
    ck.views["model.norm.weight"].dtype = DType::I32;
    EXPECT_THROW(ck.bind(s), Error);
  }
}

TEST(Forward, RejectsTokensOutsideTheVocabulary) {
  spec::ModelSpec s = tiny_spec(4, true);
  FakeCheckpoint ck(s);
  model::GemmaModel m(s, ck.bind(s));
  EXPECT_THROW(last_logits(m, {2, 32}), Error);
}
