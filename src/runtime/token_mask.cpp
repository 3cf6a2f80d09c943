#include "runtime/token_mask.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace lumen::runtime {

// ----------------------------------------------------------------------------- TokenTrie

TokenTrie::TokenTrie(const tokenizer::Tokenizer& tokenizer) : vocab_size_(tokenizer.vocab_size()) {
  const size_t V = size_t(vocab_size_);
  text_offset_.assign(V + 1, 0);
  special_.assign(V, 0);
  for (size_t id = 0; id < V; ++id) {
    text_offset_[id] = int64_t(text_.size());
    if (tokenizer.is_special(int32_t(id))) {
      special_[id] = 1;
      continue;
    }
    text_ += tokenizer.token_bytes(int32_t(id));
  }
  text_offset_[V] = int64_t(text_.size());

  std::vector<int32_t> order;
  for (size_t id = 0; id < V; ++id)
    if (!special_[id] && text_offset_[id + 1] > text_offset_[id]) order.push_back(int32_t(id));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const auto sa = bytes(a), sb = bytes(b);
    return sa != sb ? sa < sb : a < b;
  });
  // Preorder trie from the sorted strings: each string adds nodes past its common prefix
  // with the previous one.
  std::string_view previous;
  std::vector<int32_t> path;  // node index at each depth of the previous string
  for (int32_t id : order) {
    const auto s = bytes(id);
    size_t common = 0;
    while (common < s.size() && common < previous.size() && s[common] == previous[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      if (d + 1 > std::numeric_limits<uint16_t>::max()) throw Error("tokenizer: a token longer than 65535 bytes");
      path.push_back(int32_t(byte_.size()));
      byte_.push_back(uint8_t(s[d]));
      depth_.push_back(uint16_t(d + 1));
      tok_begin_.push_back(int32_t(tokens_.size()));
    }
    tokens_.push_back(id);  // ends at path.back(), the last node (new or, for a duplicate, the same)
    previous = s;
  }
  tok_begin_.push_back(int32_t(tokens_.size()));
  // Subtree ends: the first later node that is not deeper.
  const size_t N = byte_.size();
  skip_.assign(N, int32_t(N));
  std::vector<int32_t> open;
  for (size_t i = 0; i < N; ++i) {
    while (!open.empty() && depth_[size_t(open.back())] >= depth_[i]) {
      skip_[size_t(open.back())] = int32_t(i);
      open.pop_back();
    }
    open.push_back(int32_t(i));
  }
}

// -------------------------------------------------------------------------- GrammarArena

GrammarArena::GrammarArena(const Grammar& grammar) : grammar_(grammar) {
  State dead;
  dead.next.reset(new int32_t[256]);
  std::fill(dead.next.get(), dead.next.get() + 256, kDead);
  states_.push_back(std::move(dead));
  state_index_[std::string(1, '\0')] = kDead;
}

int32_t GrammarArena::frame(int32_t pos, int32_t parent) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  auto [it, inserted] = frame_index_.try_emplace(key, int32_t(frames_.size()));
  if (inserted) frames_.push_back({pos, parent});
  return it->second;
}

void GrammarArena::expand(int32_t pos, int32_t parent, Closure& out) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
  if (std::find(visited_.begin(), visited_.end(), key) != visited_.end()) return;
  visited_.push_back(key);
  const Symbol& s = grammar_.symbols[size_t(pos)];
  switch (s.kind) {
    case Symbol::Kind::End:
      if (parent == kBottom) {
        out.accepting = true;
      } else if (parent == kUnknown) {
        out.escaped = true;
      } else {
        const Frame f = frames_[size_t(parent)];
        expand(f.pos + 1, f.parent, out);
      }
      return;
    case Symbol::Kind::Bytes:
    case Symbol::Kind::Token: out.leaves.push_back(frame(pos, parent)); return;
    case Symbol::Kind::Rule: {
      // A call in tail position returns straight to the caller's caller: reuse its frame.
      const bool tail = grammar_.symbols[size_t(pos) + 1].kind == Symbol::Kind::End;
      const int32_t f = tail ? parent : frame(pos, parent);
      for (int32_t start : grammar_.rule_alternatives[size_t(s.id)]) expand(start, f, out);
      return;
    }
  }
}

