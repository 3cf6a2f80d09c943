// A serialized SentencePiece model (what a .model file or a .litertlm SP_Tokenizer section
// holds), loaded through libsentencepiece behind Lumen's checks; then text through it.
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto tok = tokenizer::load_sentencepiece_bytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                                         "fuzz.model");
    for (const char* text : {"Hello world", "  two  spaces\n\nand\ttabs", "<start_of_turn>user\nhi<end_of_turn>",
                             "\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x99\x82", ""}) {
      const std::vector<int32_t> ids = tok->encode(text);
      (void)tok->decode(ids);
      tokenizer::StreamDecoder stream(*tok);
      for (int32_t id : ids) (void)stream.push(id);
      (void)stream.flush();
    }
    for (int32_t id = 0; id < tok->vocab_size() && id < 64; ++id) (void)tok->token_bytes(id);
  });
  return 0;
}
