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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kv/kv_config.h"
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
  // Asks the worker to drop the sequence at its next step (or before it starts).
  void cancel();
  bool cancel_requested() const { return cancel_requested_.load(); }

  // Valid once wait() returned true.
  FinishReason finish_reason() const;
  const std::string& error() const;  // non-empty when the model step failed
  int prompt_tokens() const;
  int completion_tokens() const;

 private:
  friend class Scheduler;
  void push(const std::string& text);
  void finish(FinishReason reason, int completion_tokens, std::string error = {});

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::string pending_;
  bool done_ = false;
  FinishReason reason_ = FinishReason::None;
  std::string error_;
  int prompt_tokens_ = 0;
  int completion_tokens_ = 0;
  std::atomic<bool> cancel_requested_{false};
};

struct SchedulerStats {
  int64_t queued = 0;                 // waiting for a slot now
  int64_t active = 0;                 // decoding or prefilling now
  int64_t completed = 0;              // finished (stop or length)
  int64_t cancelled = 0;              // dropped after cancel()
  int64_t failed = 0;                 // a model step threw
  int64_t rejected = 0;               // refused because the queue was full
  int64_t prefill_tokens = 0;         // prompt rows run
  int64_t decode_tokens = 0;          // generated-token rows run
  double prefill_seconds = 0;         // step time attributed to prompt rows
  double decode_seconds = 0;          // step time attributed to decode rows
  int64_t steps = 0;
  // Watchdog: a stalled engine shows as a running step that keeps growing.
  double step_seconds_max = 0;          // the longest step since start
  double step_running_seconds = 0;      // how long the step in progress has run (0: none)
  double seconds_since_last_step = -1;  // since the last step ended (-1: none yet)
};

class Scheduler {
 public:
  Scheduler(const model::GemmaModel& model, const tokenizer::Tokenizer& tokenizer, SchedulerOptions options);
  ~Scheduler();  // stops the worker; unfinished tickets end as cancelled
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Builds the Generation (so a bad sampling parameter throws lumen::Error here, in the
  // caller's thread) and queues it. Returns nullptr when the queue is full.
  std::shared_ptr<Ticket> submit(GenerationRequest request);

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
  SchedulerStats stats_;
  // Under mutex_: when the running step began (nullopt between steps) and the last one ended.
  std::optional<std::chrono::steady_clock::time_point> step_began_;
  std::optional<std::chrono::steady_clock::time_point> last_step_end_;
  std::thread worker_;
};

}  // namespace lumen::runtime
