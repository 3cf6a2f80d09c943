// CONTRACT (interface agreed before implementation; the text-generation work implements it).
//
// One sequence being generated, as a small state machine that any driver can step: the
// single-user loop (Session, `lumen run` / `lumen chat`) and the continuous-batching
// scheduler of the server both feed it logits and ask it for the next batch row. It owns
// the sampler, the stop rules (stop tokens, stop strings cut exactly, max tokens) and the
// UTF-8-safe text stream. It does not own the KV cache or call the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/token_mask.h"

namespace lumen::tokenizer {
class Tokenizer;
}

namespace lumen::runtime {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // already formatted and tokenized (BOS included)
  SamplingParams sampling;
  int max_tokens = 256;
  std::vector<int32_t> stop_tokens;     // end the generation; never part of the text
  std::vector<std::string> stop_strings;  // the text is cut just before the first match
  bool skip_special = true;  // special tokens that are not stop tokens add no text
  // Constrained decoding: tokens the grammar does not allow next are masked out before
  // sampling; once the grammar is complete only stop tokens may follow (and when nothing
  // else could follow, the generation stops by itself).
  std::shared_ptr<CompiledGrammar> grammar;
  // >= 0: the grammar starts only when the model samples this token (its first terminal),
  // e.g. Gemma 4's <|tool_call> under tool_choice "auto"; before that nothing is masked.
  int32_t grammar_trigger = -1;
  // -1: no log-probabilities; 0..20: the sampled token's and this many alternatives'.
  int top_logprobs = -1;
};

enum class FinishReason {
  None,
  Stop /* stop token or string */,
  Length /* max_tokens */,
  Cancelled,
  DeadEnd /* the grammar allows no token of the vocabulary here */
};
// "stop", "length", "cancelled", "grammar_dead_end"
const char* finish_reason_name(FinishReason reason);

// The log-probability of a generated token under the model (log-softmax of its raw logits,
// before bias, penalties, temperature and grammar), with the most likely alternatives.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best first
};

class Generation {
 public:
  Generation(GenerationRequest request, const tokenizer::Tokenizer& tokenizer, int32_t vocab_size);

  // Feeds the logits of the last position; samples, applies the stop rules, and returns the
  // text that became final with this token (held back while it could still start a stop
  // string). After this, finished() may be true.
  // Throws lumen::Error when called after finished().
  std::string accept(std::span<float> logits);
  // Computes the grammar's mask for the next accept(). It touches only this generation's
  // grammar state, so a driver may run it on another thread while the model computes the
  // logits; accept() computes it itself when it was not prepared.
  void prepare_mask();
  // Ends the generation (FinishReason::Cancelled). Text still held back is dropped, so
  // text() stays the concatenation of what accept() returned.
  void cancel();

  bool finished() const;
  FinishReason finish_reason() const;
  // The token to feed at the next step (the last sampled one); valid while !finished().
  int32_t next_input() const;
  const std::vector<int32_t>& generated() const;  // sampled ids, stop token excluded
  const std::string& text() const;                 // final text so far
  // One entry per generated token when request().top_logprobs >= 0.
  const std::vector<TokenLogprob>& logprobs() const;
  const GenerationRequest& request() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace lumen::runtime
