#include "runtime/scheduler.h"

#include <algorithm>
#include <exception>
#include <future>
#include <limits>

#include "base/error.h"
#include "kv/make_cache.h"

namespace lumen::runtime {

// ------------------------------------------------------------------------------- Ticket

bool Ticket::wait(std::chrono::milliseconds timeout, std::string& text) {
  std::vector<TokenLogprob> ignored;
  return wait(timeout, text, ignored);
}

bool Ticket::wait(std::chrono::milliseconds timeout, std::string& text, std::vector<TokenLogprob>& logprobs) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return done_ || !pending_.empty() || !pending_logprobs_.empty(); });
  text += pending_;
  pending_.clear();
  logprobs.insert(logprobs.end(), pending_logprobs_.begin(), pending_logprobs_.end());
  pending_logprobs_.clear();
  return done_;
}

void Ticket::cancel() { cancel_requested_.store(true); }

FinishReason Ticket::finish_reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

const std::string& Ticket::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

int Ticket::prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return prompt_tokens_;
}

int Ticket::completion_tokens() const {
  std::lock_guard lock(mutex_);
  return completion_tokens_;
}

void Ticket::push(const std::string& text, std::span<const TokenLogprob> logprobs) {
  if (text.empty() && logprobs.empty()) return;
  {
    std::lock_guard lock(mutex_);
    pending_ += text;
    pending_logprobs_.insert(pending_logprobs_.end(), logprobs.begin(), logprobs.end());
  }
  changed_.notify_all();
}

void Ticket::finish(FinishReason reason, int completion_tokens, std::string error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    reason_ = reason;
    completion_tokens_ = completion_tokens;
    error_ = std::move(error);
  }
  changed_.notify_all();
}

// ---------------------------------------------------------------------------- Scheduler

namespace {

// The prompt of several choices, run once. The first choice (the leader) prefills it; when
// its last row has run, its cache is forked here together with that row's logits, and each
// other choice (a follower) starts from a fork of this one.
struct SharedPrompt {
  int followers = 0;                         // choices that have not taken the prompt yet
  std::unique_ptr<model::SequenceKv> cache;  // the prompt's cache, once the leader has run it
  std::vector<float> logits;                 // the logits of its last row
  bool abandoned = false;                    // the leader left before: followers prefill themselves
};

// A choice's tie to its shared prompt (worker thread only). Released when the leader has
// published the prompt, when a follower has taken it, or when the choice is dropped.
struct PromptLink {
  std::shared_ptr<SharedPrompt> shared;
  bool leader = false;

  PromptLink() = default;
  PromptLink(std::shared_ptr<SharedPrompt> s, bool is_leader) : shared(std::move(s)), leader(is_leader) {}
  PromptLink(PromptLink&& other) noexcept : shared(std::move(other.shared)), leader(other.leader) {}
  PromptLink& operator=(PromptLink&& other) noexcept {
    if (this != &other) {
      release();
      shared = std::move(other.shared);
      leader = other.leader;
    }
    return *this;
  }
  ~PromptLink() { release(); }

  void release() {
    if (!shared) return;
    if (!leader) --shared->followers;
    else if (!shared->cache) shared->abandoned = true;
    shared.reset();
    leader = false;
  }
};

}  // namespace

struct Scheduler::Pending {
  std::shared_ptr<Ticket> ticket;
  std::unique_ptr<Generation> generation;
  int64_t positions = 0;      // prompt + max_tokens, capped by the model's context
  int64_t kv_reserved = 0;    // KV bytes it holds under the budget once admitted
  PromptLink prompt_link;
};

struct Scheduler::Active {
  std::shared_ptr<Ticket> ticket;
  std::unique_ptr<Generation> generation;
  std::unique_ptr<model::SequenceKv> cache;
  int64_t kv_reserved = 0;
  PromptLink prompt_link;
  size_t prompt_done = 0;    // prompt rows already run
  int32_t next_pos = 0;      // position of the next row
  size_t logprobs_sent = 0;  // generation->logprobs() already pushed to the ticket

