// The tokenizers on arbitrary bytes. Valid UTF-8 encodes, and Lumen's BPE decodes it back
// exactly (U+2581 '▁' comes back as a space: Gemma's normalizer and decoder trade them);
// invalid UTF-8 is a one-line lumen::Error. Arbitrary ids decode or are refused, and the
// stream decoder's pieces add up to the whole decode.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_tokenizers.h"
#include "tokenizer/utf8.h"

using namespace lumen;

namespace {

std::string spaces_for_bars(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 3) == "\xe2\x96\x81") {
      out += ' ';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Bytes in(data, size);
  const auto& all = fuzz::tokenizers();
  const fuzz::NamedTokenizer& named = all[in.byte() % all.size()];
  const tokenizer::Tokenizer& tok = *named.tokenizer;
  const bool parse_special = in.flag();
  const std::string_view rest = in.rest();

  // Text -> ids -> text.
  std::vector<int32_t> ids;
  bool encoded = false;
  fuzz::expect_clean([&] {
    ids = tok.encode(rest, parse_special);
    encoded = true;
  });
  const bool valid = !tokenizer::utf8::first_invalid(rest).has_value();
  if (encoded && !valid) fuzz::crash(named.name + ": encoded invalid UTF-8");
  if (!encoded && valid) fuzz::crash(named.name + ": refused valid UTF-8");
  if (encoded) {
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) fuzz::crash(named.name + ": encode gave id " + std::to_string(id));
    const std::string back = tok.decode(ids);
    if (named.lumen_bpe && !parse_special && back != spaces_for_bars(rest))
      fuzz::crash(named.name + ": decode(encode(text)) differs from the text");
  }

  // The same bytes as ids (4 bytes each): decode, or refuse an id outside the vocabulary.
  std::vector<int32_t> raw_ids;
  for (size_t i = 0; i + 4 <= rest.size() && raw_ids.size() < 256; i += 4) {
    uint32_t v = 0;
    for (size_t b = 0; b < 4; ++b) v |= uint32_t(uint8_t(rest[i + b])) << (8 * b);
    // Mostly ids inside the vocabulary, sometimes anything.
    raw_ids.push_back((v >> 31) ? int32_t(v) : int32_t(v % uint32_t(tok.vocab_size())));
  }
  std::string whole;
  bool decoded = false;
  fuzz::expect_clean([&] {
    whole = tok.decode(raw_ids, /*skip_special=*/true);
    decoded = true;
  });
  std::string streamed;
  bool stream_ok = false;
  fuzz::expect_clean([&] {
    tokenizer::StreamDecoder stream(tok);
    for (int32_t id : raw_ids) streamed += stream.push(id);
    streamed += stream.flush();
    stream_ok = true;
  });
  if (decoded != stream_ok) fuzz::crash(named.name + ": decode and the stream decoder disagree on the ids' validity");
  // Where the tokens' bytes are valid UTF-8 the stream adds up to decode() exactly. (Where they
  // are not, both write U+FFFD, but decode() follows tokenizers' ByteFallback, which replaces
  // every byte of an invalid run, while the stream keeps the valid characters it already sent.)
  if (decoded && named.lumen_bpe) {
    std::string raw;
    for (int32_t id : raw_ids)
      if (!tok.is_special(id)) raw += tok.token_bytes(id);
    if (!tokenizer::utf8::first_invalid(raw) && streamed != whole)
      fuzz::crash(named.name + ": the stream decoder's pieces differ from decode()");
  }
  if (stream_ok && tokenizer::utf8::first_invalid(streamed)) fuzz::crash(named.name + ": the stream decoder gave invalid UTF-8");
  return 0;
}
