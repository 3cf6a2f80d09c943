// Sampler: greedy ties, seed reproducibility, the exact sets top-k / top-p / min-p keep,
// penalties and logit bias to the value, parameter checks, model defaults.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>

#include <unistd.h>

#include "base/error.h"
#include "runtime/sampler.h"

using namespace lumen;
using runtime::Sampler;
using runtime::SamplingParams;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> logits_of(std::vector<double> probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? float(std::log(p)) : -kInf);
  return l;
}

SamplingParams plain(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

std::set<int32_t> kept_ids(Sampler& s, std::vector<float> logits) {
  std::set<int32_t> ids;
  for (const auto& t : s.distribution(logits, {})) ids.insert(t.id);
  return ids;
}

// Every id drawn in `n` samples.
std::set<int32_t> drawn_ids(Sampler& s, const std::vector<float>& logits, int n) {
  std::set<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ids.insert(s.sample(l, {}));
  }
  return ids;
}

std::string sampling_error_of(const SamplingParams& p, int32_t vocab = 8) {
  try {
    Sampler s(p, vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Sampler, GreedyPicksTheArgmaxAndTheLowestIndexOnTies) {
  Sampler s(plain(0.0f), 5);
  std::vector<float> l = {1, 3, 2, 3, -1};
  EXPECT_EQ(s.sample(l, {}), 1);
  std::vector<float> all_equal(5, 0.5f);
  EXPECT_EQ(s.sample(all_equal, {}), 0);
  std::vector<float> last = {-kInf, -kInf, -kInf, -kInf, -100};
  EXPECT_EQ(s.sample(last, {}), 4);
  std::vector<float> banned(5, -kInf);
  EXPECT_THROW(s.sample(banned, {}), Error);
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  std::vector<float> flat(100, 0.0f);
  auto draws = [&](uint64_t seed) {
    SamplingParams p = plain();
    p.seed = seed;
    Sampler s(p, 100);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      auto l = flat;
      out.push_back(s.sample(l, {}));
    }
    return out;
  };
  EXPECT_EQ(draws(7), draws(7));
  EXPECT_NE(draws(7), draws(8));
  // A flat distribution over 100 ids, 64 draws: not stuck on a few values.
  auto d = draws(7);
  EXPECT_GT(std::set<int32_t>(d.begin(), d.end()).size(), 30u);
}

TEST(Sampler, DrawFrequenciesFollowTheProbabilities) {
  SamplingParams p = plain();
  p.seed = 3;
  Sampler s(p, 3);
  const auto logits = logits_of({0.6, 0.3, 0.1});
  std::vector<int> count(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto l = logits;
    ++count[size_t(s.sample(l, {}))];
  }
  // Binomial standard deviation at n = 20000 is <= 0.0035; 0.015 is > 4 sigma.
  EXPECT_NEAR(count[0] / double(n), 0.6, 0.015);
  EXPECT_NEAR(count[1] / double(n), 0.3, 0.015);
  EXPECT_NEAR(count[2] / double(n), 0.1, 0.015);
}

TEST(Sampler, TopKKeepsExactlyTheKBest) {
  SamplingParams p = plain();
  p.top_k = 3;
  Sampler s(p, 6);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 1.9f, 0.0f};
  EXPECT_EQ(kept_ids(s, logits), (std::set<int32_t>{1, 3, 4}));
  EXPECT_EQ(drawn_ids(s, logits, 2000), (std::set<int32_t>{1, 3, 4}));
  // Ties at the boundary: the lower id is kept.
  p.top_k = 2;
  Sampler tie(p, 4);
  EXPECT_EQ(kept_ids(tie, {1.0f, 0.5f, 1.0f, 1.0f}), (std::set<int32_t>{0, 2}));
  // Probabilities are renormalized over the kept set.
  p.top_k = 2;
  Sampler two(p, 3);
  auto l = logits_of({0.5, 0.3, 0.2});
  auto dist = two.distribution(l, {});
  ASSERT_EQ(dist.size(), 2u);
  EXPECT_EQ(dist[0].id, 0);
  EXPECT_NEAR(dist[0].prob, 0.625, 1e-6);
  EXPECT_NEAR(dist[1].prob, 0.375, 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  const auto logits = logits_of({0.15, 0.5, 0.05, 0.3});  // sorted: 1 (.5), 3 (.3), 0 (.15), 2 (.05)
  auto kept = [&](float top_p) {
    SamplingParams p = plain();
    p.top_p = top_p;
    Sampler s(p, 4);
    return kept_ids(s, logits);
  };
  EXPECT_EQ(kept(0.45f), (std::set<int32_t>{1}));
  EXPECT_EQ(kept(0.7f), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(kept(0.9f), (std::set<int32_t>{0, 1, 3}));
  EXPECT_EQ(kept(0.99f), (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(kept(1.0f), (std::set<int32_t>{0, 1, 2, 3}));
  SamplingParams p = plain();
  p.top_p = 0.7f;
  Sampler s(p, 4);
  EXPECT_EQ(drawn_ids(s, logits, 2000), (std::set<int32_t>{1, 3}));
}

TEST(Sampler, MinPKeepsTokensAtLeastMinPTimesTheBest) {
  const auto logits = logits_of({0.5, 0.3, 0.15, 0.05});
  auto kept = [&](float min_p) {
    SamplingParams p = plain();
    p.min_p = min_p;
    Sampler s(p, 4);
    return kept_ids(s, logits);
  };
  EXPECT_EQ(kept(0.2f), (std::set<int32_t>{0, 1, 2}));   // threshold 0.1
  EXPECT_EQ(kept(0.5f), (std::set<int32_t>{0, 1}));      // threshold 0.25
  EXPECT_EQ(kept(0.9f), (std::set<int32_t>{0}));         // threshold 0.45
  EXPECT_EQ(kept(0.05f), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(Sampler, MinPRunsAfterTopPAsInTransformers) {
  // Top-p on the full distribution keeps {0, 1, 2} (0.4 + 0.3 < 0.75); had min-p (which drops
  // id 3) run first, top-p would see 0.44 + 0.33 >= 0.75 and keep only {0, 1}.
  SamplingParams p = plain();
  p.top_p = 0.75f;
  p.min_p = 0.3f;
  Sampler s(p, 4);
  EXPECT_EQ(kept_ids(s, logits_of({0.4, 0.3, 0.2, 0.1})), (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, TemperatureScalesTheLogitsBeforeTruncation) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  SamplingParams p = plain(2.0f);
  Sampler s(p, 3);
  auto l = logits;
  auto dist = s.distribution(l, {});
  double z = std::exp(1.0) + std::exp(0.5) + 1.0;
  ASSERT_EQ(dist.size(), 3u);
  EXPECT_NEAR(dist[0].prob, std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(dist[2].prob, 1.0 / z, 1e-6);
  // min-p at a high temperature keeps more than at a low one.
  p.min_p = 0.3f;
  Sampler hot(p, 3);
  p.temperature = 0.5f;
  Sampler cold(p, 3);
  EXPECT_EQ(kept_ids(hot, logits), (std::set<int32_t>{0, 1, 2}));  // weights 1, .61, .37
  EXPECT_EQ(kept_ids(cold, logits), (std::set<int32_t>{0}));        // weights 1, .14, .02
}

TEST(Sampler, LargeVocabularyTruncationMatchesAFullSort) {
  const int32_t V = 262144;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(V);
  for (auto& x : logits) x = nd(rng);
  std::vector<int32_t> order(V);
  for (int32_t i = 0; i < V; ++i) order[size_t(i)] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });

  SamplingParams p = plain();
  p.top_k = 64;
  Sampler topk(p, V);
  EXPECT_EQ(kept_ids(topk, logits), std::set<int32_t>(order.begin(), order.begin() + 64));

  // Top-p alone over a wide distribution: the kept prefix is hundreds of tokens long, so the
  // incremental partial sort has to grow past its first chunks.
  p.top_k = 0;
  p.top_p = 0.5f;
  Sampler topp(p, V);
  const float mx = logits[size_t(order[0])];
  double total = 0;
  for (float x : logits) total += std::exp(double(x - mx));
  double mass = 0;
  size_t keep = 0;
  while (mass < 0.5 * total) mass += std::exp(double(logits[size_t(order[keep++])] - mx));
  ASSERT_GT(keep, 300u);
  auto got = kept_ids(topp, logits);
  EXPECT_EQ(got.size(), keep);
  EXPECT_EQ(got, std::set<int32_t>(order.begin(), order.begin() + int64_t(keep)));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  SamplingParams p = plain(0.0f);
  p.repetition_penalty = 2.0f;
  Sampler s(p, 4);
  std::vector<float> l = {3.0f, -2.0f, 1.0f, 2.5f};
  const std::vector<int32_t> generated = {0, 1, 0, 0};
  EXPECT_EQ(s.sample(l, generated), 3);
  EXPECT_EQ(l, (std::vector<float>{1.5f, -4.0f, 1.0f, 2.5f}));
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSubtractExactly) {
  SamplingParams p = plain(0.0f);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p, 4);
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  const std::vector<int32_t> generated = {0, 0, 2, 0};
  EXPECT_EQ(s.sample(l, generated), 1);
  // id 0: three times: 3 - 0.5 - 0.75; id 2: once: 1 - 0.5 - 0.25.
  EXPECT_EQ(l, (std::vector<float>{1.75f, 2.0f, 0.25f, 0.0f}));
  // Negative values reward repetition.
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 0.0f;
  Sampler reward(p, 4);
  std::vector<float> m = {3.0f, 2.0f, 1.0f, 0.0f};
  EXPECT_EQ(reward.sample(m, std::vector<int32_t>{1}), 0);
  EXPECT_EQ(m[1], 3.0f);
}

TEST(Sampler, LogitBiasIsAddedFirstAndMinusInfinityBans) {
  SamplingParams p = plain(0.0f);
  p.logit_bias = {{3, 10.0f}};
  Sampler s(p, 4);
  std::vector<float> l = {5.0f, 1.0f, 0.0f, -1.0f};
  EXPECT_EQ(s.sample(l, {}), 3);
  EXPECT_EQ(l[3], 9.0f);

  p.logit_bias = {{0, -kInf}};
  p.repetition_penalty = 2.0f;  // the penalty sees the biased logit
  Sampler ban(p, 4);
  std::vector<float> m = {5.0f, 1.0f, 0.0f, -1.0f};
  EXPECT_EQ(ban.sample(m, std::vector<int32_t>{0}), 1);
  p.temperature = 1.0f;
  Sampler ban_sampled(p, 4);
  EXPECT_EQ(drawn_ids(ban_sampled, {5.0f, 1.0f, 0.0f, -1.0f}, 500).count(0), 0u);
}

TEST(Sampler, BadParametersAreErrorsNamingTheParameter) {
  auto with = [](auto edit) {
    SamplingParams p;
    edit(p);
    return p;
  };
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.temperature = -0.1f; })).find("temperature"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.temperature = NAN; })).find("temperature"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.top_k = -1; })).find("top_k"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.top_p = 0.0f; })).find("top_p"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.top_p = 1.5f; })).find("top_p"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.min_p = -0.1f; })).find("min_p"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.min_p = 1.1f; })).find("min_p"), std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; })).find("repetition_penalty"),
            std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.presence_penalty = 3.0f; })).find("presence_penalty"),
            std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.frequency_penalty = -2.5f; })).find("frequency_penalty"),
            std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.logit_bias = {{8, 1.0f}}; })).find("logit_bias"),
            std::string::npos);
  EXPECT_NE(sampling_error_of(with([](SamplingParams& p) { p.logit_bias = {{1, NAN}}; })).find("logit_bias"),
            std::string::npos);
  EXPECT_EQ(sampling_error_of(with([](SamplingParams& p) { p.logit_bias = {{7, -kInf}}; })), "");
  EXPECT_THROW(Sampler(SamplingParams{}, 0), Error);
  Sampler s(SamplingParams{}, 8);
  std::vector<float> wrong(7);
  EXPECT_THROW(s.sample(wrong, {}), Error);
}