  Active(Pending&& p, const spec::ModelSpec& spec, const kv::KvConfig& config, std::shared_ptr<kv::KvPool> pool)
      : ticket(std::move(p.ticket)),
        generation(std::move(p.generation)),
        cache(kv::make_cache(spec, config, p.positions, std::move(pool))),
        kv_reserved(p.kv_reserved),
        prompt_link(std::move(p.prompt_link)) {
    ticket->started_.store(true);
  }
  // A follower waiting for the leader to run the shared prompt: it has no rows to run.
  bool waiting() const { return prompt_link.shared && !prompt_link.leader; }
  bool prefilling() const { return !waiting() && prompt_done < generation->request().prompt.size(); }
};

Scheduler::Scheduler(const model::GemmaModel& model, const tokenizer::Tokenizer& tokenizer,
                     SchedulerOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options) {
  options_.max_active = std::max(1, options_.max_active);
  options_.max_queued = std::max(0, options_.max_queued);
  options_.prefill_chunk = std::max(1, options_.prefill_chunk);
  options_.kv_budget_bytes = std::max<int64_t>(0, options_.kv_budget_bytes);
  stats_.kv_budget_bytes = options_.kv_budget_bytes;
  // Paged caches take their pages from one pool capped at the budget: a safety net under the
  // reservations, which keep every sequence within it.
  if (options_.kv_config.layout == kv::KvLayout::Paged)
    kv_pool_ = std::make_shared<kv::KvPool>(options_.kv_budget_bytes);
  worker_ = std::thread([this] { run(); });
}

int64_t Scheduler::kv_reservation(int64_t positions) const {
  const int64_t bytes = kv::kv_footprint(model_.spec(), options_.kv_config).bytes_at(positions);
  // A contiguous cache grows its arrays geometrically: up to twice what it holds.
  return options_.kv_config.layout == kv::KvLayout::Contiguous ? 2 * bytes : bytes;
}

int64_t Scheduler::positions_within_budget() const {
  if (options_.kv_budget_bytes <= 0) return std::numeric_limits<int64_t>::max();
  // Reservations grow with positions (sliding layers stop growing at their window): bisect.
  int64_t lo = 0, hi = 1;
  while (hi < (int64_t(1) << 40) && kv_reservation(hi) <= options_.kv_budget_bytes) hi *= 2;
  if (hi >= (int64_t(1) << 40)) return std::numeric_limits<int64_t>::max();
  while (lo + 1 < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    (kv_reservation(mid) <= options_.kv_budget_bytes ? lo : hi) = mid;
  }
  return lo;
}

void Scheduler::cancel_all() {
  {
    std::lock_guard lock(mutex_);
    cancel_all_ = true;
  }
  wake_.notify_all();
}

std::string Scheduler::unavailable() const {
  std::lock_guard lock(mutex_);
  return unavailable_;
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

std::shared_ptr<Ticket> Scheduler::submit(GenerationRequest request, Refusal* refusal) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  auto tickets = submit_choices(std::move(one), refusal);
  return tickets.empty() ? nullptr : tickets[0];
}

