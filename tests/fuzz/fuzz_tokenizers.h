// The small tokenizers the tokenizer and chat targets run text through: the committed
// tests/fuzz/data/tiny_tokenizer.json (byte fallback, merges, specials, Gemma's normalizer and
// decoder), the same vocabulary as GGUF metadata, and the committed SentencePiece model
// tests/fuzz/data/tiny_spm.model. LUMEN_FUZZ_TOKENIZER=PATH adds a real one (any file
// load_tokenizer reads, e.g. Gemma 3's 262k tokenizer.json) for long runs.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

namespace lumen::fuzz {

inline std::string read_data_file(const std::string& name) {
  const std::string path = std::string(LUMEN_FUZZ_DATA_DIR) + "/" + name;
  std::ifstream in(path, std::ios::binary);
  if (!in) crash("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct NamedTokenizer {
  std::string name;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  bool lumen_bpe = false;  // Lumen's own BPE (not libsentencepiece): decode(encode(t)) == t holds
};

inline const std::vector<NamedTokenizer>& tokenizers() {
  static const std::vector<NamedTokenizer> all = [] {
    std::vector<NamedTokenizer> out;
    const std::string json_text = read_data_file("tiny_tokenizer.json");
    out.push_back({"tiny tokenizer.json", tokenizer::parse_hf_tokenizer(json_text, "tiny_tokenizer.json"), true});

    // The same vocabulary as a Gemma 3 GGUF file would carry it (merges rebuilt from it).
    const auto doc = nlohmann::json::parse(json_text);
    static std::vector<std::string> pieces(doc["model"]["vocab"].size());
    for (const auto& [piece, id] : doc["model"]["vocab"].items()) pieces[id.get<size_t>()] = piece;
    formats::GgufTokenizerData gguf;
    gguf.model = "llama";
    gguf.architecture = "gemma3";
    for (size_t id = 0; id < pieces.size(); ++id) {
      gguf.tokens.emplace_back(pieces[id]);
      gguf.scores.push_back(-float(id));
      const bool control = pieces[id].size() > 2 && pieces[id].front() == '<' && pieces[id].back() == '>' &&
                           pieces[id].rfind("<0x", 0) != 0;
      const bool byte = pieces[id].rfind("<0x", 0) == 0;
      gguf.token_type.push_back(control ? 3 : byte ? 6 : 1);
    }
    gguf.bos_id = 2;
    gguf.eos_id = 1;
    gguf.unk_id = 3;
    gguf.pad_id = 0;
    out.push_back({"tiny GGUF vocabulary", tokenizer::load_gguf_tokenizer(gguf, "tiny.gguf"), true});

    const std::string spm = read_data_file("tiny_spm.model");
    out.push_back({"tiny SentencePiece", tokenizer::load_sentencepiece_bytes(spm, "tiny_spm.model"), false});
    if (const char* path = std::getenv("LUMEN_FUZZ_TOKENIZER"); path && *path) {
      auto tok = tokenizer::load_tokenizer(path);
      const bool bpe = tok->kind() != "sentencepiece";
      out.push_back({path, std::move(tok), bpe});
    }
    return out;
  }();
  return all;
}

}  // namespace lumen::fuzz
