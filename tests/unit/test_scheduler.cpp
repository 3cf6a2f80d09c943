// Scheduler: sequences decoded together (with chunked prefill interleaved) produce exactly
// what each produces alone; a full queue refuses; a cancelled sequence leaves at the next step.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "fake_tokenizer.h"
#include "kv/contiguous_cache.h"
#include "runtime/grammar.h"
#include "runtime/scheduler.h"
#include "runtime/token_mask.h"
#include "tiny_model.h"

using lumen::test_support::letters;

using namespace lumen;
using runtime::FinishReason;
using runtime::GenerationRequest;
using runtime::Scheduler;
using runtime::SchedulerOptions;
using runtime::CompiledGrammar;
using runtime::SchedulerStats;
using runtime::TokenTrie;
using runtime::lower;
using runtime::parse_gbnf;

namespace {

const test_support::TinyModel& scheduler_model() {
  static test_support::TinyModel m(test_support::tiny_model_spec(32, 3, 64));
  return m;
}

GenerationRequest request(std::vector<int32_t> prompt, int n, float temperature, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.max_tokens = n;
  return r;
}

// One sequence alone, one row per step: the reference the batched run must match.
std::vector<int32_t> alone(const GenerationRequest& req, const tokenizer::Tokenizer& tok,
                           const model::GemmaModel& model = scheduler_model().model()) {
  runtime::Generation g(req, tok, model.spec().vocab_size);
  kv::ContiguousCache cache(model.spec());
  model::SequenceKv* caches[] = {&cache};
  std::vector<float> logits;
  int32_t pos = 0;
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    const model::BatchRow row{0, pos++, req.prompt[i], i + 1 == req.prompt.size()};
    model.forward(std::span(&row, 1), caches, logits);
  }
  for (;;) {
    g.accept(logits);
    if (g.finished()) break;
    const model::BatchRow row{0, pos++, g.next_input(), true};
    model.forward(std::span(&row, 1), caches, logits);
  }
  return g.generated();
}

std::string drain(runtime::Ticket& t) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!t.wait(std::chrono::milliseconds(50), text))
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "ticket did not finish";
      break;
    }
  return text;
}

template <class Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace

TEST(Scheduler, BatchedSequencesMatchEachAlone) {
  const auto tok = letters();
  const std::vector<GenerationRequest> reqs = {
      request({2, 5, 9, 14, 3, 7, 22, 8, 11}, 12, 0.0f, 0),
      request({2, 30, 4}, 15, 0.9f, 7),
      request({2, 6, 6, 6, 19, 20, 21, 25, 26, 27, 28, 12, 13}, 9, 0.7f, 1234),
      request({2, 17}, 10, 0.0f, 0),
  };
  // References first: the kernels' thread pool serves one forward() at a time, and while
  // the scheduler runs, its worker is the only caller.
  std::vector<std::vector<int32_t>> wants;
  for (const auto& r : reqs) wants.push_back(alone(r, tok));
  SchedulerOptions opts;
  opts.max_active = 3;    // the fourth waits for a slot
  opts.max_queued = 8;
  opts.prefill_chunk = 3;  // prompts arrive in chunks while others decode
  Scheduler s(scheduler_model().model(), tok, opts);
  std::vector<std::shared_ptr<runtime::Ticket>> tickets;
  for (const auto& r : reqs) tickets.push_back(s.submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(tickets[i]);
    const std::string text = drain(*tickets[i]);
    const auto& want = wants[i];
    EXPECT_EQ(tickets[i]->finish_reason(), FinishReason::Length) << i;
    EXPECT_EQ(tickets[i]->completion_tokens(), int(want.size())) << i;
    EXPECT_EQ(tickets[i]->prompt_tokens(), int(reqs[i].prompt.size())) << i;
    EXPECT_EQ(text, tok.decode(want, true)) << "request " << i;
  }
  const auto st = s.stats();
  EXPECT_EQ(st.completed, 4);
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.queued, 0);
  int64_t prompt_rows = 0, decode_rows = 0;
  for (const auto& r : reqs) {
    prompt_rows += int64_t(r.prompt.size());
    decode_rows += r.max_tokens - 1;  // the first token comes from the last prompt row
  }
  EXPECT_EQ(st.prefill_tokens, prompt_rows);
  EXPECT_EQ(st.decode_tokens, decode_rows);
  // Batching happened: fewer steps than rows.
  EXPECT_LT(st.steps, prompt_rows + decode_rows);
}

