#include "runtime/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>

#include "base/error.h"

namespace lumen::runtime {

// ----------------------------------------------------------------------------- builders

namespace {
ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }
}  // namespace

ExprPtr empty() { return make({}); }

ExprPtr byte_range(uint8_t lo, uint8_t hi) {
  Expr e;
  e.kind = Expr::Kind::Bytes;
  e.lo = lo;
  e.hi = hi;
  return make(std::move(e));
}

ExprPtr literal(std::string_view bytes) {
  std::vector<ExprPtr> items;
  for (char c : bytes) items.push_back(byte_range(uint8_t(c), uint8_t(c)));
  if (items.size() == 1) return items[0];
  return seq(std::move(items));
}

ExprPtr char_class(std::vector<std::pair<char32_t, char32_t>> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (auto [a, b] : ranges) {
    if (a > b) continue;
    if (!merged.empty() && a <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, b);
    else
      merged.push_back({a, b});
  }
  if (negate) {
    std::vector<std::pair<char32_t, char32_t>> inverse;
    char32_t next = 0;
    for (auto [a, b] : merged) {
      if (a > next) inverse.push_back({next, a - 1});
      next = b + 1;
    }
    if (next <= 0x10FFFF) inverse.push_back({next, 0x10FFFF});
    merged = std::move(inverse);
  }
  Expr e;
  e.kind = Expr::Kind::CodePoints;
  e.ranges = std::move(merged);
  return make(std::move(e));
}

ExprPtr any_char() { return char_class({{0, 0x10FFFF}}); }

ExprPtr token(int32_t id) {
  Expr e;
  e.kind = Expr::Kind::Token;
  e.token = id;
  return make(std::move(e));
}

ExprPtr ref(std::string rule) {
  Expr e;
  e.kind = Expr::Kind::Ref;
  e.rule = std::move(rule);
  return make(std::move(e));
}

ExprPtr seq(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::Seq;
  e.items = std::move(items);
  return make(std::move(e));
}

ExprPtr alt(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items[0];
  Expr e;
  e.kind = Expr::Kind::Alt;
  e.items = std::move(items);
  return make(std::move(e));
}

ExprPtr repeat(ExprPtr item, int min, int max) {
  Expr e;
  e.kind = Expr::Kind::Repeat;
  e.items = {std::move(item)};
  e.min = min;
  e.max = max;
  return make(std::move(e));
}

// -------------------------------------------------------------------------------- GBNF

namespace {

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  GrammarSource parse() {
    GrammarSource out;
    skip_space(true);
    while (pos_ < text_.size()) {
      const std::string name = identifier();
      if (name.empty()) fail("expected a rule name");
      skip_space(false);
      if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      out.add(name, alternates(false));
      skip_space(true);
    }
    if (out.rules.empty()) fail("the grammar has no rules");
    return out;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    const size_t line = size_t(std::count(text_.begin(), text_.begin() + int64_t(std::min(pos_, text_.size())), '\n')) + 1;
    throw Error("grammar line " + std::to_string(line) + ": " + printable(what));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string identifier() {
    const size_t start = pos_;
    while (!at_end() && is_word(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // After a newline outside parentheses: does the rule go on (a continuation line or an
  // alternative starting with '|'), or does a new rule (or the end) start?
  bool rule_continues() {
    const size_t save = pos_;
    skip_space(true);
    bool goes_on = !at_end();
    if (goes_on) {
      const size_t word_start = pos_;
      identifier();
      if (pos_ > word_start) {
        skip_space(false);
        if (text_.substr(pos_, 3) == "::=") goes_on = false;
      }
    }
    pos_ = save;
    return goes_on;
  }

  ExprPtr alternates(bool nested) {
    std::vector<ExprPtr> options{sequence(nested)};
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      options.push_back(sequence(nested));
    }
    return alt(std::move(options));
  }

  ExprPtr sequence(bool nested) {
    std::vector<ExprPtr> items;
    for (;;) {
      skip_space(nested);
      if (at_end()) break;
      const char c = peek();
      if (c == '\n') {
        if (!rule_continues()) break;
        skip_space(true);
        continue;
      }
      if (c == ')' || c == '|') break;
      ExprPtr item;
      if (c == '"') {
        ++pos_;
        std::string bytes;
        while (!at_end() && peek() != '"') {
          if (peek() == '\n') fail("unterminated string literal");
          append_utf8(bytes, character());
        }
        if (at_end()) fail("unterminated string literal");
        ++pos_;
        item = bytes.empty() ? empty() : literal(bytes);
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (peek() == '^') {
          negate = true;
          ++pos_;
        }
        std::vector<std::pair<char32_t, char32_t>> ranges;
        while (!at_end() && peek() != ']') {
          const char32_t a = character();
          char32_t b = a;
          if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
            ++pos_;
            b = character();
          }
          if (b < a) fail("character range is backwards");
          ranges.push_back({a, b});
        }
        if (at_end()) fail("unterminated character class");
        ++pos_;
        item = char_class(std::move(ranges), negate);
      } else if (c == '.') {
        ++pos_;
        item = any_char();
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        item = alternates(true);
        skip_space(true);
        if (peek() != ')') fail("expected ')'");
        ++pos_;
      } else if (is_word(c)) {
        item = ref(identifier());
      } else {
        fail(std::string("unexpected character '") + c + "'");
      }
      // Postfix operators.
      for (;;) {
        const char op = peek();
        if (op == '*') {
          item = repeat(item, 0, -1);
        } else if (op == '+') {
          item = repeat(item, 1, -1);
        } else if (op == '?') {
          item = repeat(item, 0, 1);
        } else if (op == '{') {
          ++pos_;
          skip_space(false);
          const int lo = number();
          int hi = lo;
          skip_space(false);
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            hi = peek() == '}' ? -1 : number();
            skip_space(false);
          }
          if (peek() != '}') fail("expected '}'");
          if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
          item = repeat(item, lo, hi);
        } else {
          break;
        }
        ++pos_;
      }
      items.push_back(item);
    }
    if (items.empty()) return empty();
    return seq(std::move(items));
  }

  int number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 100000) fail("repetition count too large");
      ++pos_;
    }
    if (pos_ == start) fail("expected a number");
    return int(v);
  }

  char32_t hex(int digits) {
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("bad hex escape");
      v = v * 16 + char32_t(d);
      ++pos_;
    }
    return v;
  }

  // One character of a literal or class: an escape, or one UTF-8 sequence.
  char32_t character() {
    const unsigned char c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': return '\\';
        case '"': return '"';
        case '[': return '[';
        case ']': return ']';
        case '-': return '-';
        case '^': return '^';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) fail("invalid UTF-8 in the grammar");
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_ + i]) & 0x3F);
    pos_ += len;
    return cp;
  }

  void append_utf8(std::string& out, char32_t cp) {
    if (cp > 0x10FFFF) fail("code point out of range");
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }
};