TEST(Sampler, ModelDefaultsComeFromGenerationConfig) {
  const auto d = runtime::default_sampling();
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_EQ(d.top_k, 64);
  EXPECT_EQ(d.top_p, 0.95f);

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lumen-sampler-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // No generation_config.json: the Gemma defaults.
  EXPECT_EQ(runtime::default_sampling(dir.string()).top_k, 64);
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": true, "top_k": 40, "top_p": 0.9, "temperature": 0.7, "bos_token_id": 2})";
  auto g = runtime::default_sampling(dir.string());
  EXPECT_EQ(g.top_k, 40);
  EXPECT_EQ(g.top_p, 0.9f);
  EXPECT_EQ(g.temperature, 0.7f);
  std::ofstream(dir / "generation_config.json") << R"({"do_sample": false, "top_k": 40})";
  EXPECT_EQ(runtime::default_sampling(dir.string()).temperature, 0.0f);
  std::ofstream(dir / "generation_config.json") << R"({"top_p": "high"})";
  try {
    runtime::default_sampling(dir.string());
    ADD_FAILURE() << "a non-numeric top_p was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "generation_config.json") << R"({"top_p": 2.0})";
  EXPECT_THROW(runtime::default_sampling(dir.string()), Error);
  fs::remove_all(dir);
}
