// What `lumen run -p` and `lumen chat` share: the sampling flags (parsed here so a bad value
// is one "lumen: error:" line naming the flag), prompt building, stop rules, Ctrl-C.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "tokenizer/chat_format.h"

namespace lumen::cli {

// Flags as text; unset ones keep the model's defaults.
struct SamplingFlags {
  std::optional<std::string> temperature, top_k, top_p, min_p, seed, repeat_penalty, presence_penalty,
      frequency_penalty;
};
void add_sampling_flags(CLI::App* cmd, SamplingFlags& flags);
// The model's defaults (generation_config.json) overridden by the flags; validated. Without
// --seed the seed is random.
runtime::SamplingParams sampling_from_flags(const SamplingFlags& flags, const std::string& model_path);

// "\n", "\t" and "\\" in a command-line string become newline, tab and backslash.
std::string unescape(const std::string& text);

// Stop tokens of plain completion: eos and the spec's stop ids.
std::vector<int32_t> completion_stop_tokens(const runtime::Engine& engine);

// Text of a chat prompt, tokenized with its special tokens.
std::vector<int32_t> chat_prompt(const runtime::Engine& engine, tokenizer::ChatFormat format,
                                 const std::vector<tokenizer::ChatMessage>& messages, bool thinking);

// Gemma 4 thinking: drops "<|channel>...<channel|>" thought blocks, which the chat format
// does not carry into later turns.
std::string strip_thoughts(const std::string& answer);

// Ctrl-C: while a generation runs, SIGINT sets the flag it polls; otherwise it ends the
// program (exit status 130).
struct InterruptGuard {
  InterruptGuard();
  ~InterruptGuard();
  static std::atomic<bool> cancel;
  static std::atomic<bool> generating;
};

// "12 tokens in 0.52 s (23.1 tokens/s); prompt 40 tokens (32 reused) in 0.10 s"
std::string stats_line(const runtime::GenerationResult& r);

}  // namespace lumen::cli
