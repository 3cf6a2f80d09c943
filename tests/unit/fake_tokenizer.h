// A tokenizer test double for runtime tests: a fixed list of pieces (raw bytes, so a piece
// may be half a UTF-8 character), some marked special. encode() is greedy longest-match.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace lumen::test_support {

class FakeTokenizer final : public tokenizer::Tokenizer {
 public:
  struct Entry {
    std::string piece;
    bool special = false;
  };
  explicit FakeTokenizer(std::vector<Entry> entries) : entries_(std::move(entries)) {}

  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const override {
    std::vector<int32_t> ids;
    while (!text.empty()) {
      int32_t best = -1;
      size_t best_len = 0;
      for (int32_t id = 0; id < vocab_size(); ++id) {
        const auto& e = entries_[size_t(id)];
        if (e.special && !parse_special) continue;
        if (e.piece.size() > best_len && text.substr(0, e.piece.size()) == e.piece) {
          best = id;
          best_len = e.piece.size();
        }
      }
      if (best < 0) throw Error("fake tokenizer: cannot encode '" + std::string(text) + "'");
      ids.push_back(best);
      text.remove_prefix(best_len);
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const override {
    std::string out;
    for (int32_t id : ids)
      if (!(skip_special && is_special(id))) out += token_bytes(id);
    return out;
  }
  std::string token_bytes(int32_t id) const override { return at(id).piece; }
  std::string piece(int32_t id) const override { return at(id).piece; }
  std::optional<int32_t> piece_id(std::string_view piece) const override {
    for (int32_t id = 0; id < vocab_size(); ++id)
      if (entries_[size_t(id)].piece == piece) return id;
    return std::nullopt;
  }
  int32_t vocab_size() const override { return int32_t(entries_.size()); }
  bool is_special(int32_t id) const override { return at(id).special; }
  int32_t bos_id() const override { return 2; }
  int32_t eos_id() const override { return 1; }
  int32_t pad_id() const override { return 0; }
  std::string kind() const override { return "fake"; }

 private:
  const Entry& at(int32_t id) const {
    if (id < 0 || id >= vocab_size()) throw Error("fake tokenizer: id " + std::to_string(id) + " out of range");
    return entries_[size_t(id)];
  }
  std::vector<Entry> entries_;
};

// 32 ids: <pad>, <eos>, <bos>, then one piece per character from 'a' to '}'.
inline FakeTokenizer letters() {
  std::vector<FakeTokenizer::Entry> e = {{"<pad>", true}, {"<eos>", true}, {"<bos>", true}};
  for (int i = 3; i < 32; ++i) e.push_back({std::string(1, char('a' + i - 3))});
  return FakeTokenizer(std::move(e));
}

}  // namespace lumen::test_support