int32_t GrammarArena::intern(Closure&& c) {
  std::sort(c.leaves.begin(), c.leaves.end());
  c.leaves.erase(std::unique(c.leaves.begin(), c.leaves.end()), c.leaves.end());
  if (c.leaves.empty() && !c.accepting && !c.escaped) return kDead;
  std::string key(size_t(1 + 4 * c.leaves.size()), '\0');
  key[0] = char(1 | (c.accepting ? 2 : 0) | (c.escaped ? 4 : 0));
  if (!c.leaves.empty()) std::memcpy(key.data() + 1, c.leaves.data(), 4 * c.leaves.size());  // data() may be null
  auto [it, inserted] = state_index_.try_emplace(std::move(key), int32_t(states_.size()));
  if (inserted) {
    State st;
    st.leaves = std::move(c.leaves);
    st.accepting = c.accepting;
    st.escaped = c.escaped;
    states_.push_back(std::move(st));
  }
  return it->second;
}

int32_t GrammarArena::start(const std::vector<int32_t>& frames_top_first, int32_t bottom) {
  // frames_top_first[0] is a terminal position; the others are call positions below it.
  int32_t parent = bottom;
  for (size_t i = frames_top_first.size(); i-- > 1;) parent = frame(frames_top_first[i], parent);
  Closure c;
  c.leaves.push_back(frame(frames_top_first[0], parent));
  return intern(std::move(c));
}

int32_t GrammarArena::root_state() {
  Closure c;
  visited_.clear();
  for (int32_t s : grammar_.rule_alternatives[size_t(grammar_.root)]) expand(s, kBottom, c);
  return intern(std::move(c));
}

int32_t GrammarArena::step(int32_t state, uint8_t byte) {
  {
    State& st = states_[size_t(state)];
    if (!st.next) {
      st.next.reset(new int32_t[256]);
      std::fill(st.next.get(), st.next.get() + 256, -1);
    }
    const int32_t known = st.next[byte];
    if (known >= 0) return known;
  }
  Closure c;
  visited_.clear();
  // Copy: expand() may grow states_ (no, only frames_), but keep the loop independent of it.
  const std::vector<int32_t> leaves = states_[size_t(state)].leaves;
  for (int32_t leaf : leaves) {
    const Frame f = frames_[size_t(leaf)];
    const Symbol& s = grammar_.symbols[size_t(f.pos)];
    if (s.kind == Symbol::Kind::Bytes && byte >= s.lo && byte <= s.hi) expand(f.pos + 1, f.parent, c);
  }
  const int32_t next = intern(std::move(c));
  states_[size_t(state)].next[byte] = next;
  return next;
}

int32_t GrammarArena::step_bytes(int32_t state, std::string_view bytes) {
  for (char b : bytes) {
    state = step(state, uint8_t(b));
    if (state == kDead) break;
  }
  return state;
}

int32_t GrammarArena::step_token(int32_t state, int32_t token) {
  Closure c;
  visited_.clear();
  const std::vector<int32_t> leaves = states_[size_t(state)].leaves;
  for (int32_t leaf : leaves) {
    const Frame f = frames_[size_t(leaf)];
    const Symbol& s = grammar_.symbols[size_t(f.pos)];
    if (s.kind == Symbol::Kind::Token && s.id == token) expand(f.pos + 1, f.parent, c);
  }
  return intern(std::move(c));
}

std::vector<int32_t> GrammarArena::context_key(int32_t leaf, int depth) const {
  std::vector<int32_t> key;
  int32_t f = leaf;
  while (f >= 0 && int(key.size()) < depth) {
    key.push_back(frames_[size_t(f)].pos);
    f = frames_[size_t(f)].parent;
  }
  key.push_back(f == kBottom ? kBottom : kUnknown);
  return key;
}