TEST(Scheduler, FullQueueRefusesAndCancelFreesTheSlot) {
  const auto tok = letters();
  SchedulerOptions opts;
  opts.max_active = 1;
  opts.max_queued = 1;
  // A context and max_tokens so large that the first request runs until it is cancelled.
  static const test_support::TinyModel roomy(test_support::tiny_model_spec(32, 3, 1 << 20));
  Scheduler s(roomy.model(), tok, opts);
  auto running = s.submit(request({2, 5, 6}, 1 << 19, 0.0f, 0));
  ASSERT_TRUE(running);
  ASSERT_TRUE(eventually([&] { return s.stats().active == 1; }));
  auto waiting = s.submit(request({2, 7}, 3, 0.0f, 0));
  ASSERT_TRUE(waiting);
  EXPECT_EQ(s.submit(request({2, 8}, 3, 0.0f, 0)), nullptr) << "the queue holds one";
  EXPECT_EQ(s.stats().rejected, 1);

  running->cancel();
  drain(*running);
  EXPECT_EQ(running->finish_reason(), FinishReason::Cancelled);
  EXPECT_LT(running->completion_tokens(), 1 << 19);
  // The waiting request gets the freed slot and completes.
  drain(*waiting);
  EXPECT_EQ(waiting->finish_reason(), FinishReason::Length);
  EXPECT_EQ(waiting->completion_tokens(), 3);
  const auto st = s.stats();
  EXPECT_EQ(st.cancelled, 1);
  EXPECT_EQ(st.completed, 1);
  EXPECT_EQ(st.active, 0);
}

TEST(Scheduler, ContextLimitEndsWithLength) {
  const auto tok = letters();
  Scheduler s(scheduler_model().model(), tok, {});
  // Asks for more than the 64 positions hold: stops when the context is full.
  auto t = s.submit(request({2, 5, 6, 7}, 500, 0.0f, 0));
  ASSERT_TRUE(t);
  drain(*t);
  EXPECT_EQ(t->finish_reason(), FinishReason::Length);
  EXPECT_EQ(t->completion_tokens(), 64 - 4 + 1);
}

TEST(Scheduler, BadSamplingThrowsAtSubmit) {
  const auto tok = letters();
  Scheduler s(scheduler_model().model(), tok, {});
  auto r = request({2, 5}, 3, -1.0f, 0);
  EXPECT_THROW(s.submit(r), Error);
}

