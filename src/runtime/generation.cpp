#include "runtime/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace lumen::runtime {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::DeadEnd: return "grammar_dead_end";
  }
  return "none";
}

struct Generation::State {
  State(GenerationRequest r, const tokenizer::Tokenizer& t, int32_t vocab)
      : request(std::move(r)), tokenizer(t), sampler(request.sampling, vocab), vocab_size(vocab),
        decoder(t, request.skip_special) {
    if (request.grammar) matcher.emplace(request.grammar, request.stop_tokens);
    triggered = request.grammar_trigger < 0;
  }

  GenerationRequest request;
  const tokenizer::Tokenizer& tokenizer;
  Sampler sampler;
  int32_t vocab_size;
  tokenizer::StreamDecoder decoder;  // holds the bytes of a character split across tokens
  std::vector<int32_t> generated;
  std::string text;  // final: returned by accept()
  std::string held;  // decoded but not final: it could still be the start of a stop string
  FinishReason reason = FinishReason::None;
  int32_t next = -1;
  std::optional<GrammarMatcher> matcher;
  bool triggered = true;  // the grammar is in force (no trigger, or the trigger was sampled)
  std::vector<uint64_t> mask;
  bool mask_ready = false, mask_any = true;
  std::vector<TokenLogprob> logprobs;
  std::vector<float> raw;  // the logits as the model gave them (log-probabilities)

  void prepare_mask() {
    if (!matcher || !triggered || mask_ready) return;
    mask_any = matcher->compute_mask(mask);
    mask_ready = true;
  }

  void record_logprob(int32_t id) {
    // log-softmax of the raw logits: max, then log-sum-exp.
    const size_t V = raw.size();
    float mx = -std::numeric_limits<float>::infinity();
    for (float x : raw) mx = std::max(mx, x);
    double sum = 0;
    for (float x : raw) sum += std::exp(double(x - mx));
    const float lse = mx + float(std::log(sum));
    TokenLogprob lp;
    lp.id = id;
    lp.logprob = raw[size_t(id)] - lse;
    const int k = std::min<int>(request.top_logprobs, int(V));
    if (k > 0) {
      std::vector<int32_t> idx(V);
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return raw[size_t(a)] != raw[size_t(b)] ? raw[size_t(a)] > raw[size_t(b)] : a < b;
      });
      for (int i = 0; i < k; ++i) lp.top.push_back({idx[size_t(i)], raw[size_t(idx[size_t(i)])] - lse});
    }
    logprobs.push_back(std::move(lp));
  }

  void finish(FinishReason r) {
    if (reason == FinishReason::None) reason = r;
  }

  // Moves the part of `held` that can no longer become (part of) a stop string into `text`
  // and returns it. A complete stop string ends the generation, cut just before it. At the
  // end of the generation everything held is released.
  std::string release(bool at_end) {
    size_t cut = std::string::npos;
    for (const auto& stop : request.stop_strings) cut = std::min(cut, held.find(stop));
    std::string out;
    if (cut != std::string::npos) {
      out = held.substr(0, cut);
      held.clear();
      finish(FinishReason::Stop);
    } else {
      size_t keep = 0;
      if (!at_end) {
        // The longest suffix of `held` that is a proper prefix of some stop string.
        for (const auto& stop : request.stop_strings) {
          const size_t longest = std::min(held.size(), stop.size() - 1);
          for (size_t k = longest; k > keep; --k)
            if (held.compare(held.size() - k, k, stop, 0, k) == 0) {
              keep = k;
              break;
            }
        }
      }
      out = held.substr(0, held.size() - keep);
      held.erase(0, held.size() - keep);
    }
    text += out;
    return out;
  }

};

Generation::Generation(GenerationRequest request, const tokenizer::Tokenizer& tokenizer, int32_t vocab_size) {
  if (request.prompt.empty()) throw Error("generation request: the prompt is empty");
  if (request.max_tokens < 0)
    throw Error("generation request: max_tokens = " + std::to_string(request.max_tokens) + " is negative");
  for (int32_t id : request.stop_tokens)
    if (id < 0 || id >= vocab_size)
      throw Error("generation request: stop token " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(vocab_size - 1) + ")");
  for (size_t i = 0; i < request.stop_strings.size(); ++i)
    if (request.stop_strings[i].empty())
      throw Error("generation request: stop string " + std::to_string(i + 1) + " is empty");
  state_ = std::make_shared<State>(std::move(request), tokenizer, vocab_size);
  if (state_->request.max_tokens == 0) state_->finish(FinishReason::Length);
}

std::string Generation::accept(std::span<float> logits) {
  State& s = *state_;
  if (s.reason != FinishReason::None) throw Error("generation: accept() called after the generation finished");
  if (s.request.top_logprobs >= 0) s.raw.assign(logits.begin(), logits.end());
  if (s.matcher && s.triggered) {
    s.prepare_mask();
    s.mask_ready = false;
    if (!s.mask_any) {
      // Nothing in the vocabulary can continue the grammar: end here, saying so.
      s.held += s.decoder.flush();
      std::string out = s.release(true);
      s.finish(FinishReason::DeadEnd);
      return out;
    }
    apply_mask(logits, s.mask);
  }
  const int32_t id = s.sampler.sample(logits, s.generated);
  if (s.request.top_logprobs >= 0) s.record_logprob(id);
  if (s.matcher) {
    if (!s.triggered && id == s.request.grammar_trigger) s.triggered = true;
    if (s.triggered && !s.matcher->advance(id))
      throw Error("generation: sampled token " + std::to_string(id) + " is not allowed by the grammar");
  }
  const auto& stops = s.request.stop_tokens;
  if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
    if (s.request.top_logprobs >= 0) s.logprobs.pop_back();  // stop tokens are not part of the answer
    s.held += s.decoder.flush();
    std::string out = s.release(true);
    s.finish(FinishReason::Stop);
    return out;
  }
  s.generated.push_back(id);
  s.next = id;
  s.held += s.decoder.push(id);
  std::string out = s.release(false);
  if (s.reason == FinishReason::None && s.matcher && s.triggered && s.matcher->must_end()) {
    // The grammar is complete and nothing can follow: no need to wait for a stop token.
    s.held += s.decoder.flush();
    out += s.release(true);
    s.finish(FinishReason::Stop);
  }
  if (s.reason == FinishReason::None && int(s.generated.size()) >= s.request.max_tokens) {
    s.held += s.decoder.flush();
    out += s.release(true);
    s.finish(FinishReason::Length);
  }
  return out;
}

void Generation::prepare_mask() { state_->prepare_mask(); }

const std::vector<TokenLogprob>& Generation::logprobs() const { return state_->logprobs; }

void Generation::cancel() {
  // Held-back text is dropped: it was never final, and text() stays the concatenation of
  // what accept() returned.
  state_->held.clear();
  state_->finish(FinishReason::Cancelled);
}

bool Generation::finished() const { return state_->reason != FinishReason::None; }
FinishReason Generation::finish_reason() const { return state_->reason; }
int32_t Generation::next_input() const { return state_->next; }
const std::vector<int32_t>& Generation::generated() const { return state_->generated; }
const std::string& Generation::text() const { return state_->text; }
const GenerationRequest& Generation::request() const { return state_->request; }

}  // namespace lumen::runtime