// ----------------------------------------------------------------------- CompiledGrammar

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), arena_(grammar_) {
  for (const auto& s : grammar_.symbols) {
    if (s.kind != Symbol::Kind::Token) continue;
    if (s.id < 0 || s.id >= trie_->vocab_size())
      throw Error("grammar: token id " + std::to_string(s.id) + " is outside the vocabulary");
    token_terminals_.push_back(s.id);
  }
  std::sort(token_terminals_.begin(), token_terminals_.end());
  token_terminals_.erase(std::unique(token_terminals_.begin(), token_terminals_.end()), token_terminals_.end());
}

size_t CompiledGrammar::contexts_computed() const {
  std::lock_guard lock(mutex_);
  return contexts_.size();
}

std::shared_ptr<const CompiledGrammar::ContextTokens> CompiledGrammar::context(const std::vector<int32_t>& key) {
  std::string k(reinterpret_cast<const char*>(key.data()), 4 * key.size());
  std::lock_guard lock(mutex_);
  auto it = contexts_.find(k);
  if (it != contexts_.end()) return it->second;
  auto result = classify(key);
  contexts_.emplace(std::move(k), result);
  return result;
}

// Walks the whole trie from the context's start state. A token is accepted when the
// concrete stacks survive all its bytes, uncertain when only a path that returned below the
// context did, rejected otherwise; a subtree that only the escaped path reaches is
// uncertain as a whole, one that nothing reaches is skipped.
std::shared_ptr<const CompiledGrammar::ContextTokens> CompiledGrammar::classify(const std::vector<int32_t>& key) {
  const TokenTrie& t = *trie_;
  const int32_t bottom = key.back();
  const std::vector<int32_t> frames(key.begin(), key.end() - 1);
  const int32_t start = arena_.start(frames, bottom);

  auto out = std::make_shared<ContextTokens>();
  std::vector<int32_t> accepted;
  const size_t N = t.node_count();
  std::vector<int32_t> at_depth(1, start);
  std::vector<char> escaped_at(1, 0);
  size_t i = 0;
  while (i < N) {
    const size_t d = t.depth_[i];
    if (at_depth.size() <= d) {
      at_depth.resize(d + 1);
      escaped_at.resize(d + 1);
    }
    const int32_t parent = at_depth[d - 1];
    const int32_t s = arena_.step(parent, t.byte_[i]);
    const auto& st = arena_.state(s);
    const bool escaped = escaped_at[d - 1] || st.escaped;
    const bool alive = !st.leaves.empty();
    if (!alive) {
      // Nothing concrete survives: a token ending here is accepted when the grammar is
      // complete right here, uncertain when a path returned below the context; the tokens
      // below this node have bytes no concrete stack takes.
      const int32_t end = t.skip_[i];
      for (int32_t k = t.tok_begin_[i]; k < t.tok_begin_[i + 1]; ++k) {
        if (st.accepting) accepted.push_back(t.tokens_[size_t(k)]);
        else if (escaped) out->uncertain.push_back(t.tokens_[size_t(k)]);
      }
      if (escaped)
        for (int32_t k = t.tok_begin_[i + 1]; k < t.tok_begin_[size_t(end)]; ++k) out->uncertain.push_back(t.tokens_[size_t(k)]);
      i = size_t(end);
      continue;
    }
    for (int32_t k = t.tok_begin_[i]; k < t.tok_begin_[i + 1]; ++k) accepted.push_back(t.tokens_[size_t(k)]);
    at_depth[d] = s;
    escaped_at[d] = escaped;
    ++i;
  }
  if (accepted.size() * 32 > size_t(t.vocab_size())) {
    out->accepted_bits.assign((size_t(t.vocab_size()) + 63) / 64, 0);
    for (int32_t id : accepted) out->accepted_bits[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
  } else {
    out->accepted_ids = std::move(accepted);
  }
  return out;
}

// ------------------------------------------------------------------------ GrammarMatcher

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> end_tokens)
    : grammar_(std::move(grammar)), end_tokens_(std::move(end_tokens)), arena_(grammar_->grammar()) {
  whole_only_ = grammar_->token_terminals();
  whole_only_.insert(whole_only_.end(), end_tokens_.begin(), end_tokens_.end());
  std::sort(whole_only_.begin(), whole_only_.end());
  whole_only_.erase(std::unique(whole_only_.begin(), whole_only_.end()), whole_only_.end());
  state_ = arena_.root_state();
}

