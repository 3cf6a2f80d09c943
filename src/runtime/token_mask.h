// The token-mask engine of constrained decoding: which vocabulary entries may come next
// under a grammar (grammar.h), fast enough for Gemma's 262144-token vocabulary.
//
// - TokenTrie: every ordinary token's bytes in one byte trie, laid out in preorder (a node's
//   subtree is a contiguous range, and so are the tokens under it). Built once per tokenizer.
// - A parser state is a set of stacks of grammar positions ("leaves": their top is a terminal).
//   Stacks are hash-consed frames (position, parent), right recursion runs in constant depth
//   (tail calls reuse the caller's frame), and sets of leaves are interned as states whose
//   byte transitions are memoized: walking the trie is one table lookup per edge once warm
//   (a lazily built DFA over the grammar's pushdown states).
// - CompiledGrammar caches, per "context" (a leaf's top frames, the rest of its stack
//   unknown), the tokens accepted whatever lies below (a bitset or id list), and the few
//   whose fate depends on the frames below ("uncertain": they close the context). A mask is
//   then the union of the cached sets of the current leaves plus an exact check of the
//   uncertain tokens only (XGrammar's split into context-independent and -dependent tokens).
// - GrammarMatcher is one sequence's state: compute_mask() for the next token (it can run on
//   another thread while the model computes the step), advance(token) after sampling.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/grammar.h"

namespace lumen::tokenizer {
class Tokenizer;
}

namespace lumen::runtime {

class TokenTrie {
 public:
  explicit TokenTrie(const tokenizer::Tokenizer& tokenizer);
  int32_t vocab_size() const { return vocab_size_; }
  size_t node_count() const { return byte_.size(); }
  // The bytes of an ordinary token; empty for special tokens (matched as whole tokens).
  std::string_view bytes(int32_t id) const {
    return {text_.data() + text_offset_[size_t(id)], size_t(text_offset_[size_t(id) + 1] - text_offset_[size_t(id)])};
  }
  bool is_special(int32_t id) const { return special_[size_t(id)] != 0; }

 private:
  friend class GrammarArena;
  friend class CompiledGrammar;
  int32_t vocab_size_ = 0;
  std::string text_;
  std::vector<int64_t> text_offset_;  // vocab_size + 1
  std::vector<uint8_t> special_;
  // Preorder trie (the root is implicit, depth 0).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> skip_;       // first node after the subtree
  std::vector<int32_t> tok_begin_;  // node -> first index in tokens_ (node_count + 1 entries)
  std::vector<int32_t> tokens_;     // token ids in trie order
};

// Frames, states and memoized transitions over one grammar (not thread-safe).
class GrammarArena {
 public:
  static constexpr int32_t kBottom = -1;   // below the root rule: popping here = grammar complete
  static constexpr int32_t kUnknown = -2;  // context cut off: popping here = "depends on what's below"
  static constexpr int32_t kDead = 0;      // the state with no leaves and no flags

  struct State {
    std::vector<int32_t> leaves;  // sorted frame ids whose position is a terminal
    bool accepting = false;       // the root rule can end here
    bool escaped = false;         // a context's bottom frame returned into kUnknown
    std::unique_ptr<int32_t[]> next;  // 256 memoized byte transitions (-1 = not yet)
  };

  explicit GrammarArena(const Grammar& grammar);
  // The state at the start of `rule` with the given frames below (positions, top first).
  int32_t start(const std::vector<int32_t>& frames_below_top_first, int32_t bottom);
  int32_t root_state();
  int32_t step(int32_t state, uint8_t byte);
  int32_t step_bytes(int32_t state, std::string_view bytes);
  int32_t step_token(int32_t state, int32_t token);
  const State& state(int32_t id) const { return states_[size_t(id)]; }
  // Top frames of a leaf (position first), up to `depth`, then kBottom or kUnknown.
  std::vector<int32_t> context_key(int32_t leaf, int depth) const;
  int32_t leaf_position(int32_t leaf) const { return frames_[size_t(leaf)].pos; }
  size_t frame_count() const { return frames_.size(); }
  size_t state_count() const { return states_.size(); }
  const Grammar& grammar() const { return grammar_; }

 private:
  struct Frame {
    int32_t pos, parent;
  };
  struct Closure {
    std::vector<int32_t> leaves;
    bool accepting = false, escaped = false;
  };
  int32_t frame(int32_t pos, int32_t parent);
  void expand(int32_t pos, int32_t parent, Closure& out);
  int32_t intern(Closure&& c);

  const Grammar& grammar_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_index_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_index_;
  std::vector<uint64_t> visited_;  // (pos, parent) pairs of the closure being built
};

// A grammar ready for masks: the lowered rules, the vocabulary, and the per-context cache.
// Shared by every sequence that uses the same grammar; thread-safe.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie);
  const Grammar& grammar() const { return grammar_; }
  const TokenTrie& trie() const { return *trie_; }
  // The ids the grammar names as whole-token terminals (sorted). A vocabulary may keep such
  // a token as ordinary text too (Gemma 4's GGUF has <|tool_call> and <|"|> as user-defined
  // tokens): the matcher then takes it only as the terminal, never through its bytes.
  const std::vector<int32_t>& token_terminals() const { return token_terminals_; }

  struct ContextTokens {
    std::vector<uint64_t> accepted_bits;  // when many are accepted
    std::vector<int32_t> accepted_ids;    // when few are
    std::vector<int32_t> uncertain;       // decided against the real stack
  };
  // The cached classification of the vocabulary for a context key (computed on first use).
  std::shared_ptr<const ContextTokens> context(const std::vector<int32_t>& key);
  size_t contexts_computed() const;

  static constexpr int kContextDepth = 4;

 private:
  std::shared_ptr<const ContextTokens> classify(const std::vector<int32_t>& key);

  Grammar grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<int32_t> token_terminals_;
  mutable std::mutex mutex_;
  GrammarArena arena_;  // contexts are explored here, under mutex_
  std::unordered_map<std::string, std::shared_ptr<const ContextTokens>> contexts_;
};

class GrammarMatcher {
 public:
  // `end_tokens`: ids allowed once the grammar is complete (they end the generation), and
  // only then.
  GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> end_tokens);

  // Bit i of the mask = token i may come next. Returns false when no token may (a dead end).
  bool compute_mask(std::vector<uint64_t>& mask);
  // Feeds the sampled token. Returns false (and changes nothing) when the grammar does not
  // allow it.
  bool advance(int32_t token);
  bool can_end() const;    // the grammar is complete here (an end token may come)
  bool must_end() const;   // complete, and nothing else can follow
  bool dead() const;       // nothing can follow and it is not complete
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  bool whole_only(int32_t token) const;  // never matched through its bytes

  std::shared_ptr<CompiledGrammar> grammar_;
  std::vector<int32_t> end_tokens_;
  std::vector<int32_t> whole_only_;  // sorted: the grammar's token terminals and the end tokens
  GrammarArena arena_;
  int32_t state_;
};

// Sets logits of tokens whose mask bit is clear to -infinity.
void apply_mask(std::span<float> logits, const std::vector<uint64_t>& mask);

}  // namespace lumen::runtime
