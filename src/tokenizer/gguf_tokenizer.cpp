// tokenizer.ggml.* -> BpeDefinition, as transformers builds a tokenizer from a GGUF file
// (integrations/gguf/gguf_tokenizer_mapping.py), so that ids match that reference:
//  - model "llama" of a Gemma architecture (gemma, gemma2, gemma3): SentencePiece-style BPE
//    whose tokens made only of blanks are respelled with "▁", merges rebuilt from the
//    vocabulary (every split of a token into two tokens), ordered by the token's position
//    in the file, then by the longer left part;
//  - model "gemma4": the same BPE with the file's merges (or, without any, merges rebuilt
//    and ordered by score);
//  - control tokens (type 3) become special added tokens, user-defined ones (type 4) plain
//    added tokens, both matched whole before BPE.
#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "formats/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/utf8.h"

namespace lumen::tokenizer {
namespace {

constexpr int32_t kTokenTypeControl = 3;
constexpr int32_t kTokenTypeUserDefined = 4;

std::vector<size_t> char_boundaries(std::string_view s) {
  std::vector<size_t> cuts;
  for (size_t pos = 0; pos < s.size();) {
    cuts.push_back(pos);
    const size_t n = utf8::sequence_length(s, pos);
    pos += n == 0 ? 1 : n;
  }
  cuts.push_back(s.size());
  return cuts;
}

// transformers' generate_merges(vocab, scores): every split of a token into two vocabulary
// entries, sorted best score first, then longer left part, then longer right part (a stable
// sort over tokens in first-seen order, each token's splits ordered by their ids).
std::vector<std::pair<std::string, std::string>> rebuild_merges(const std::vector<std::string>& tokens,
                                                                  const std::unordered_map<std::string_view, int32_t>& vocab,
                                                                  const std::unordered_map<std::string_view, double>& scores) {
  struct Candidate {
    std::string_view left, right;
    double score;
    int32_t left_chars, right_chars;
  };
  std::vector<Candidate> all;
  std::unordered_map<std::string_view, bool> visited;
  visited.reserve(tokens.size() * 2);
  std::vector<Candidate> local;
  for (const std::string& token : tokens) {
    if (!visited.emplace(token, true).second) continue;  // dict keys: first position, last value
    const double score = scores.at(token);
    const std::vector<size_t> cuts = char_boundaries(token);
    const int32_t chars = int32_t(cuts.size()) - 1;
    local.clear();
    for (int32_t i = 1; i < chars; ++i) {
      const std::string_view left = std::string_view(token).substr(0, cuts[size_t(i)]);
      const std::string_view right = std::string_view(token).substr(cuts[size_t(i)]);
      if (vocab.count(left) && vocab.count(right)) local.push_back({left, right, score, i, chars - i});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Candidate& a, const Candidate& b) {
      const int32_t al = vocab.at(a.left), bl = vocab.at(b.left);
      return al != bl ? al < bl : vocab.at(a.right) < vocab.at(b.right);
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
    return a.right_chars > b.right_chars;
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(all.size());
  for (const Candidate& c : all) merges.emplace_back(std::string(c.left), std::string(c.right));
  return merges;
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const formats::GgufTokenizerData& data, const std::string& source) {
  const auto fail = [&](const std::string& key, const std::string& message) -> void {
    throw Error(source + ": " + key + ": " + message);
  };
  const bool gemma_architecture =
      data.architecture == "gemma" || data.architecture == "gemma2" || data.architecture == "gemma3";
  const bool respell = data.model == "llama" && gemma_architecture;
  if (!respell && data.model != "gemma4")
    fail("tokenizer.ggml.model", "'" + printable(data.model) + "' (architecture '" + printable(data.architecture) +
                                     "') is not supported; Lumen reads Gemma vocabularies ('llama' with a gemma, "
                                     "gemma2 or gemma3 architecture, or 'gemma4')");
  if (data.tokens.empty()) fail("tokenizer.ggml.tokens", "is empty");

  BpeDefinition def;
  def.source = source;
  def.kind = respell ? "gguf-gemma" : "gguf-gemma4";
  def.vocab.reserve(data.tokens.size());
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    std::string token(data.tokens[i]);
    if (auto bad = utf8::first_invalid(token))
      fail("tokenizer.ggml.tokens", "entry " + std::to_string(i) + " is not valid UTF-8 (byte " + std::to_string(*bad) + ")");
    if (respell && token.find(' ') != std::string::npos && utf8::python_strip(token).empty()) {
      const size_t chars = char_boundaries(token).size() - 1;
      token.clear();
      for (size_t c = 0; c < chars; ++c) token += "\xe2\x96\x81";  // "▁"
    }
    def.vocab.push_back(std::move(token));
  }
  std::unordered_map<std::string_view, int32_t> vocab;  // a Python dict: the last id wins
  vocab.reserve(def.vocab.size() * 2);
  for (size_t i = 0; i < def.vocab.size(); ++i) vocab[def.vocab[i]] = int32_t(i);

  def.merges_field = "tokenizer.ggml.merges";
  if (!respell && !data.merges.empty()) {
    def.merges.reserve(data.merges.size());
    for (size_t i = 0; i < data.merges.size(); ++i) {
      const std::string_view m = data.merges[i];
      const size_t space = m.find(' ');
      if (space == std::string_view::npos || m.find(' ', space + 1) != std::string_view::npos)
        fail("tokenizer.ggml.merges", "entry " + std::to_string(i) + " " + in_quotes(m) + " is not two tokens separated by one space");
      def.merges.emplace_back(std::string(m.substr(0, space)), std::string(m.substr(space + 1)));
    }
  } else {
    std::unordered_map<std::string_view, double> scores;
    scores.reserve(def.vocab.size() * 2);
    if (respell) {
      // Gemma's scores do not follow its merge order; the file position does.
      for (size_t i = 0; i < def.vocab.size(); ++i) scores[def.vocab[i]] = -double(i);
    } else {
      if (data.scores.size() != def.vocab.size()) fail("tokenizer.ggml.scores", "missing (needed to rebuild the merges)");
      for (size_t i = 0; i < def.vocab.size(); ++i) scores[def.vocab[i]] = data.scores[i];
    }
    def.merges = rebuild_merges(def.vocab, vocab, scores);
    def.merges_field = "merges rebuilt from tokenizer.ggml.tokens";
  }

  // Added tokens: control ones special, user-defined ones plain; each keeps its id.
  std::unordered_map<std::string, bool> added_seen;
  int32_t next_new_id = int32_t(def.vocab.size());
  const auto add = [&](const std::string& content, bool special) {
    if (content.empty() || added_seen.count(content)) return;
    added_seen[content] = true;
    AddedTokenDef a;
    a.content = content;
    a.special = special;
    auto it = vocab.find(a.content);
    a.id = it != vocab.end() ? it->second : next_new_id++;
    def.added.push_back(std::move(a));
  };
  // transformers registers the bos/eos/unk/pad tokens and "<mask>" as special first.
  const auto named = [&](const std::optional<int64_t>& id) -> std::string {
    return id ? std::string(data.tokens[size_t(*id)]) : std::string();
  };
  for (const std::string& name : {named(data.bos_id), named(data.eos_id), named(data.unk_id), named(data.pad_id)})
    if (!name.empty() && vocab.count(name)) add(name, true);
  if (vocab.count("<mask>")) add("<mask>", true);
  if (!data.token_type.empty()) {
    for (size_t i = 0; i < data.tokens.size(); ++i)
      if (data.token_type[i] == kTokenTypeControl) add(std::string(data.tokens[i]), true);
    for (size_t i = 0; i < data.tokens.size(); ++i)
      if (data.token_type[i] == kTokenTypeUserDefined && vocab.count(std::string_view(data.tokens[i])))
        add(std::string(data.tokens[i]), false);
  }

  def.byte_fallback = true;
  def.fuse_unk = true;
  if (data.unk_id) def.unk_token = def.vocab[size_t(*data.unk_id)];
  else if (vocab.count("<unk>")) def.unk_token = "<unk>";
  def.normalizer.push_back({NormalizeStep::Kind::Replace, " ", "\xe2\x96\x81"});
  def.pre_tokenizer.push_back({" ", SplitStep::Behavior::MergedWithPrevious});
  def.has_decoder = true;
  def.decoder.push_back({DecodeStep::Kind::Replace, "\xe2\x96\x81", " "});
  def.decoder.push_back({DecodeStep::Kind::ByteFallback, "", ""});
  def.decoder.push_back({DecodeStep::Kind::Fuse, "", ""});
  def.bos_id = data.bos_id ? int32_t(*data.bos_id) : -1;
  def.eos_id = data.eos_id ? int32_t(*data.eos_id) : -1;
  def.pad_id = data.pad_id ? int32_t(*data.pad_id) : -1;
  return make_bpe_tokenizer(std::move(def));
}

}  // namespace lumen::tokenizer
