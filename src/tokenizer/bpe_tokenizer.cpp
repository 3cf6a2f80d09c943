#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace lumen::tokenizer {
namespace {

// (left id, right id) -> (rank, merged id), open addressing: the merge lookup is the inner
// loop of BPE and std::unordered_map's node hopping would dominate it.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  void reserve(size_t count) {
    size_t capacity = 16;
    int bits = 4;
    while (capacity < count * 2) {
      capacity *= 2;
      ++bits;
    }
    entries_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    shift_ = 64 - bits;
  }
  void insert_or_assign(int32_t left, int32_t right, int32_t rank, int32_t merged) {
    const uint64_t key = make_key(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (entries_[i].key == kEmpty || entries_[i].key == key) {
        entries_[i] = Entry{key, rank, merged};
        return;
      }
    }
  }
  const Entry* find(int32_t left, int32_t right) const {
    if (entries_.empty()) return nullptr;
    const uint64_t key = make_key(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (entries_[i].key == key) return &entries_[i];
      if (entries_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static uint64_t make_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  size_t slot(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Entry> entries_;
  size_t mask_ = 0;
  int shift_ = 60;
};

// Added tokens, matched leftmost-longest as tokenizers' Aho-Corasick does.
class AddedTokenTrie {
 public:
  void insert(std::string_view text, int32_t token_index) {
    if (text.empty()) return;
    int32_t node = 0;
    for (unsigned char c : text) {
      const uint64_t edge = (uint64_t(node) << 8) | c;
      auto it = edges_.find(edge);
      if (it == edges_.end()) {
        terminal_.push_back(-1);
        it = edges_.emplace(edge, int32_t(terminal_.size() - 1)).first;
      }
      node = it->second;
    }
    if (terminal_[size_t(node)] < 0) terminal_[size_t(node)] = token_index;  // first definition wins
    first_byte_[static_cast<unsigned char>(text[0])] = true;
  }
  bool empty() const { return edges_.empty(); }
  // The longest token starting at text[pos]: (token index, length), or (-1, 0).
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) return {-1, 0};
    int32_t node = 0, best = -1;
    size_t best_length = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = edges_.find((uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[size_t(node)] >= 0) {
        best = terminal_[size_t(node)];
        best_length = i + 1 - pos;
      }
    }
    return {best, best_length};
  }

 private:
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<int32_t> terminal_{-1};            // node -> token index or -1
  std::array<bool, 256> first_byte_{};
};

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !utf8::is_python_space(c);
}

char32_t last_code_point(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
  return utf8::decode(s, start, s.size() - start);
}

