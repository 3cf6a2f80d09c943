// A tokenizer.json: the JSON (vocabulary and merges streamed), the model, added tokens,
// normalizer / pre-tokenizer / decoder steps; then text through the tokenizer it builds.
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto tok =
        tokenizer::parse_hf_tokenizer(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    for (const char* text : {"Hello world", "  two  spaces\n\nand\ttabs", "<start_of_turn>user\nhi<end_of_turn>",
                             "abcabc aab", "\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x99\x82", ""}) {
      for (bool special : {true, false}) {
        const std::vector<int32_t> ids = tok->encode(text, special);
        (void)tok->decode(ids);
        (void)tok->decode(ids, true);
        tokenizer::StreamDecoder stream(*tok);
        for (int32_t id : ids) (void)stream.push(id);
        (void)stream.flush();
      }
    }
    for (int32_t id = 0; id < tok->vocab_size() && id < 64; ++id) {
      (void)tok->token_bytes(id);
      (void)tok->piece_id(tok->piece(id));
    }
  });
  return 0;
}