std::vector<std::shared_ptr<Ticket>> Scheduler::submit_choices(std::vector<GenerationRequest> requests,
                                                               Refusal* refusal) {
  Refusal ignored;
  Refusal& why = refusal ? *refusal : ignored;
  why = Refusal::None;
  std::vector<std::unique_ptr<Pending>> pending;
  std::vector<std::shared_ptr<Ticket>> tickets;
  std::shared_ptr<SharedPrompt> shared;
  if (requests.size() > 1) {
    shared = std::make_shared<SharedPrompt>();
    shared->followers = int(requests.size()) - 1;
  }
  for (const auto& request : requests)
    if (request.prompt != requests[0].prompt) throw Error("scheduler: the choices of one request must share its prompt");
  const int32_t max_positions = model_.spec().max_positions;
  for (auto& request : requests) {
    const int prompt_tokens = int(request.prompt.size());
    int64_t positions = int64_t(request.prompt.size()) + std::max(0, request.max_tokens);
    if (max_positions > 0) positions = std::min<int64_t>(positions, max_positions);
    auto p = std::make_unique<Pending>();
    p->generation = std::make_unique<Generation>(std::move(request), tokenizer_, model_.spec().vocab_size);
    p->ticket = std::make_shared<Ticket>();
    p->ticket->prompt_tokens_ = prompt_tokens;
    p->positions = positions;
    p->kv_reserved = options_.kv_budget_bytes > 0 ? kv_reservation(positions) : 0;
    if (options_.kv_budget_bytes > 0 && p->kv_reserved > options_.kv_budget_bytes) {
      why = Refusal::TooLarge;
      return {};
    }
    if (shared) p->prompt_link = PromptLink(shared, pending.empty());
    tickets.push_back(p->ticket);
    pending.push_back(std::move(p));
  }
  {
    std::lock_guard lock(mutex_);
    if (!unavailable_.empty()) {
      why = Refusal::Unavailable;
      return {};
    }
    // Requests the worker has not picked up yet but will admit at once (free slots) do not
    // count against the waiting room.
    const int64_t free_slots = std::max<int64_t>(0, options_.max_active - stats_.active);
    if (int64_t(queue_.size() + pending.size()) > options_.max_queued + free_slots) {
      if (stats_.waiting_for_memory) {
        ++stats_.rejected_memory;
        why = Refusal::MemoryFull;
      } else {
        ++stats_.rejected;
        why = Refusal::QueueFull;
      }
      return {};
    }
    for (auto& p : pending) queue_.push_back(std::move(p));
    stats_.queued = int64_t(queue_.size());
  }
  wake_.notify_all();
  return tickets;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = stats_;
  const auto now = std::chrono::steady_clock::now();
  if (step_began_) s.step_running_seconds = std::chrono::duration<double>(now - *step_began_).count();
  if (last_step_end_) s.seconds_since_last_step = std::chrono::duration<double>(now - *last_step_end_).count();
  return s;
}

void Scheduler::run() {
  std::vector<std::unique_ptr<Active>> active;
  for (;;) {
    std::string problem;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || cancel_all_ || !queue_.empty() || !active.empty(); });
      if (stopping_) break;
      if (cancel_all_) {  // one shot: what is there now
        for (auto& p : queue_) p->ticket->cancel();
        for (auto& a : active) a->ticket->cancel();
        cancel_all_ = false;
      }
    }
    // Asked outside the lock: it may touch the file system.
    if (options_.model_check) problem = options_.model_check();
    {
      std::unique_lock lock(mutex_);
      if (!problem.empty() && unavailable_.empty()) unavailable_ = problem;
      if (!unavailable_.empty()) {
        // The weights may be gone from under their mapping: no step may read them again.
        for (auto& a : active) a->ticket->finish(FinishReason::None, int(a->generation->generated().size()), unavailable_);
        for (auto& p : queue_) p->ticket->finish(FinishReason::None, 0, unavailable_);
        stats_.failed += int64_t(active.size() + queue_.size());
        active.clear();
        queue_.clear();
        stats_.queued = stats_.active = stats_.kv_reserved_bytes = 0;
        stats_.waiting_for_memory = false;
        continue;
      }
      // Queued requests whose client went away (or whose time ran out) leave now, wherever
      // they are in the queue.
      std::erase_if(queue_, [&](const std::unique_ptr<Pending>& p) {
        if (!p->ticket->cancel_requested()) return false;
        p->ticket->finish(FinishReason::Cancelled, 0);
        ++stats_.cancelled;
        return true;
      });
      // Newcomers join between steps, oldest first, while a slot and the KV memory they
      // reserve are free.
      stats_.waiting_for_memory = false;
      while (int(active.size()) < options_.max_active && !queue_.empty()) {
        Pending& next = *queue_.front();
        if (next.ticket->cancel_requested()) {
          next.ticket->finish(FinishReason::Cancelled, 0);
          ++stats_.cancelled;
          queue_.pop_front();
          continue;
        }
        if (options_.kv_budget_bytes > 0 && stats_.kv_reserved_bytes + next.kv_reserved > options_.kv_budget_bytes) {
          stats_.waiting_for_memory = true;
          break;
        }
        auto p = std::move(queue_.front());
        queue_.pop_front();
        stats_.kv_reserved_bytes += p->kv_reserved;
        active.push_back(std::make_unique<Active>(std::move(*p), model_.spec(), options_.kv_config, kv_pool_));
      }
      stats_.queued = int64_t(queue_.size());
      stats_.active = int64_t(active.size());
    }
    if (!active.empty()) step(active);
  }
  // Shutting down: whatever is left ends as cancelled.
  std::lock_guard lock(mutex_);
  for (auto& a : active) a->ticket->finish(FinishReason::Cancelled, int(a->generation->generated().size()));
  for (auto& p : queue_) p->ticket->finish(FinishReason::Cancelled, 0);
  queue_.clear();
}