// n choices of one prompt: the prompt runs once (the others fork its cache and take its last
// logits), and each choice is exactly what it is when submitted on its own, with either cache
// layout, also when a choice waits for a slot until the leader has finished (it then starts
// from the snapshot).
TEST(Scheduler, ChoicesOfOnePromptPrefillItOnceAndMatchSeparateRequests) {
  const auto tok = letters();
  const std::vector<int32_t> prompt = {2, 5, 9, 14, 3, 7, 22, 8, 11, 4, 4, 19};
  std::vector<GenerationRequest> choices;
  for (uint64_t seed : {11u, 12u, 13u}) choices.push_back(request(prompt, 6 + int(seed % 3) * 2, 0.9f, seed));
  const GenerationRequest other = request({2, 30, 4}, 5, 0.0f, 0);

  for (const auto layout : {kv::KvLayout::Contiguous, kv::KvLayout::Paged}) {
    SCOPED_TRACE(layout == kv::KvLayout::Paged ? "paged" : "contiguous");
    SchedulerOptions opts;
    opts.max_active = 2;  // the third choice starts after the first has ended
    opts.max_queued = 8;
    opts.prefill_chunk = 5;
    opts.kv_config.layout = layout;
    opts.kv_config.page_size = 4;
    std::vector<std::string> wants;
    {
      Scheduler separate(scheduler_model().model(), tok, opts);
      for (const auto& r : choices) {
        auto t = separate.submit(r);
        ASSERT_TRUE(t);
        wants.push_back(drain(*t));
      }
      EXPECT_EQ(separate.stats().prefill_tokens, int64_t(3 * prompt.size()));
    }
    if (layout == kv::KvLayout::Contiguous) {
      EXPECT_EQ(wants[0], tok.decode(alone(choices[0], tok), true));
    }
    EXPECT_NE(wants[0], wants[1]) << "the seeds make different choices";

    Scheduler s(scheduler_model().model(), tok, opts);
    const auto tickets = s.submit_choices(choices);
    ASSERT_EQ(tickets.size(), 3u);
    auto other_ticket = s.submit(other);
    ASSERT_TRUE(other_ticket);
    for (size_t i = 0; i < tickets.size(); ++i) {
      EXPECT_EQ(drain(*tickets[i]), wants[i]) << "choice " << i;
      EXPECT_EQ(tickets[i]->finish_reason(), FinishReason::Length);
      EXPECT_EQ(tickets[i]->completion_tokens(), choices[i].max_tokens);
      EXPECT_EQ(tickets[i]->prompt_tokens(), int(prompt.size()));
    }
    EXPECT_EQ(drain(*other_ticket), tok.decode(alone(other, tok), true));
    const auto st = s.stats();
    EXPECT_EQ(st.completed, 4);
    EXPECT_EQ(st.prefill_tokens, int64_t(prompt.size() + other.prompt.size())) << "the shared prompt ran once";
    int64_t decode_rows = other.max_tokens - 1;
    for (const auto& r : choices) decode_rows += r.max_tokens - 1;
    EXPECT_EQ(st.decode_tokens, decode_rows);
  }
}

TEST(Scheduler, ChoicesWhoseLeaderIsCancelledRunThePromptThemselves) {
  const auto tok = letters();
  static const test_support::TinyModel roomy(test_support::tiny_model_spec(32, 3, 1 << 20));
  const std::vector<int32_t> prompt = {2, 5, 9, 14, 3, 7};
  std::vector<GenerationRequest> choices;
  for (uint64_t seed : {1u, 2u}) choices.push_back(request(prompt, 4, 0.8f, seed));
  const auto want = alone(choices[1], tok, roomy.model());
  SchedulerOptions opts;
  opts.max_active = 1;
  Scheduler s(roomy.model(), tok, opts);
  // A request that runs until cancelled holds the only slot: both choices wait in the queue.
  // Its prompt must have run before it is cancelled, or the prefill count below would race.
  auto blocker = s.submit(request({2, 3}, 1 << 19, 0.0f, 0));
  ASSERT_TRUE(eventually([&] { return s.stats().active == 1 && s.stats().prefill_tokens == 2; }));
  const auto tickets = s.submit_choices(choices);
  ASSERT_EQ(tickets.size(), 2u);
  tickets[0]->cancel();  // the leader goes before its prompt ran
  blocker->cancel();
  drain(*blocker);
  drain(*tickets[0]);
  EXPECT_EQ(tickets[0]->finish_reason(), FinishReason::Cancelled);
  EXPECT_EQ(drain(*tickets[1]), tok.decode(want, true));
  EXPECT_EQ(tickets[1]->finish_reason(), FinishReason::Length);
  EXPECT_EQ(s.stats().prefill_tokens, 2 + int64_t(prompt.size())) << "the blocker's prompt and the follower's";
}

