// The chat-format renderer (Gemma 4 and Gemma 3) on arbitrary message lists, and the
// rendered prompt through a tokenizer with specials parsed, as the server does.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_tokenizers.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/utf8.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  static const char* const kRoles[] = {"system", "developer", "user", "assistant", "model"};
  const auto format = in.flag() ? tokenizer::ChatFormat::Gemma4 : tokenizer::ChatFormat::Gemma3;
  tokenizer::ChatOptions options;
  options.add_generation_prompt = in.flag();
  options.thinking = in.flag();
  const size_t count = in.byte() % 9;
  std::vector<tokenizer::ChatMessage> messages;
  for (size_t i = 0; i < count && !in.empty(); ++i) {
    const uint8_t r = in.byte();
    tokenizer::ChatMessage m;
    m.role = r < 250 ? kRoles[r % 5] : in.text(12);  // now and then a role of its own
    m.content = in.text(200);
    messages.push_back(std::move(m));
  }
  const auto& all = fuzz::tokenizers();
  const tokenizer::Tokenizer& tok = *all[in.byte() % all.size()].tokenizer;
  fuzz::expect_clean([&] {
    const std::string prompt = tokenizer::render_chat(format, messages, options);
    for (size_t i = 0; i < messages.size(); ++i) {
      // Gemma 3 folds the system message into the first user turn: alone, it has none
      // (the template drops it too).
      if (format == tokenizer::ChatFormat::Gemma3 && messages.size() == 1 &&
          (messages[0].role == "system" || messages[0].role == "developer"))
        break;
      // Gemma 4 drops "<|channel>...<channel|>" thoughts from the model's earlier turns, as
      // its template does (checked against the real template by test_chat_format.py).
      const bool model_turn = messages[i].role == "assistant" || messages[i].role == "model";
      if (format == tokenizer::ChatFormat::Gemma4 && model_turn &&
          (messages[i].content.find("<channel|>") != std::string::npos ||
           messages[i].content.find("<|channel>") != std::string::npos))
        continue;
      // Gemma 4 renders a "tool" message only as the response to the model's tool call before
      // it, as an escaped value (or not at all, as its template does, when no call precedes it).
      if (format == tokenizer::ChatFormat::Gemma4 && messages[i].role == "tool") continue;
      if (prompt.find(tokenizer::utf8::python_strip(messages[i].content)) == std::string::npos)
        fuzz::crash("the rendered prompt lost the content of message " + std::to_string(i));
    }
    (void)tok.encode(prompt, /*parse_special=*/true);
  });
  return 0;
}