void Scheduler::step(std::vector<std::unique_ptr<Active>>& active) {
  int64_t cancelled = 0, completed = 0, failed = 0;
  // Tickets are finished only after the stats are updated, so a caller that sees its ticket
  // done also sees the counters and the freed slot.
  struct Ending {
    std::shared_ptr<Ticket> ticket;
    FinishReason reason;
    int tokens;
    std::string error;
  };
  std::vector<Ending> endings;
  // A client that went away frees its sequence now.
  int64_t released = 0;  // KV reservations of the sequences that leave at this step
  std::erase_if(active, [&](const std::unique_ptr<Active>& a) {
    if (!a->ticket->cancel_requested()) return false;
    a->generation->cancel();
    endings.push_back({a->ticket, FinishReason::Cancelled, int(a->generation->generated().size()), {}});
    ++cancelled;
    released += a->kv_reserved;
    return true;
  });

  // Followers whose leader left before running the prompt run it themselves.
  for (auto& a : active)
    if (a->waiting() && a->prompt_link.shared->abandoned) a->prompt_link.release();

  std::vector<model::BatchRow> rows;
  std::vector<model::SequenceKv*> caches;
  std::vector<size_t> logit_owner;  // active index of each row that asks for logits
  int64_t decode_rows = 0, prefill_rows = 0;
  const int32_t max_positions = model_.spec().max_positions;

  // Every running sequence decodes one token per step.
  for (size_t i = 0; i < active.size(); ++i) {
    Active& a = *active[i];
    caches.push_back(a.cache.get());
    if (a.prefilling() || a.waiting()) continue;
    rows.push_back({int32_t(i), a.next_pos++, a.generation->next_input(), true});
    logit_owner.push_back(i);
    ++decode_rows;
  }
  // Then prompt rows, oldest newcomer first, up to the chunk budget.
  int budget = options_.prefill_chunk;
  for (size_t i = 0; i < active.size() && budget > 0; ++i) {
    Active& a = *active[i];
    const auto& prompt = a.generation->request().prompt;
    while (a.prefilling() && budget > 0) {
      const bool last = a.prompt_done + 1 == prompt.size();
      rows.push_back({int32_t(i), a.next_pos++, prompt[a.prompt_done], last});
      if (last) logit_owner.push_back(i);
      ++a.prompt_done;
      ++prefill_rows;
      --budget;
    }
  }

  std::vector<float> logits;
  std::string failure;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    step_began_ = t0;
  }
  // Grammar masks of the sequences sampling this step are computed while the model runs.
  std::future<void> masks;
  int64_t mask_count = 0;
  double mask_seconds = 0, mask_wait_seconds = 0;
  for (size_t i : logit_owner) mask_count += active[i]->generation->request().grammar != nullptr;
  if (mask_count > 0)
    masks = std::async(std::launch::async, [&] {
      const auto m0 = std::chrono::steady_clock::now();
      for (size_t i : logit_owner) active[i]->generation->prepare_mask();
      mask_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
    });
  if (!rows.empty()) {
    try {
      model_.forward(rows, caches, logits);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (masks.valid()) {
    const auto w0 = std::chrono::steady_clock::now();
    try {
      masks.get();
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
    }
    mask_wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(t1 - t0).count();

  if (!failure.empty()) {
    // The step's state is unknown for every sequence in it: end them all with the error.
    for (auto& a : active) {
      endings.push_back({a->ticket, FinishReason::None, int(a->generation->generated().size()), failure});
      released += a->kv_reserved;
    }
    failed = int64_t(active.size());
    active.clear();
  } else {
    const int64_t V = model_.spec().vocab_size;
    std::vector<bool> done(active.size(), false);
    // Samples a sequence's next token from `row` and passes on its text, or ends it.
    const auto sample = [&](size_t index, std::span<float> row) {
      Active& a = *active[index];
      std::string text;
      try {
        text = a.generation->accept(row);
      } catch (const std::exception& e) {
        endings.push_back({a.ticket, FinishReason::None, int(a.generation->generated().size()), e.what()});
        done[index] = true;
        ++failed;
        return;
      }
      const auto& lps = a.generation->logprobs();
      a.ticket->push(text, std::span<const TokenLogprob>(lps).subspan(std::min(a.logprobs_sent, lps.size())));
      a.logprobs_sent = lps.size();
      const bool out_of_context = max_positions > 0 && a.next_pos >= max_positions;
      if (a.generation->finished() || out_of_context) {
        FinishReason reason = a.generation->finish_reason();
        if (!a.generation->finished()) {
          a.generation->cancel();
          reason = FinishReason::Length;
        }
        endings.push_back({a.ticket, reason, int(a.generation->generated().size()), {}});
        done[index] = true;
        ++completed;
      }
    };
    for (size_t r = 0; r < logit_owner.size(); ++r) {
      Active& a = *active[logit_owner[r]];
      const std::span<float> row(logits.data() + int64_t(r) * V, size_t(V));
      if (a.prompt_link.leader) {
        // Its prompt is done (a leader's first logits are its last prompt row's): publish
        // the prompt for the followers before sampling changes the logits.
        SharedPrompt& shared = *a.prompt_link.shared;
        if (shared.followers > 0) {
          shared.cache = kv::fork_cache(*a.cache, a.next_pos);
          shared.logits.assign(row.begin(), row.end());
        }
        a.prompt_link.release();
      }
      sample(logit_owner[r], row);
    }
    // Followers whose prompt is ready start from it: its cache (the last one takes it, the
    // others a fork) and its last logits, which give their first token.
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = *active[i];
      if (!a.waiting() || !a.prompt_link.shared->cache) continue;
      SharedPrompt& shared = *a.prompt_link.shared;
      const int32_t length = int32_t(a.generation->request().prompt.size());
      a.cache = shared.followers == 1 ? std::move(shared.cache) : kv::fork_cache(*shared.cache, length);
      std::vector<float> first = shared.logits;
      a.prompt_link.release();
      a.prompt_done = size_t(length);
      a.next_pos = length;
      sample(i, first);
    }
    for (size_t i = active.size(); i-- > 0;)
      if (done[i]) {
        released += active[i]->kv_reserved;
        active.erase(active.begin() + int64_t(i));
      }
  }

  {
    std::lock_guard lock(mutex_);
    stats_.cancelled += cancelled;
    stats_.completed += completed;
    stats_.failed += failed;
    stats_.prefill_tokens += prefill_rows;
    stats_.decode_tokens += decode_rows;
    const int64_t all_rows = prefill_rows + decode_rows;
    if (all_rows > 0) {
      stats_.prefill_seconds += seconds * double(prefill_rows) / double(all_rows);
      stats_.decode_seconds += seconds * double(decode_rows) / double(all_rows);
      ++stats_.steps;
    }
    stats_.active = int64_t(active.size());
    stats_.kv_reserved_bytes -= released;
    stats_.step_seconds_max = std::max(stats_.step_seconds_max, seconds);
    stats_.grammar_masks += mask_count;
    stats_.grammar_mask_seconds += mask_seconds;
    stats_.grammar_mask_wait_seconds += mask_wait_seconds;
    step_began_.reset();
    last_step_end_ = t1;
  }
  for (auto& e : endings) e.ticket->finish(e.reason, e.tokens, std::move(e.error));
}

}  // namespace lumen::runtime
