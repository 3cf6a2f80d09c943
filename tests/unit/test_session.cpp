// Session: a follow-up prompt that extends the cached tokens prefills only its suffix and
// gives the same logits and tokens as a fresh full prefill; a diverging prompt rewinds to the
// common prefix; chunking, cancel and the context limit.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "base/error.h"
#include "fake_tokenizer.h"
#include "kv/contiguous_cache.h"
#include "runtime/session.h"
#include "tiny_model.h"
#include "test_helpers.h"

using lumen::test_support::letters;

using lumen::test_support::max_abs_diff;

using namespace lumen;
using runtime::FinishReason;
using runtime::GenerationRequest;
using runtime::Session;

namespace {

const test_support::TinyModel& session_model() {
  static test_support::TinyModel m(test_support::tiny_model_spec());
  return m;
}

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// Full prefill of `tokens` in one fresh cache, one row at a time for the reference.
std::vector<float> reference_last_logits(const std::vector<int32_t>& tokens) {
  kv::ContiguousCache cache(session_model().model().spec());
  model::SequenceKv* caches[] = {&cache};
  std::vector<float> logits;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const model::BatchRow row{0, int32_t(i), tokens[i], true};
    session_model().model().forward(std::span(&row, 1), caches, logits);
  }
  return logits;
}

GenerationRequest greedy_request(std::vector<int32_t> prompt, int n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = n;
  return r;
}

}  // namespace

TEST(Session, FollowUpTurnReusesTheCacheAndMatchesAFreshPrefill) {
  const auto tok = letters();
  Session chat(session_model().model(), tok);
  chat.set_prefill_chunk(4);
  const std::vector<int32_t> turn1 = {2, 5, 9, 13, 7, 21, 4, 30, 11};
  auto r1 = chat.generate(greedy_request(turn1, 6));
  ASSERT_EQ(r1.tokens.size(), 6u);
  EXPECT_EQ(r1.reused_tokens, 0);
  // The cache holds the prompt and every generated token but the last (never fed).
  ASSERT_EQ(chat.tokens().size(), turn1.size() + 5);

  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.tokens.begin(), r1.tokens.end());
  for (int32_t t : {1, 2, 8, 17, 3, 26, 12}) turn2.push_back(t);
  const auto reused_logits = copy(chat.prefill(turn2));
  EXPECT_EQ(chat.last_reused(), int(turn1.size() + 5));
  EXPECT_EQ(chat.tokens(), turn2);

  Session fresh(session_model().model(), tok);
  const auto fresh_logits = copy(fresh.prefill(turn2));
  EXPECT_EQ(fresh.last_reused(), 0);
  EXPECT_LT(max_abs_diff(reused_logits, fresh_logits), 1e-5);
  EXPECT_LT(max_abs_diff(reused_logits, reference_last_logits(turn2)), 1e-5);

  // The whole second turn: same tokens either way.
  auto a = chat.generate(greedy_request(turn2, 8));
  auto b = Session(session_model().model(), tok).generate(greedy_request(turn2, 8));
  EXPECT_EQ(a.reused_tokens, int(turn2.size()) - 1);
  EXPECT_EQ(b.reused_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.text, tok.decode(a.tokens));
}

TEST(Session, DivergingPromptRewindsToTheCommonPrefix) {
  const auto tok = letters();
  Session s(session_model().model(), tok);
  const std::vector<int32_t> first = {2, 5, 9, 13, 7, 21, 4, 30, 11, 6};
  s.prefill(first);
  std::vector<int32_t> second = {2, 5, 9, 13, 8, 8, 19};
  const auto got = copy(s.prefill(second));
  EXPECT_EQ(s.last_reused(), 4);
  EXPECT_EQ(s.tokens(), second);
  EXPECT_LT(max_abs_diff(got, reference_last_logits(second)), 1e-5);
  // A prompt that is a prefix of the cache recomputes only its last position.
  const std::vector<int32_t> prefix(second.begin(), second.begin() + 5);
  const auto shorter = copy(s.prefill(prefix));
  EXPECT_EQ(s.last_reused(), 4);
  EXPECT_LT(max_abs_diff(shorter, reference_last_logits(prefix)), 1e-5);
  // Reset forgets everything.
  s.reset();
  const auto again = copy(s.prefill(second));
  EXPECT_EQ(s.last_reused(), 0);
  EXPECT_LT(max_abs_diff(again, reference_last_logits(second)), 1e-5);
}

TEST(Session, ChunkedPrefillEqualsOneStep) {
  const auto tok = letters();
  std::vector<int32_t> prompt = {2};
  for (int i = 0; i < 20; ++i) prompt.push_back(3 + (i * 7) % 29);
  Session one(session_model().model(), tok), chunked(session_model().model(), tok);
  chunked.set_prefill_chunk(3);
  EXPECT_LT(max_abs_diff(copy(one.prefill(prompt)), copy(chunked.prefill(prompt))), 1e-5);
  EXPECT_THROW(chunked.set_prefill_chunk(0), Error);
}

TEST(Session, CancelStopsBetweenTokensAndBeforePrefill) {
  const auto tok = letters();
  Session s(session_model().model(), tok);
  std::atomic<bool> cancel{false};
  int pieces = 0;
  auto r = s.generate(greedy_request({2, 5, 9, 13}, 50), [&](std::string_view) {
    if (++pieces == 2) cancel = true;
  }, &cancel);
  EXPECT_EQ(r.finish, FinishReason::Cancelled);
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(pieces, 2);
  // Already cancelled: nothing is prefilled or generated.
  Session t(session_model().model(), tok);
  auto none = t.generate(greedy_request({2, 5, 9, 13}, 50), {}, &cancel);
  EXPECT_EQ(none.finish, FinishReason::Cancelled);
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_TRUE(t.tokens().empty());
}

TEST(Session, StopsAtTheContextLimit) {
  const auto tok = letters();
  test_support::TinyModel small(test_support::tiny_model_spec(32, 3, 12));
  Session s(small.model(), tok);
  auto r = s.generate(greedy_request({2, 5, 9, 13, 7, 21, 4, 30, 11}, 100));
  EXPECT_EQ(r.finish, FinishReason::Length);
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_LE(s.tokens().size(), 12u);
  std::vector<int32_t> too_long(13, 5);
  EXPECT_THROW(s.generate(greedy_request(too_long, 1)), Error);
  EXPECT_THROW(s.generate(greedy_request({}, 1)), Error);
}