TEST(Scheduler, ChoicesAreQueuedAllOrNone) {
  const auto tok = letters();
  SchedulerOptions opts;
  opts.max_active = 1;
  opts.max_queued = 2;
  Scheduler s(scheduler_model().model(), tok, opts);
  std::vector<GenerationRequest> four(4, request({2, 5, 6}, 3, 0.0f, 0));
  EXPECT_TRUE(s.submit_choices(four).empty()) << "1 free slot + 2 waiting places < 4";
  EXPECT_EQ(s.stats().rejected, 1);
  std::vector<GenerationRequest> mixed = {request({2, 5}, 3, 0.0f, 0), request({2, 6}, 3, 0.0f, 0)};
  EXPECT_THROW(s.submit_choices(mixed), Error);
  std::vector<GenerationRequest> three(3, request({2, 5, 6}, 3, 0.0f, 0));
  const auto tickets = s.submit_choices(three);
  ASSERT_EQ(tickets.size(), 3u);
  for (const auto& t : tickets) {
    drain(*t);
    EXPECT_EQ(t->completion_tokens(), 3);
  }
}

// --- faults: KV memory budget, cancel_all, a model that becomes unusable ------------------

const test_support::TinyModel& roomy() {
  static const test_support::TinyModel m(test_support::tiny_model_spec(32, 3, 1 << 20));
  return m;
}

TEST(Scheduler, KvBudgetMakesRequestsWaitThenRefuses) {
  const auto tok = letters();
  SchedulerOptions opts;
  opts.max_active = 4;
  opts.max_queued = 0;
  const int64_t long_run = 1 << 16;  // runs until cancelled
  {
    Scheduler probe(roomy().model(), tok, opts);
    // Room for one long request, not two.
    opts.kv_budget_bytes = probe.kv_reservation(long_run + 3) * 3 / 2;
  }
  Scheduler s(roomy().model(), tok, opts);
  EXPECT_EQ(s.positions_within_budget() >= long_run + 3, true);
  auto first = s.submit(request({2, 5, 6}, long_run, 0.0f, 0));
  ASSERT_TRUE(first);
  ASSERT_TRUE(eventually([&] { return s.stats().active == 1; }));
  EXPECT_EQ(s.stats().kv_reserved_bytes, s.kv_reservation(long_run + 3));
  // Slots are free but the memory is not: the next ones wait.
  std::vector<std::shared_ptr<runtime::Ticket>> waiting;
  for (int i = 0; i < 3; ++i) {
    Scheduler::Refusal why = Scheduler::Refusal::QueueFull;
    waiting.push_back(s.submit(request({2, 7, 8}, long_run, 0.0f, 0), &why));
    ASSERT_TRUE(waiting.back()) << i;
    EXPECT_EQ(why, Scheduler::Refusal::None);
  }
  ASSERT_TRUE(eventually([&] { return s.stats().waiting_for_memory; }));
  EXPECT_EQ(s.stats().active, 1);
  EXPECT_EQ(s.stats().queued, 3);
  EXPECT_FALSE(waiting[0]->started());
  // The queue is full of requests waiting for memory: refused as such.
  Scheduler::Refusal why = Scheduler::Refusal::None;
  EXPECT_EQ(s.submit(request({2, 9}, long_run, 0.0f, 0), &why), nullptr);
  EXPECT_EQ(why, Scheduler::Refusal::MemoryFull);
  EXPECT_EQ(s.stats().rejected_memory, 1);
  // More than the whole budget: refused at once.
  EXPECT_EQ(s.submit(request({2, 9}, 1 << 19, 0.0f, 0), &why), nullptr);
  EXPECT_EQ(why, Scheduler::Refusal::TooLarge);
  // The first leaves: the oldest waiting one takes its memory, the others keep waiting.
  first->cancel();
  drain(*first);
  ASSERT_TRUE(eventually([&] { return waiting[0]->started(); }));
  EXPECT_EQ(s.stats().active, 1);
  EXPECT_LE(s.stats().kv_reserved_bytes, opts.kv_budget_bytes);
  EXPECT_FALSE(waiting[1]->started());
  // Shutdown's last resort: everything ends as cancelled, and the memory is returned.
  s.cancel_all();
  for (auto& t : waiting) {
    drain(*t);
    EXPECT_EQ(t->finish_reason(), FinishReason::Cancelled);
  }
  ASSERT_TRUE(eventually([&] { return s.stats().active == 0 && s.stats().queued == 0; }));
  EXPECT_EQ(s.stats().kv_reserved_bytes, 0);
  EXPECT_EQ(s.stats().cancelled, 4);
}

