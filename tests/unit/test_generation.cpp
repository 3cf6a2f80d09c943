// Generation: stop strings cut exactly (within a token, across tokens, multi-byte UTF-8),
// held-back text released when it turns out not to be a stop, stop tokens, max tokens,
// cancel, UTF-8-safe streaming, bad requests.
#include <gtest/gtest.h>

#include "base/error.h"
#include "fake_tokenizer.h"
#include "runtime/generation.h"

using namespace lumen;
using runtime::FinishReason;
using runtime::Generation;
using runtime::GenerationRequest;

namespace {

// ids:                 0        1        2        3        4         5      6    7       8       9    10   11
const test_support::FakeTokenizer kTok({{"<pad>", true}, {"<eos>", true}, {"<bos>", true}, {"Hello"}, {" world"}, {"STO"},
                                    {"P"}, {"\xC3"}, {"\xA9"}, {"!"}, {"x"}, {"<img>", true},
                                    // 12      13
                                    {"\xE2\x82"}, {"\xAC"}});
constexpr int32_t kVocab = 14;

GenerationRequest greedy(std::vector<std::string> stops = {}, int max_tokens = 100) {
  GenerationRequest r;
  r.prompt = {2};
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  r.stop_tokens = {1};
  r.stop_strings = std::move(stops);
  return r;
}

std::vector<float> one_hot(int32_t id) {
  std::vector<float> l(kVocab, 0.0f);
  l[size_t(id)] = 10.0f;
  return l;
}

// Feeds `script` (the ids the model "wants") until the generation finishes; returns each
// accept()'s text.
std::vector<std::string> drive(Generation& g, const std::vector<int32_t>& script) {
  std::vector<std::string> chunks;
  for (int32_t id : script) {
    if (g.finished()) break;
    auto l = one_hot(id);
    chunks.push_back(g.accept(l));
  }
  return chunks;
}

std::string joined(const std::vector<std::string>& chunks) {
  std::string s;
  for (const auto& c : chunks) s += c;
  return s;
}

}  // namespace

TEST(Generation, StopStringAcrossTokensIsCutExactlyAndNeverStreamed) {
  Generation g(greedy({"STOP"}), kTok, kVocab);
  auto chunks = drive(g, {3, 4, 5, 6, 9, 9});
  ASSERT_TRUE(g.finished());
  EXPECT_EQ(g.finish_reason(), FinishReason::Stop);
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hello", " world", "", ""}));
  EXPECT_EQ(g.text(), "Hello world");
  EXPECT_EQ(g.generated(), (std::vector<int32_t>{3, 4, 5, 6}));
}

TEST(Generation, StopStringInsideATokenCutsMidToken) {
  Generation g(greedy({"lo w"}), kTok, kVocab);
  auto chunks = drive(g, {3, 4, 9});
  EXPECT_EQ(g.finish_reason(), FinishReason::Stop);
  EXPECT_EQ(joined(chunks), "Hel");
  EXPECT_EQ(chunks[0], "Hel");  // "lo" is held: it could start "lo w"
  EXPECT_EQ(g.text(), "Hel");
}

TEST(Generation, EarliestOfSeveralStopStringsWins) {
  Generation g(greedy({"world", "o w"}), kTok, kVocab);
  drive(g, {3, 4, 9});
  EXPECT_EQ(g.text(), "Hell");
}

TEST(Generation, HeldTextIsReleasedWhenItStopsLookingLikeAStop) {
  Generation g(greedy({"STOP"}), kTok, kVocab);
  auto chunks = drive(g, {3, 5, 10, 9});
  EXPECT_FALSE(g.finished());
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hello", "", "STOx", "!"}));
  EXPECT_EQ(g.text(), "HelloSTOx!");
}

TEST(Generation, MultiByteStopStringAcrossByteTokens) {
  // "é" arrives as two byte tokens; "é!" spans three tokens.
  Generation g(greedy({"\xC3\xA9!"}), kTok, kVocab);
  auto chunks = drive(g, {3, 7, 8, 9, 10});
  EXPECT_EQ(g.finish_reason(), FinishReason::Stop);
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hello", "", "", ""}));
  EXPECT_EQ(g.text(), "Hello");
  // The same bytes not followed by "!" are released as a whole character.
  Generation h(greedy({"\xC3\xA9!"}), kTok, kVocab);
  auto more = drive(h, {7, 8, 10});
  EXPECT_EQ(more, (std::vector<std::string>{"", "", "\xC3\xA9x"}));
}

