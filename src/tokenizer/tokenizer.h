// CONTRACT (interface agreed before implementation; the tokenizer work implements it).
//
// Text <-> token ids for Gemma models, whatever file the vocabulary came from: a Hugging Face
// tokenizer.json (BPE with byte fallback), a SentencePiece .model (libsentencepiece), or the
// tokenizer.ggml.* metadata of a GGUF file. One interface, so the runtime never knows which.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lumen::formats {
struct GgufTokenizerData;
}

namespace lumen::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text (UTF-8) to ids. With parse_special, the text of a special/added token ("<bos>",
  // "<start_of_turn>", "<|turn>") becomes that token's id; without, it is ordinary text.
  // No BOS is added here: chat formatting and callers add it explicitly.
  // Throws lumen::Error on invalid UTF-8 ("input text: invalid UTF-8 at byte N").
  virtual std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const = 0;

  // Ids to text. Special tokens are rendered as their text unless skip_special.
  // Throws lumen::Error for an id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;

  // The exact bytes token `id` contributes to a decoded text when it follows other tokens
  // (byte-fallback tokens give one raw byte, so a piece may be a partial UTF-8 sequence).
  virtual std::string token_bytes(int32_t id) const = 0;

  // The vocabulary entry as stored ("▁the", "<0x0A>", "<start_of_turn>").
  virtual std::string piece(int32_t id) const = 0;
  // The id of a vocabulary entry, if present.
  virtual std::optional<int32_t> piece_id(std::string_view piece) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual bool is_special(int32_t id) const = 0;  // control / added special tokens

  // -1 when the vocabulary has none.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;

  // "hf-bpe", "sentencepiece", "gguf-spm", ... for reports.
  virtual std::string kind() const = 0;
};

// Loaders. Each throws lumen::Error naming the file (and field) at fault.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json_path);
// From the text of a tokenizer.json; `source` names it in errors.
std::unique_ptr<Tokenizer> parse_hf_tokenizer(std::string_view json_text, const std::string& source);
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path);
// From the bytes of a serialized SentencePiece ModelProto (e.g. a .litertlm section).
std::unique_ptr<Tokenizer> load_sentencepiece_bytes(std::string_view proto_bytes, const std::string& source);
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const formats::GgufTokenizerData& data, const std::string& source);
// A model directory's tokenizer.json (preferred) or tokenizer.model; nullptr when it has none.
std::unique_ptr<Tokenizer> find_tokenizer(const std::string& model_dir);

// Any of: a model directory (find_tokenizer; else its only .gguf file), a tokenizer.json, a
// SentencePiece .model, or a .gguf file (its tokenizer.ggml.* metadata). Throws lumen::Error
// naming the path when it holds no tokenizer.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// Turns a stream of ids into text without ever emitting half a UTF-8 character: bytes of an
// incomplete sequence are held until the sequence completes (or flush() is called).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  // The text that is complete after adding `id` (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held (invalid trailing bytes become U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace lumen::tokenizer
