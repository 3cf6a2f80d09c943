// Continuous batching: many Generations share one model. A single worker thread runs the
// model step by step; each step is one batched forward() with a decode row for every running
// sequence plus a bounded chunk of a newcomer's prompt, so running streams keep flowing while
// a long prompt is prefilled. Requests join between steps and leave as soon as they finish
// or are cancelled (their KV cache is freed at that step). The waiting queue is bounded:
// submit() refuses instead of queueing without limit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_config.h"
#include "kv/paged_cache.h"
#include "model/gemma_model.h"
#include "runtime/generation.h"

namespace lumen::tokenizer {
class Tokenizer;
}

namespace lumen::runtime {

struct SchedulerOptions {
  int max_active = 4;      // sequences decoding together
  int max_queued = 16;     // requests waiting for a slot; more are refused
  int prefill_chunk = 64;  // prompt rows admitted per step (all newcomers together)
  // Each sequence's cache (kv::make_cache); default: contiguous f32, the exact reference.
  kv::KvConfig kv_config = contiguous_f32();
  // KV memory of all sequences together, in bytes; 0 = no limit. A sequence reserves, when it
  // is admitted, what its cache takes at its prompt + max_tokens positions; one that does not
  // fit in what is left waits in the queue (first come, first served). Paged caches draw
  // their pages from one pool capped at the budget.
  int64_t kv_budget_bytes = 0;
  // Asked before every step: "" while the model may be used, else why not (its weights
  // changed on disk). From the first answer on, every sequence fails with it and submit()
  // refuses.
  std::function<std::string()> model_check;
  static kv::KvConfig contiguous_f32() {
    kv::KvConfig c;
    c.layout = kv::KvLayout::Contiguous;
    return c;
  }
};

// One request's view of its sequence. The worker appends text and finishes it; the request's
// thread waits for news and may cancel it (a client that went away).
class Ticket {
 public:
  // Waits up to `timeout` for text or the end; moves the text that arrived into `text`.
  // Returns true when the generation is over (finished, cancelled or failed) and all its text
  // has been taken.
  bool wait(std::chrono::milliseconds timeout, std::string& text);
  // The same, also moving the log-probabilities of the tokens that arrived (when asked for).
  bool wait(std::chrono::milliseconds timeout, std::string& text, std::vector<TokenLogprob>& logprobs);
  // Asks the worker to drop the sequence at its next step (or before it starts).
  void cancel();
  bool cancel_requested() const { return cancel_requested_.load(); }
  // True once the sequence has a slot (it left the queue).
  bool started() const { return started_.load(); }

  // Valid once wait() returned true.
  FinishReason finish_reason() const;
  const std::string& error() const;  // non-empty when the model step failed
  int prompt_tokens() const;
  int completion_tokens() const;

 private:
  friend class Scheduler;
  void push(const std::string& text, std::span<const TokenLogprob> logprobs = {});
  void finish(FinishReason reason, int completion_tokens, std::string error = {});

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string pending_;
  std::vector<TokenLogprob> pending_logprobs_;
  bool done_ = false;
  FinishReason reason_ = FinishReason::None;
  std::string error_;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  std::atomic<bool> cancel_requested_{false};
  std::atomic<bool> started_{false};
};

struct SchedulerStats {
  int64_t queued = 0;                 // waiting for a slot now
  int64_t active = 0;                 // decoding or prefilling now
  int64_t completed = 0;              // finished (stop or length)
  int64_t cancelled = 0;              // dropped after cancel()
  int64_t failed = 0;                 // a model step threw
  int64_t rejected = 0;               // refused because the queue was full
  int64_t rejected_memory = 0;        // refused because the queue was full of requests waiting for KV memory
  int64_t kv_reserved_bytes = 0;      // KV memory reserved by the active sequences now
  int64_t kv_budget_bytes = 0;        // the budget (0: none)
  bool waiting_for_memory = false;    // the oldest queued request waits for KV memory, not a slot
  int64_t prefill_tokens = 0;         // prompt rows run
  int64_t decode_tokens = 0;          // generated-token rows run
  double prefill_seconds = 0;         // step time attributed to prompt rows
  double decode_seconds = 0;          // step time attributed to decode rows
  int64_t steps = 0;
  // Watchdog: a stalled engine shows as a running step that keeps growing.
  double step_seconds_max = 0;          // the longest step since start
  double step_running_seconds = 0;      // how long the step in progress has run (0: none)
  double seconds_since_last_step = -1;  // since the last step ended (-1: none yet)
  // Constrained decoding: grammar masks computed (one per constrained sequence per sampling
  // step), the time computing them (beside the model step), and the part of it the step did
  // not hide (the step waited for the masks after the model was done).
  int64_t grammar_masks = 0;
  double grammar_mask_seconds = 0;
  double grammar_mask_wait_seconds = 0;
};

class Scheduler {
 public:
  Scheduler(const model::GemmaModel& model, const tokenizer::Tokenizer& tokenizer, SchedulerOptions options);
  ~Scheduler();  // stops the worker; unfinished tickets end as cancelled
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Why submit() refused a request.
  enum class Refusal {
    None,
    QueueFull,    // every slot busy and the queue full
    MemoryFull,   // the queue full of requests waiting for KV memory
    TooLarge,     // prompt + max_tokens need more KV memory than the whole budget
    Unavailable,  // the model may no longer be used (see unavailable())
  };
  // Builds the Generation (so a bad sampling parameter throws lumen::Error here, in the
  // caller's thread) and queues it. Returns nullptr when it is refused, and says why.
  std::shared_ptr<Ticket> submit(GenerationRequest request, Refusal* refusal = nullptr);
  // Several answers to one prompt (OpenAI's `n`): the requests must have the same prompt
  // (they differ in their seeds, say). Each is a sequence of its own (with its own KV
  // reservation), but the prompt runs once: the first request prefills it, and the others
  // start from a fork of its KV cache (kv::fork_cache) and the logits of its last row. All
  // are queued, or none (an empty result, and why) when they cannot all be taken.
  std::vector<std::shared_ptr<Ticket>> submit_choices(std::vector<GenerationRequest> requests,
                                                      Refusal* refusal = nullptr);

  // KV bytes a sequence of `positions` reserves under the budget.
  int64_t kv_reservation(int64_t positions) const;
  // The most positions one sequence can hold within the budget alone (no budget: INT64_MAX).
  int64_t positions_within_budget() const;
  // Ends every queued and running sequence as cancelled at the next step (a shutdown whose
  // drain time ran out).
  void cancel_all();
  // "" while the model may be used; else why not (options.model_check's answer).
  std::string unavailable() const;

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Pending;
  struct Active;
  void run();
  void step(std::vector<std::unique_ptr<Active>>& active);

  const model::GemmaModel& model_;
  const tokenizer::Tokenizer& tokenizer_;
  SchedulerOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  bool cancel_all_ = false;
  std::string unavailable_;
  std::shared_ptr<kv::KvPool> kv_pool_;  // paged layout: every sequence's pages
  SchedulerStats stats_;
  // Under mutex_: when the running step began (nullopt between steps) and the last one ended.
  std::optional<std::chrono::steady_clock::time_point> step_began_;
  std::optional<std::chrono::steady_clock::time_point> last_step_end_;
  std::thread worker_;
};

}  // namespace lumen::runtime