bool GrammarMatcher::whole_only(int32_t token) const {
  return std::binary_search(whole_only_.begin(), whole_only_.end(), token);
}

bool GrammarMatcher::can_end() const { return arena_.state(state_).accepting; }
bool GrammarMatcher::must_end() const { return can_end() && arena_.state(state_).leaves.empty(); }
bool GrammarMatcher::dead() const { return state_ == GrammarArena::kDead; }

bool GrammarMatcher::compute_mask(std::vector<uint64_t>& mask) {
  const TokenTrie& trie = grammar_->trie();
  const size_t words = (size_t(trie.vocab_size()) + 63) / 64;
  mask.assign(words, 0);
  auto set = [&](int32_t id) { mask[size_t(id) >> 6] |= uint64_t(1) << (id & 63); };
  auto test = [&](int32_t id) { return (mask[size_t(id) >> 6] >> (id & 63)) & 1; };
  const auto& st = arena_.state(state_);
  const std::vector<int32_t> leaves = st.leaves;
  const bool accepting = st.accepting;
  std::vector<int32_t> whole;  // token terminals allowed here
  for (int32_t leaf : leaves) {
    const Symbol& sym = grammar_->grammar().symbols[size_t(arena_.leaf_position(leaf))];
    if (sym.kind == Symbol::Kind::Token) {
      whole.push_back(sym.id);
      continue;
    }
    const auto ctx = grammar_->context(arena_.context_key(leaf, CompiledGrammar::kContextDepth));
    if (!ctx->accepted_bits.empty())
      for (size_t w = 0; w < words; ++w) mask[w] |= ctx->accepted_bits[w];
    for (int32_t id : ctx->accepted_ids) set(id);
    for (int32_t id : ctx->uncertain) {
      if (test(id)) continue;
      const int32_t s = arena_.step_bytes(state_, trie.bytes(id));
      if (s != GrammarArena::kDead && (!arena_.state(s).leaves.empty() || arena_.state(s).accepting)) set(id);
    }
  }
  // Whole-only tokens the byte walk let through are taken back; then the terminals and
  // (when complete) the end tokens that are allowed here.
  for (int32_t id : whole_only_) mask[size_t(id) >> 6] &= ~(uint64_t(1) << (id & 63));
  for (int32_t id : whole) set(id);
  if (accepting)
    for (int32_t id : end_tokens_) set(id);
  for (uint64_t w : mask)
    if (w) return true;
  return false;
}

bool GrammarMatcher::advance(int32_t token) {
  const TokenTrie& trie = grammar_->trie();
  if (token < 0 || token >= trie.vocab_size()) return false;
  const bool end = std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
  if (end && can_end()) return true;
  const bool as_token = whole_only(token) || trie.is_special(token) || trie.bytes(token).empty();
  const int32_t next = as_token ? arena_.step_token(state_, token) : arena_.step_bytes(state_, trie.bytes(token));
  if (next == GrammarArena::kDead) return false;
  state_ = next;
  return true;
}

void apply_mask(std::span<float> logits, const std::vector<uint64_t>& mask) {
  const float neg = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < mask.size() ? mask[w] : 0;
    if (bits == ~uint64_t(0)) continue;
    const size_t end = std::min(n, w * 64 + 64);
    if (bits == 0) {
      std::fill(logits.begin() + int64_t(w * 64), logits.begin() + int64_t(end), neg);
      continue;
    }
    for (size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i - w * 64)) & 1)) logits[i] = neg;
  }
}

}  // namespace lumen::runtime