TEST(Generation, StreamingNeverSplitsAUtf8Character) {
  Generation g(greedy(), kTok, kVocab);
  auto chunks = drive(g, {12, 13, 7, 8, 3});
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "\xE2\x82\xAC", "", "\xC3\xA9", "Hello"}));
  // A character cut off by the end of the generation becomes U+FFFD, never a stray byte.
  Generation h(greedy({}, 2), kTok, kVocab);
  auto cut = drive(h, {3, 12});
  EXPECT_EQ(h.finish_reason(), FinishReason::Length);
  const std::string text = joined(cut);
  ASSERT_GT(text.size(), 5u);
  EXPECT_EQ(text.substr(0, 5), "Hello");
  for (size_t i = 5; i < text.size(); i += 3) EXPECT_EQ(text.substr(i, 3), "\xEF\xBF\xBD") << "at byte " << i;
}

TEST(Generation, StopTokenEndsWithoutTextAndReleasesHeldText) {
  Generation g(greedy({"STOP"}), kTok, kVocab);
  auto chunks = drive(g, {3, 5, 1, 9});
  EXPECT_EQ(g.finish_reason(), FinishReason::Stop);
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hello", "", "STO"}));
  EXPECT_EQ(g.generated(), (std::vector<int32_t>{3, 5}));  // the stop token is not part of it
  EXPECT_EQ(g.next_input(), 5);
  EXPECT_THROW(
      {
        auto l = one_hot(3);
        g.accept(l);
      },
      Error);
}

TEST(Generation, SpecialTokensThatAreNotStopsAddNoText) {
  Generation g(greedy(), kTok, kVocab);
  auto chunks = drive(g, {3, 11, 4});
  EXPECT_EQ(g.text(), "Hello world");
  EXPECT_EQ(g.generated(), (std::vector<int32_t>{3, 11, 4}));
  auto r = greedy();
  r.skip_special = false;
  Generation shown(r, kTok, kVocab);
  drive(shown, {3, 11, 4});
  EXPECT_EQ(shown.text(), "Hello<img> world");
}

TEST(Generation, MaxTokensEndsWithLengthAndReleasesHeldText) {
  Generation g(greedy({"STOP"}, 3), kTok, kVocab);
  auto chunks = drive(g, {3, 4, 5, 6});
  EXPECT_EQ(g.finish_reason(), FinishReason::Length);
  EXPECT_EQ(g.generated().size(), 3u);
  EXPECT_EQ(chunks, (std::vector<std::string>{"Hello", " world", "STO"}));
  // A stop string completed by the last allowed token is still a stop.
  Generation s(greedy({"STOP"}, 4), kTok, kVocab);
  drive(s, {3, 4, 5, 6});
  EXPECT_EQ(s.finish_reason(), FinishReason::Stop);
  EXPECT_EQ(s.text(), "Hello world");
  Generation none(greedy({}, 0), kTok, kVocab);
  EXPECT_TRUE(none.finished());
  EXPECT_EQ(none.finish_reason(), FinishReason::Length);
}

TEST(Generation, CancelEndsTheGeneration) {
  Generation g(greedy({"STOP"}), kTok, kVocab);
  auto chunks = drive(g, {3, 5});
  EXPECT_EQ(g.next_input(), 5);
  g.cancel();
  EXPECT_TRUE(g.finished());
  EXPECT_EQ(g.finish_reason(), FinishReason::Cancelled);
  EXPECT_EQ(g.text(), "Hello");
  EXPECT_STREQ(runtime::finish_reason_name(g.finish_reason()), "cancelled");
  g.cancel();  // idempotent
  EXPECT_EQ(g.finish_reason(), FinishReason::Cancelled);
}

TEST(Generation, SampledWithTheRequestSeed) {
  auto r = greedy({}, 20);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  r.stop_tokens.clear();
  auto run = [&] {
    Generation g(r, kTok, kVocab);
    while (!g.finished()) {
      std::vector<float> flat(kVocab, 0.0f);
      flat[0] = flat[1] = flat[2] = flat[11] = -1e9f;
      g.accept(flat);
    }
    return g.generated();
  };
  EXPECT_EQ(run(), run());
}

TEST(Generation, BadRequestsAreErrors) {
  auto r = greedy();
  r.prompt.clear();
  EXPECT_THROW(Generation(r, kTok, kVocab), Error);
  r = greedy();
  r.max_tokens = -1;
  EXPECT_THROW(Generation(r, kTok, kVocab), Error);
  r = greedy({""});
  EXPECT_THROW(Generation(r, kTok, kVocab), Error);
  r = greedy();
  r.stop_tokens = {kVocab};
  EXPECT_THROW(Generation(r, kTok, kVocab), Error);
  r = greedy();
  r.sampling.top_p = 0.0f;
  EXPECT_THROW(Generation(r, kTok, kVocab), Error);
}