void replace_all(std::string& text, const std::string& pattern, const std::string& content) {
  if (pattern.empty() || text.find(pattern) == std::string::npos) return;
  std::string out;
  out.reserve(text.size() + text.size() / 2);
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(pattern, pos);
    if (hit == std::string::npos) break;
    out.append(text, pos, hit - pos);
    out += content;
    pos = hit + pattern.size();
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

// "<0xAB>" -> 0xAB; -1 for anything else (tokenizers' ByteFallback test).
int byte_token_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeDefinition def) : def_(std::move(def)) { build(); }

  std::vector<int32_t> encode(std::string_view text, bool parse_special) const override {
    utf8::require_valid(text, "input text");
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    split_added(text, raw_trie_, parse_special, [&](std::string_view segment) { encode_raw_segment(segment, parse_special, ids); },
                ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id);
      if (skip_special && special_[size_t(id)]) continue;
      tokens.push_back(pieces_[size_t(id)]);
    }
    if (!def_.has_decoder) {
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    for (const DecodeStep& step : def_.decoder) tokens = apply_decode_step(step, std::move(tokens));
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    check_id(id);
    std::string token = pieces_[size_t(id)];
    for (const DecodeStep& step : def_.decoder) {
      if (step.kind == DecodeStep::Kind::Replace) {
        replace_all(token, step.pattern, step.content);
      } else if (step.kind == DecodeStep::Kind::ByteFallback) {
        const int byte = byte_token_value(token);
        if (byte >= 0) token = std::string(1, char(byte));
      }
      // Fuse joins tokens and Strip trims the ends of the whole text: neither changes what
      // one token contributes in the middle of a text.
    }
    return token;
  }

  std::string piece(int32_t id) const override {
    check_id(id);
    return pieces_[size_t(id)];
  }
  std::optional<int32_t> piece_id(std::string_view piece) const override {
    if (auto it = added_index_.find(piece); it != added_index_.end()) return it->second;
    if (auto it = vocab_index_.find(piece); it != vocab_index_.end()) return it->second;
    return std::nullopt;
  }
  int32_t vocab_size() const override { return int32_t(pieces_.size()); }
  bool is_special(int32_t id) const override { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }
  int32_t bos_id() const override { return def_.bos_id; }
  int32_t eos_id() const override { return def_.eos_id; }
  int32_t pad_id() const override { return def_.pad_id; }
  std::string kind() const override { return def_.kind; }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw Error(def_.source + ": " + message); }

  void check_id(int32_t id) const {
    if (id < 0 || size_t(id) >= pieces_.size())
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(pieces_.size()) +
                  " entries)");
  }

  void build() {
    const size_t model_size = def_.vocab.size();
    size_t total = model_size;
    for (const auto& a : def_.added) {
      if (a.id < 0) fail("added token " + in_quotes(a.content) + " has a negative id");
      total = std::max(total, size_t(a.id) + 1);
    }
    pieces_.assign(total, std::string());
    std::vector<bool> defined(total, false);
    for (size_t id = 0; id < model_size; ++id) {
      pieces_[id] = def_.vocab[id];
      defined[id] = true;
    }
    vocab_index_.reserve(model_size * 2);
    for (size_t id = 0; id < model_size; ++id) vocab_index_[pieces_[id]] = int32_t(id);  // later wins, as a dict

    special_.assign(total, false);
    for (size_t i = 0; i < def_.added.size(); ++i) {
      const AddedTokenDef& a = def_.added[i];
      if (a.content.empty()) fail("added token " + std::to_string(a.id) + " has empty content");
      if (size_t(a.id) >= model_size) {
        if (defined[size_t(a.id)] && pieces_[size_t(a.id)] != a.content)
          fail("added tokens " + in_quotes(pieces_[size_t(a.id)]) + " and " + in_quotes(a.content) + " share id " +
               std::to_string(a.id));
        pieces_[size_t(a.id)] = a.content;
        defined[size_t(a.id)] = true;
      }
      added_index_[std::string_view(a.content)] = a.id;  // def_.added no longer changes
      if (a.special) special_[size_t(a.id)] = true;
    }
    for (size_t id = 0; id < total; ++id)
      if (!defined[id]) fail("token id " + std::to_string(id) + " has no vocabulary entry (the ids have a gap)");

    for (size_t i = 0; i < def_.added.size(); ++i) {
      const AddedTokenDef& a = def_.added[i];
      if (a.normalized) {
        std::string normalized = normalize(a.content);
        normalized_trie_.insert(normalized, int32_t(i));
      } else {
        raw_trie_.insert(a.content, int32_t(i));
      }
    }

    ascii_id_.fill(-1);
    for (int c = 0; c < 128; ++c) {
      const char ch = char(c);
      auto found = vocab_index_.find(std::string_view(&ch, 1));
      if (found != vocab_index_.end()) ascii_id_[size_t(c)] = found->second;
    }
    byte_id_.fill(-1);
    if (def_.byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        auto it = vocab_index_.find(std::string_view(name, 6));
        if (it != vocab_index_.end()) byte_id_[size_t(b)] = it->second;
      }
    }
    if (!def_.unk_token.empty()) {
      auto it = vocab_index_.find(def_.unk_token);
      if (it == vocab_index_.end()) fail("unk_token " + in_quotes(def_.unk_token) + " is not in the vocabulary");
      unk_id_ = it->second;
    }

    merges_.reserve(def_.merges.size());
    std::string joined;
    for (size_t rank = 0; rank < def_.merges.size(); ++rank) {
      // Named references, not a structured binding: clang 14 (the fuzz build) cannot capture those.
      const std::string& left = def_.merges[rank].first;
      const std::string& right = def_.merges[rank].second;
      const auto lookup = [&](const std::string& entry) {
        auto it = vocab_index_.find(entry);
        if (it == vocab_index_.end())
          fail(def_.merges_field + "[" + std::to_string(rank) + "] (" + in_quotes(left) + " " + in_quotes(right) +
               "): " + in_quotes(entry) + " is not in the vocabulary");
        return it->second;
      };
      joined = left;
      joined += right;
      const int32_t left_id = lookup(left);
      const int32_t right_id = lookup(right);
      merges_.insert_or_assign(left_id, right_id, int32_t(rank), lookup(joined));
    }
    def_.merges.clear();
    def_.merges.shrink_to_fit();
    def_.vocab.clear();
    def_.vocab.shrink_to_fit();
    // vocab_index_ keys view pieces_, which no longer changes.
  }

  std::string normalize(std::string_view text) const {
    std::string out(text);
    for (const NormalizeStep& step : def_.normalizer) {
      if (step.kind == NormalizeStep::Kind::Replace) replace_all(out, step.pattern, step.content);
      else if (!out.empty()) out.insert(0, step.content);  // Prepend leaves an empty text empty
    }
    return out;
  }

  // Cuts `text` at the added tokens of `trie`: on_text gets the pieces between them, the ids
  // of the tokens go to `ids`.
  void split_added(std::string_view text, const AddedTokenTrie& trie, bool parse_special,
                   const std::function<void(std::string_view)>& on_text, std::vector<int32_t>& ids) const {
    if (trie.empty()) {
      if (!text.empty()) on_text(text);
      return;
    }
    size_t text_start = 0;  // start of the pending ordinary text
    size_t pos = 0;
    while (pos < text.size()) {
      auto [index, length] = trie.longest_at(text, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedTokenDef& token = def_.added[size_t(index)];
      size_t start = pos, stop = pos + length;
      bool keep = !(token.special && !parse_special);
      if (keep && token.single_word) {
        const bool space_before = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
        bool space_after = stop == text.size();
        if (!space_after) {
          const size_t n = utf8::sequence_length(text, stop);
          space_after = n == 0 || !is_word_char(utf8::decode(text, stop, n));
        }
        keep = space_before && space_after;
      }
      if (!keep) {  // the match is ordinary text; scanning resumes after it
        pos = stop;
        continue;
      }
      if (token.lstrip) {
        while (start > text_start) {
          size_t prev = start - 1;
          while (prev > text_start && (static_cast<unsigned char>(text[prev]) & 0xc0) == 0x80) --prev;
          const size_t n = utf8::sequence_length(text, prev);
          if (n != start - prev || !utf8::is_python_space(utf8::decode(text, prev, n))) break;
          start = prev;
        }
      }
      if (token.rstrip) {
        while (stop < text.size()) {
          const size_t n = utf8::sequence_length(text, stop);
          if (n == 0 || !utf8::is_python_space(utf8::decode(text, stop, n))) break;
          stop += n;
        }
      }
      if (start > text_start) on_text(text.substr(text_start, start - text_start));
      ids.push_back(token.id);
      text_start = pos = stop;
    }
    if (text_start < text.size()) on_text(text.substr(text_start));
  }

  void encode_raw_segment(std::string_view segment, bool parse_special, std::vector<int32_t>& ids) const {
    const std::string normalized = normalize(segment);
    split_added(normalized, normalized_trie_, parse_special, [&](std::string_view piece) { pre_tokenize_and_encode(piece, ids); },
                ids);
  }

  void pre_tokenize_and_encode(std::string_view text, std::vector<int32_t>& ids) const {
    if (def_.pre_tokenizer.empty()) {
      encode_word(text, ids);
      return;
    }
    std::vector<std::string_view> words{text};
    for (const SplitStep& step : def_.pre_tokenizer) {
      std::vector<std::string_view> next;
      for (std::string_view word : words) split_word(step, word, next);
      words = std::move(next);
    }
    for (std::string_view word : words) encode_word(word, ids);
  }

  // tokenizers' Split pre-tokenizer with a string pattern.
  static void split_word(const SplitStep& step, std::string_view word, std::vector<std::string_view>& out) {
    struct Part {
      size_t begin, end;
      bool match;
    };
    std::vector<Part> parts;
    size_t prev = 0;
    if (!step.pattern.empty()) {
      for (size_t hit = word.find(step.pattern); hit != std::string_view::npos; hit = word.find(step.pattern, prev)) {
        if (hit != prev) parts.push_back({prev, hit, false});
        parts.push_back({hit, hit + step.pattern.size(), true});
        prev = hit + step.pattern.size();
      }
    }
    if (prev != word.size()) parts.push_back({prev, word.size(), false});
    if (parts.size() <= 1 && (parts.empty() || !parts[0].match || step.behavior != SplitStep::Behavior::Removed)) {
      if (!parts.empty()) out.push_back(word);
      return;
    }
    using B = SplitStep::Behavior;
    std::vector<Part> merged;
    switch (step.behavior) {
      case B::Removed:
        for (const Part& p : parts)
          if (!p.match) merged.push_back(p);
        break;
      case B::Isolated:
        merged = parts;
        break;
      case B::MergedWithPrevious: {
        bool previous_match = false;
        for (const Part& p : parts) {
          if (p.match && !previous_match && !merged.empty()) merged.back().end = p.end;
          else merged.push_back(p);
          previous_match = p.match;
        }
        break;
      }
      case B::MergedWithNext: {
        bool previous_match = false;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
          if (it->match && !previous_match && !merged.empty()) merged.back().begin = it->begin;
          else merged.push_back(*it);
          previous_match = it->match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
      }
      case B::Contiguous: {
        bool previous_match = false;
        for (const Part& p : parts) {
          if (p.match == previous_match && !merged.empty()) merged.back().end = p.end;
          else merged.push_back(p);
          previous_match = p.match;
        }
        break;
      }
    }
    for (const Part& p : merged) out.push_back(word.substr(p.begin, p.end - p.begin));
  }

  struct Symbol {
    int32_t id;
    int32_t prev, next;
  };
  struct Candidate {
    int32_t rank, pos, merged;
  };

  // tokenizers' BPE::merge_word + Word::merge_all: characters (or their byte-fallback
  // tokens), then repeatedly the lowest-rank merge, leftmost first on equal ranks.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const {
    if (word.empty()) return;
    if (def_.ignore_merges) {
      if (auto it = vocab_index_.find(word); it != vocab_index_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    int32_t pending_unk = -1;  // an unknown run being fused
    const auto add = [&](int32_t id) {
      symbols.push_back(Symbol{id, int32_t(symbols.size()) - 1, int32_t(symbols.size()) + 1});
    };
    for (size_t pos = 0; pos < word.size();) {
      const auto byte = static_cast<unsigned char>(word[pos]);
      const size_t length = byte < 0x80 ? 1 : utf8::sequence_length(word, pos);
      int32_t id = -1;
      if (byte < 0x80) {
        id = ascii_id_[byte];
      } else if (auto it = vocab_index_.find(word.substr(pos, length)); it != vocab_index_.end()) {
        id = it->second;
      }
      if (id >= 0) {
        if (pending_unk >= 0) {
          add(pending_unk);
          pending_unk = -1;
        }
        add(id);
      } else {
        bool done = false;
        if (def_.byte_fallback) {
          bool all = true;
          for (size_t i = 0; i < length; ++i) all = all && byte_id_[static_cast<unsigned char>(word[pos + i])] >= 0;
          if (all) {
            for (size_t i = 0; i < length; ++i) add(byte_id_[static_cast<unsigned char>(word[pos + i])]);
            done = true;
          }
        }
        if (!done && unk_id_ >= 0) {
          if (pending_unk >= 0 && !def_.fuse_unk) add(pending_unk);
          pending_unk = unk_id_;
        }
      }
      pos += length;
    }
    if (pending_unk >= 0) add(pending_unk);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    std::vector<Candidate> heap;
    heap.reserve(symbols.size());
    const auto lower_priority = [](const Candidate& a, const Candidate& b) {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    };
    const auto push = [&](int32_t pos, int32_t left, int32_t right) {
      if (const auto* m = merges_.find(left, right)) {
        heap.push_back(Candidate{m->rank, pos, m->merged});
        std::push_heap(heap.begin(), heap.end(), lower_priority);
      }
    };
    for (size_t i = 0; i + 1 < symbols.size(); ++i) push(int32_t(i), symbols[i].id, symbols[i + 1].id);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), lower_priority);
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& left = symbols[size_t(top.pos)];
      if (left.id < 0 || left.next < 0) continue;
      Symbol& right = symbols[size_t(left.next)];
      const auto* m = merges_.find(left.id, right.id);
      if (!m || m->merged != top.merged) continue;  // stale: one side changed since
      left.id = top.merged;
      right.id = -1;
      left.next = right.next;
      if (left.next >= 0) symbols[size_t(left.next)].prev = top.pos;
      if (left.prev >= 0) push(left.prev, symbols[size_t(left.prev)].id, left.id);
      if (left.next >= 0) push(top.pos, left.id, symbols[size_t(left.next)].id);
    }
    for (int32_t i = 0; i >= 0; i = symbols[size_t(i)].next) ids.push_back(symbols[size_t(i)].id);
  }

  static std::vector<std::string> apply_decode_step(const DecodeStep& step, std::vector<std::string> tokens) {
    switch (step.kind) {
      case DecodeStep::Kind::Replace:
        for (auto& t : tokens) replace_all(t, step.pattern, step.content);
        return tokens;
      case DecodeStep::Kind::Fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        return {all};
      }
      case DecodeStep::Kind::Strip: {
        for (auto& t : tokens) {
          size_t begin = 0, end = t.size();
          for (int i = 0; i < step.strip_start && t.compare(begin, step.content.size(), step.content) == 0 && begin < end; ++i)
            begin += step.content.size();
          for (int i = 0; i < step.strip_stop && end - begin >= step.content.size() &&
                          t.compare(end - step.content.size(), step.content.size(), step.content) == 0;
               ++i)
            end -= step.content.size();
          t = t.substr(begin, end - begin);
        }
        return tokens;
      }
      case DecodeStep::Kind::ByteFallback: {
        // Runs of <0xXX> tokens become their bytes when those are valid UTF-8, else one
        // U+FFFD per byte token.
        std::vector<std::string> out;
        std::string bytes;
        size_t byte_tokens = 0;
        const auto flush = [&] {
          if (byte_tokens == 0) return;
          if (!utf8::first_invalid(bytes)) {
            out.push_back(bytes);
          } else {
            for (size_t i = 0; i < byte_tokens; ++i) out.push_back("\xef\xbf\xbd");
          }
          bytes.clear();
          byte_tokens = 0;
        };
        for (auto& t : tokens) {
          const int value = byte_token_value(t);
          if (value >= 0) {
            bytes += char(value);
            ++byte_tokens;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        return out;
      }
    }
    return tokens;
  }

  BpeDefinition def_;
  std::vector<std::string> pieces_;
  std::unordered_map<std::string_view, int32_t> vocab_index_;  // model vocabulary only
  std::unordered_map<std::string_view, int32_t> added_index_;
  std::vector<bool> special_;
  AddedTokenTrie raw_trie_, normalized_trie_;
  std::array<int32_t, 128> ascii_id_{};
  std::array<int32_t, 256> byte_id_{};
  int32_t unk_id_ = -1;
  MergeTable merges_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeDefinition definition) {
  return std::make_unique<BpeTokenizer>(std::move(definition));
}

}  // namespace lumen::tokenizer
