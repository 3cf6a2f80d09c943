#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "formats/gguf.h"
#include "tokenizer/utf8.h"

namespace lumen::tokenizer {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> find_tokenizer(const std::string& model_dir) {
  const fs::path dir(model_dir);
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer.json", ec)) return load_hf_tokenizer((dir / "tokenizer.json").string());
  if (fs::is_regular_file(dir / "tokenizer.model", ec)) return load_sentencepiece((dir / "tokenizer.model").string());
  return nullptr;
}

namespace {

bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

std::unique_ptr<Tokenizer> load_gguf_file(const std::string& path) {
  const formats::GgufFile file = formats::GgufFile::open(path);
  return load_gguf_tokenizer(file.tokenizer(), path);
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (auto found = find_tokenizer(path)) return found;
    std::vector<fs::path> ggufs;
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file() && entry.path().extension() == ".gguf") ggufs.push_back(entry.path());
    if (ggufs.size() == 1) return load_gguf_file(ggufs[0].string());
    throw Error(path + ": no tokenizer here (expected tokenizer.json, tokenizer.model or one .gguf file)");
  }
  if (!fs::is_regular_file(path, ec)) throw Error(path + ": no such file or directory");
  const std::string name = fs::path(path).filename().string();
  const auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".gguf") || has_gguf_magic(path)) return load_gguf_file(path);
  if (ends_with(".json")) return load_hf_tokenizer(path);
  if (ends_with(".model")) return load_sentencepiece(path);
  throw Error(path + ": not a tokenizer file (expected tokenizer.json, a SentencePiece .model or a .gguf)");
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) {
    tokenizer_.token_bytes(id);  // still rejects an id outside the vocabulary
    return {};
  }
  pending_ += tokenizer_.token_bytes(id);
  const size_t held = utf8::incomplete_tail(pending_);
  std::string ready = utf8::replace_invalid(std::string_view(pending_).substr(0, pending_.size() - held));
  pending_.erase(0, pending_.size() - held);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest = utf8::replace_invalid(pending_);
  pending_.clear();
  return rest;
}

}  // namespace lumen::tokenizer