// ------------------------------------------------------------------------------ lowering

// Byte-range sequences that spell exactly the UTF-8 encodings of the code points in [lo, hi]
// (both of the same encoded length, no surrogates).
void utf8_sequences(char32_t lo, char32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  auto length = [](char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; };
  const int n = length(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [n](char32_t c) {
    std::vector<uint8_t> b(static_cast<size_t>(n));
    if (n == 1) {
      b[0] = uint8_t(c);
    } else {
      for (int k = n - 1; k > 0; --k) {
        b[size_t(k)] = uint8_t(0x80 | (c & 0x3F));
        c >>= 6;
      }
      b[0] = uint8_t((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | c);
    }
    return b;
  };
  const auto a = encode(lo), b = encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> s;
  for (int k = 0; k < n; ++k) s.push_back({a[size_t(k)], b[size_t(k)]});
  out.push_back(std::move(s));
}

constexpr size_t kMaxSymbols = 4'000'000;

class Lowerer {
 public:
  explicit Lowerer(const GrammarSource& source) {
    for (const auto& [name, body] : source.rules) {
      if (index_.count(name)) throw Error("grammar: rule '" + printable(name) + "' is defined twice");
      index_[name] = int32_t(alts_.size());
      names_.push_back(name);
      alts_.emplace_back();
    }
    auto root = index_.find("root");
    if (root == index_.end()) throw Error("grammar: there is no rule named 'root'");
    root_ = root->second;
    for (size_t r = 0; r < source.rules.size(); ++r) alts_[r] = lower_alts(*source.rules[r].second, source.rules[r].first);
  }

  Grammar finish() {
    check_left_recursion();
    Grammar g;
    g.root = root_;
    g.rule_names = names_;
    g.rule_alternatives.resize(alts_.size());
    for (size_t r = 0; r < alts_.size(); ++r)
      for (const auto& a : alts_[r]) {
        g.rule_alternatives[r].push_back(int32_t(g.symbols.size()));
        g.symbols.insert(g.symbols.end(), a.begin(), a.end());
        g.symbols.push_back(Symbol{});
        if (g.symbols.size() > kMaxSymbols) throw Error("grammar: too large (over 4M symbols)");
      }
    return g;
  }

 private:
  using Alts = std::vector<std::vector<Symbol>>;
  std::map<std::string, int32_t> index_;
  std::vector<std::string> names_;
  std::vector<Alts> alts_;
  int32_t root_ = -1;
  std::map<std::vector<std::pair<char32_t, char32_t>>, int32_t> class_rules_;
  size_t symbol_count_ = 0;

  int32_t new_rule(const std::string& hint, Alts alts) {
    for (const auto& a : alts) symbol_count_ += a.size() + 1;
    if (symbol_count_ > kMaxSymbols) throw Error("grammar: too large (over 4M symbols)");
    const int32_t id = int32_t(alts_.size());
    names_.push_back(hint + "#" + std::to_string(id));
    alts_.push_back(std::move(alts));
    return id;
  }

  static Symbol rule_symbol(int32_t id) {
    Symbol s;
    s.kind = Symbol::Kind::Rule;
    s.id = id;
    return s;
  }

  Alts lower_alts(const Expr& e, const std::string& hint) {
    if (e.kind == Expr::Kind::Alt) {
      Alts out;
      for (const auto& item : e.items) {
        Alts sub = lower_alts(*item, hint);
        out.insert(out.end(), sub.begin(), sub.end());
      }
      return out;
    }
    std::vector<Symbol> s;
    lower_seq(e, hint, s);
    return {std::move(s)};
  }

  int32_t class_rule(const std::vector<std::pair<char32_t, char32_t>>& ranges) {
    auto it = class_rules_.find(ranges);
    if (it != class_rules_.end()) return it->second;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
    for (auto [a, b] : ranges) {
      // Split at encoded-length boundaries and around the surrogates (never valid UTF-8).
      const char32_t bounds[][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
      for (const auto& bd : bounds) {
        const char32_t lo = std::max(a, bd[0]), hi = std::min(b, bd[1]);
        if (lo <= hi) utf8_sequences(lo, hi, seqs);
      }
    }
    Alts alts;
    for (const auto& s : seqs) {
      std::vector<Symbol> syms;
      for (auto [lo, hi] : s) {
        Symbol sym;
        sym.kind = Symbol::Kind::Bytes;
        sym.lo = lo;
        sym.hi = hi;
        syms.push_back(sym);
      }
      alts.push_back(std::move(syms));
    }
    const int32_t id = new_rule("char", std::move(alts));  // an empty class has no alternative: matches nothing
    class_rules_[ranges] = id;
    return id;
  }

  // The expression as one symbol (a helper rule unless it is already one symbol).
  Symbol as_symbol(const Expr& e, const std::string& hint) {
    Alts alts = lower_alts(e, hint);
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return rule_symbol(new_rule(hint, std::move(alts)));
  }

  void lower_seq(const Expr& e, const std::string& hint, std::vector<Symbol>& out) {
    switch (e.kind) {
      case Expr::Kind::Empty: return;
      case Expr::Kind::Bytes: {
        Symbol s;
        s.kind = Symbol::Kind::Bytes;
        s.lo = e.lo;
        s.hi = e.hi;
        out.push_back(s);
        return;
      }
      case Expr::Kind::Token: {
        Symbol s;
        s.kind = Symbol::Kind::Token;
        s.id = e.token;
        out.push_back(s);
        return;
      }
      case Expr::Kind::Ref: {
        auto it = index_.find(e.rule);
        if (it == index_.end())
          throw Error("grammar: rule '" + printable(hint) + "' refers to undefined rule '" + printable(e.rule) + "'");
        out.push_back(rule_symbol(it->second));
        return;
      }
      case Expr::Kind::CodePoints: out.push_back(rule_symbol(class_rule(e.ranges))); return;
      case Expr::Kind::Seq:
        for (const auto& item : e.items) lower_seq(*item, hint, out);
        return;
      case Expr::Kind::Alt: out.push_back(rule_symbol(new_rule(hint, lower_alts(e, hint)))); return;
      case Expr::Kind::Repeat: {
        const Symbol s = as_symbol(*e.items[0], hint);
        for (int i = 0; i < e.min; ++i) out.push_back(s);
        if (e.max < 0) {
          // R ::= s R | (empty): right recursion, which the matcher runs in constant depth.
          const int32_t r = new_rule(hint, {});
          alts_[size_t(r)] = {{s, rule_symbol(r)}, {}};
          symbol_count_ += 4;
          out.push_back(rule_symbol(r));
        } else if (e.max > e.min) {
          // O_k ::= s O_{k-1} | (empty), O_1 ::= s | (empty).
          int32_t inner = new_rule(hint, {{s}, {}});
          for (int k = 2; k <= e.max - e.min; ++k) inner = new_rule(hint, {{s, rule_symbol(inner)}, {}});
          out.push_back(rule_symbol(inner));
        }
        return;
      }
    }
  }

  void check_left_recursion() {
    const size_t n = alts_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& a : alts_[r]) {
          const bool all = std::all_of(a.begin(), a.end(), [&](const Symbol& s) {
            return s.kind == Symbol::Kind::Rule && nullable[size_t(s.id)];
          });
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Left corners: the rules an alternative can start with without consuming anything.
    std::vector<std::vector<int32_t>> corners(n);
    for (size_t r = 0; r < n; ++r)
      for (const auto& a : alts_[r])
        for (const auto& s : a) {
          if (s.kind != Symbol::Kind::Rule) break;
          corners[r].push_back(s.id);
          if (!nullable[size_t(s.id)]) break;
        }
    std::vector<char> color(n, 0);
    std::function<void(int32_t)> visit = [&](int32_t r) {
      color[size_t(r)] = 1;
      for (int32_t c : corners[size_t(r)]) {
        if (color[size_t(c)] == 1)
          throw Error("grammar: rule '" + printable(names_[size_t(c)]) +
                      "' is left-recursive (it can reach itself without consuming input)");
        if (color[size_t(c)] == 0) visit(c);
      }
      color[size_t(r)] = 2;
    };
    for (size_t r = 0; r < n; ++r)
      if (color[r] == 0) visit(int32_t(r));
  }
};

}  // namespace

GrammarSource parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

Grammar lower(const GrammarSource& source) { return Lowerer(source).finish(); }

}  // namespace lumen::runtime