TEST(Scheduler, PositionsWithinBudget) {
  const auto tok = letters();
  SchedulerOptions opts;
  Scheduler probe(roomy().model(), tok, opts);
  EXPECT_EQ(probe.positions_within_budget(), std::numeric_limits<int64_t>::max());
  opts.kv_budget_bytes = probe.kv_reservation(1000);
  Scheduler s(roomy().model(), tok, opts);
  EXPECT_EQ(s.positions_within_budget(), 1000);
  EXPECT_GT(s.kv_reservation(1001), opts.kv_budget_bytes);
}

TEST(Scheduler, ModelThatBecomesUnusableFailsSequencesAndRefusesNewOnes) {
  const auto tok = letters();
  SchedulerOptions opts;
  std::atomic<bool> broken{false};
  opts.model_check = [&] { return broken ? std::string("model file 'm.gguf' truncated") : std::string(); };
  Scheduler s(roomy().model(), tok, opts);
  auto running = s.submit(request({2, 5}, 1 << 16, 0.0f, 0));
  ASSERT_TRUE(running);
  ASSERT_TRUE(eventually([&] { return s.stats().decode_tokens > 3; }));
  broken = true;
  drain(*running);
  EXPECT_EQ(running->error(), "model file 'm.gguf' truncated");
  EXPECT_EQ(s.unavailable(), "model file 'm.gguf' truncated");
  Scheduler::Refusal why = Scheduler::Refusal::None;
  EXPECT_EQ(s.submit(request({2, 5}, 3, 0.0f, 0), &why), nullptr);
  EXPECT_EQ(why, Scheduler::Refusal::Unavailable);
  EXPECT_EQ(s.stats().failed, 1);
}

// Constrained decoding's cost is visible: one mask per constrained sequence per sampling step,
// with the time computing them and the part the model step did not hide.
TEST(Scheduler, GrammarMasksAreCountedAndTimed) {
  const auto tok = letters();
  Scheduler s(scheduler_model().model(), tok, SchedulerOptions{});
  auto grammar = std::make_shared<CompiledGrammar>(lower(parse_gbnf("root ::= \"abc\" [a-z]*")),
                                                   std::make_shared<TokenTrie>(tok));
  GenerationRequest constrained = request({2, 5}, 6, 0.0f, 0);
  constrained.grammar = grammar;
  auto t = s.submit(constrained);
  ASSERT_NE(t, nullptr);
  std::string text;
  while (!t->wait(std::chrono::milliseconds(50), text)) {
  }
  EXPECT_EQ(text.substr(0, 3), "abc");
  const SchedulerStats after_constrained = s.stats();
  EXPECT_EQ(after_constrained.grammar_masks, t->completion_tokens());
  EXPECT_GT(after_constrained.grammar_mask_seconds, 0.0);
  EXPECT_GE(after_constrained.grammar_mask_wait_seconds, 0.0);
  auto free = s.submit(request({2, 5}, 4, 0.0f, 0));
  ASSERT_NE(free, nullptr);
  while (!free->wait(std::chrono::milliseconds(50), text)) {
  }
  EXPECT_EQ(s.stats().grammar_masks, after_constrained.grammar_masks) << "an unconstrained sequence needs no mask";
}
