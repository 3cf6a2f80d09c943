// The OpenAI request parser (/v1/chat/completions and /v1/completions bodies) and what the
// server does next with a parsed request: the chat prompt rendered and tokenized, the
// sampling parameters validated, the answer objects built and serialized.
#include <cstdint>
#include <string>

#include "fuzz_tokenizers.h"
#include "runtime/sampler.h"
#include "server/openai_api.h"
#include "tokenizer/chat_format.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const runtime::SamplingParams defaults = runtime::default_sampling();
  server::ApiRequest request;
  try {
    request = chat ? server::parse_chat_request(body, defaults) : server::parse_completion_request(body, defaults);
  } catch (const server::ApiError& e) {
    if (e.status < 400 || e.status > 499) fuzz::crash("a request error with status " + std::to_string(e.status));
    fuzz::check_one_line("ApiError", e.what());
    (void)server::error_body(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return 0;
  } catch (const std::exception& e) {
    fuzz::crash(std::string("the request parser threw something else than ApiError: ") + e.what());
  }
  const tokenizer::Tokenizer& tok = *fuzz::tokenizers().front().tokenizer;
  fuzz::expect_clean([&] {
    runtime::validate(request.sampling, tok.vocab_size());
    if (request.chat) (void)tok.encode(tokenizer::render_chat(tokenizer::ChatFormat::Gemma4, request.messages), true);
    else if (!request.prompt_is_ids) (void)tok.encode(request.prompt_text, true);
  });
  const server::Usage usage{int(request.prompt_ids.size()), request.max_tokens.value_or(0)};
  (void)server::sse_event(server::chat_completion("id", 0, request.model, request.model, "stop", usage));
  (void)server::sse_event(server::text_chunk("id", 0, request.model, request.prompt_text, ""));
  return 0;
}
