// One user's conversation with a model: a KV cache, the tokens it holds, and the loop that
// prefills a prompt and decodes a Generation. A new prompt that extends the cached tokens
// (the next turn of a chat) prefills only its new suffix; one that diverges rewinds the
// cache to the common prefix first.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/gemma_model.h"
#include "model/kv_store.h"
#include "runtime/generation.h"

namespace lumen::tokenizer {
class Tokenizer;
}

namespace lumen::runtime {

class Engine;

struct GenerationResult {
  FinishReason finish = FinishReason::None;
  std::string text;               // the final text (stop string cut)
  std::vector<int32_t> tokens;    // generated ids (stop token excluded)
  int prompt_tokens = 0;          // in the request
  int reused_tokens = 0;          // of them, already in the KV cache
  double prefill_seconds = 0;
  double decode_seconds = 0;      // first sampled token to the last one
  int decode_steps = 0;           // one-token forward steps in decode_seconds
};

class Session {
 public:
  // `cache`: any SequenceKv (nullptr: a kv::ContiguousCache). `tokenizer` must outlive the
  // session, as must `model`.
  Session(const model::GemmaModel& model, const tokenizer::Tokenizer& tokenizer,
          std::unique_ptr<model::SequenceKv> cache = nullptr);
  // The engine's model and tokenizer, and a cache and prefill chunk from its run_config();
  // throws lumen::Error when the model has no tokenizer.
  explicit Session(const Engine& engine);

  // Prefills so that the cache holds exactly `prompt`, reusing the longest cached prefix;
  // returns the logits of the prompt's last position (valid until the next call). Returns
  // an empty span when `cancel` became true between chunks.
  std::span<float> prefill(std::span<const int32_t> prompt, const std::atomic<bool>* cancel = nullptr);

  // Prefills request.prompt, then samples until the generation finishes or `cancel` becomes
  // true. `on_text` receives each piece of final text as soon as it is final.
  GenerationResult generate(const GenerationRequest& request,
                            const std::function<void(std::string_view)>& on_text = {},
                            const std::atomic<bool>* cancel = nullptr);

  // The tokens whose keys and values the cache holds, in position order.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // Forgets the conversation (the next prompt is prefilled from position 0).
  void reset() { tokens_.clear(); }
  // Rows per prefill step (one batched forward each).
  void set_prefill_chunk(int rows);
  // How many prompt tokens the last prefill found already cached.
  int last_reused() const { return last_reused_; }

 private:
  const model::GemmaModel& model_;
  const tokenizer::Tokenizer& tokenizer_;
  std::unique_ptr<model::SequenceKv> cache_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
  std::vector<model::BatchRow> rows_;
  int prefill_chunk_ = 256;
  int last_reused_ = 0;
};

}  // namespace lumen::runtime
