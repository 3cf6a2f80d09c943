// LiteRT-LM's LlmMetadata protobuf (hand-decoded wire format), and the piece count of a
// SentencePiece ModelProto read by the same wire reader.
#include <cstdint>
#include <string_view>

#include "formats/llm_metadata.h"
#include "fuzz_support.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean([&] {
    const formats::LlmMetadata m = formats::decode_llm_metadata(bytes, "fuzz.pb");
    (void)formats::llm_metadata_to_json(m).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  });
  fuzz::expect_clean([&] { (void)formats::count_sentencepiece_pieces(bytes, "fuzz.model"); });
  return 0;
}
