#include "runtime/session.h"

#include <future>

#include <algorithm>
#include <chrono>

#include "base/error.h"
#include "kv/contiguous_cache.h"
#include "kv/make_cache.h"
#include "runtime/engine.h"

namespace lumen::runtime {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
bool cancelled(const std::atomic<bool>* cancel) { return cancel && cancel->load(std::memory_order_relaxed); }
}  // namespace

Session::Session(const model::GemmaModel& model, const tokenizer::Tokenizer& tokenizer,
                 std::unique_ptr<model::SequenceKv> cache)
    : model_(model), tokenizer_(tokenizer), cache_(std::move(cache)) {
  if (!cache_) cache_ = std::make_unique<kv::ContiguousCache>(model_.spec());
}

Session::Session(const Engine& engine)
    : Session(engine.model(), engine.require_tokenizer(), kv::make_cache(engine.spec(), engine.run_config().kv)) {
  set_prefill_chunk(engine.run_config().prefill_chunk);
}

void Session::set_prefill_chunk(int rows) {
  if (rows <= 0) throw Error("session: prefill chunk " + std::to_string(rows) + " must be positive");
  prefill_chunk_ = rows;
}

std::span<float> Session::prefill(std::span<const int32_t> prompt, const std::atomic<bool>* cancel) {
  if (prompt.empty()) throw Error("generation request: the prompt is empty");
  const int max_positions = model_.spec().max_positions;
  if (max_positions > 0 && int64_t(prompt.size()) > max_positions)
    throw Error("generation request: the prompt has " + std::to_string(prompt.size()) +
                " tokens, more than the model's context of " + std::to_string(max_positions));
  // The longest common prefix with what the cache holds; the last prompt position is always
  // recomputed because its logits are needed.
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  common = std::min(common, prompt.size() - 1);
  // A paged cache's sliding rings cannot go back more than about a page.
  common = size_t(cache_->resumable_length(int32_t(common)));
  last_reused_ = int(common);
  // Storing at position `common` makes the cache forget every later position.
  tokens_.resize(common);

  model::SequenceKv* caches[] = {cache_.get()};
  const int64_t V = model_.spec().vocab_size;
  for (size_t start = common; start < prompt.size(); start += size_t(prefill_chunk_)) {
    if (cancelled(cancel)) return {};
    const size_t end = std::min(prompt.size(), start + size_t(prefill_chunk_));
    rows_.clear();
    for (size_t i = start; i < end; ++i) rows_.push_back({0, int32_t(i), prompt[i], i + 1 == prompt.size()});
    model_.hint_next_tokens(prompt.subspan(end));  // per-layer input rows fetched while this chunk runs
    model_.forward(rows_, caches, logits_);
    tokens_.insert(tokens_.end(), prompt.begin() + int64_t(start), prompt.begin() + int64_t(end));
  }
  return std::span<float>(logits_.data(), size_t(V));
}

GenerationResult Session::generate(const GenerationRequest& request,
                                   const std::function<void(std::string_view)>& on_text,
                                   const std::atomic<bool>* cancel) {
  GenerationRequest req = request;
  const int max_positions = model_.spec().max_positions;
  // Every sampled token but the last is fed back at the next position: stop at the context.
  if (max_positions > 0)
    req.max_tokens = std::min<int64_t>(req.max_tokens, std::max<int64_t>(0, max_positions - int64_t(req.prompt.size())));
  Generation gen(std::move(req), tokenizer_, model_.spec().vocab_size);

  GenerationResult result;
  result.prompt_tokens = int(gen.request().prompt.size());
  const auto t0 = std::chrono::steady_clock::now();
  std::span<float> logits = prefill(gen.request().prompt, cancel);
  result.reused_tokens = last_reused_;
  result.prefill_seconds = seconds_since(t0);
  if (logits.empty()) gen.cancel();

  const auto t1 = std::chrono::steady_clock::now();
  model::SequenceKv* caches[] = {cache_.get()};
  const int64_t V = model_.spec().vocab_size;
  while (!gen.finished()) {
    const std::string piece = gen.accept(logits);
    if (!piece.empty() && on_text) on_text(piece);
    if (gen.finished()) break;
    if (cancelled(cancel)) {
      gen.cancel();
      break;
    }
    const model::BatchRow row{0, int32_t(tokens_.size()), gen.next_input(), true};
    // A grammar's mask for the next token is computed while the model runs this step.
    std::future<void> mask;
    if (gen.request().grammar) mask = std::async(std::launch::async, [&gen] { gen.prepare_mask(); });
    model_.forward(std::span(&row, 1), caches, logits_);
    if (mask.valid()) mask.get();
    tokens_.push_back(row.token);
    ++result.decode_steps;
    logits = std::span<float>(logits_.data(), size_t(V));
  }
  result.decode_seconds = seconds_since(t1);
  result.finish = gen.finish_reason();
  result.text = gen.text();
  result.tokens = gen.generated();
  return result;
}

}  // namespace lumen::runtime
