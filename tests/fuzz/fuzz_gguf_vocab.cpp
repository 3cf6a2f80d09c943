// GGUF vocabularies: tokenizer.ggml.* metadata -> a tokenizer, then encode/decode with it.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto file = formats::GgufFile::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.gguf");
    const auto tok = tokenizer::load_gguf_tokenizer(file.tokenizer(), "fuzz.gguf");
    for (const char* text : {"Hello world", "  two  spaces\n\nand\ttabs", "<start_of_turn>user\nhi<end_of_turn>",
                             "\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x99\x82", ""}) {
      const std::vector<int32_t> ids = tok->encode(text);
      (void)tok->decode(ids);
      tokenizer::StreamDecoder stream(*tok);
      for (int32_t id : ids) (void)stream.push(id);
      (void)stream.flush();
    }
    for (int32_t id = 0; id < tok->vocab_size() && id < 64; ++id) {
      (void)tok->token_bytes(id);
      (void)tok->piece(id);
    }
  });
  return 0;
}
