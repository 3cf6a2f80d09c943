// Grammars for constrained decoding: a context-free grammar whose terminals are byte ranges
// (UTF-8 is spelled out byte by byte) and whole special tokens. Built from llama.cpp's GBNF
// text (parse_gbnf) or from expressions (json_schema.cpp), then lowered to plain rules with
// alternatives of symbols, which the matcher (token_mask.h) walks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lumen::runtime {

// ----------------------------------------------------------------------------- expressions

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind { Empty, Bytes, CodePoints, Token, Ref, Seq, Alt, Repeat };
  Kind kind = Kind::Empty;
  uint8_t lo = 0, hi = 0;                          // Bytes: one byte in [lo, hi]
  std::vector<std::pair<char32_t, char32_t>> ranges;  // CodePoints: one character in any range
  int32_t token = -1;                              // Token: that special token
  std::string rule;                                // Ref: a rule by name
  std::vector<ExprPtr> items;                      // Seq / Alt
  int min = 0, max = -1;                           // Repeat of items[0]; max -1 = unbounded
};

ExprPtr empty();
ExprPtr literal(std::string_view bytes);  // the bytes, in order
ExprPtr byte_range(uint8_t lo, uint8_t hi);
// One character (UTF-8) in any of the ranges; `negate` takes the complement in U+0000..U+10FFFF.
ExprPtr char_class(std::vector<std::pair<char32_t, char32_t>> ranges, bool negate = false);
ExprPtr any_char();
ExprPtr token(int32_t id);
ExprPtr ref(std::string rule);
ExprPtr seq(std::vector<ExprPtr> items);
ExprPtr alt(std::vector<ExprPtr> items);
ExprPtr repeat(ExprPtr item, int min, int max);  // max -1 = unbounded
inline ExprPtr optional(ExprPtr item) { return repeat(std::move(item), 0, 1); }

// Named rules of expressions; the root is the rule named "root".
struct GrammarSource {
  std::vector<std::pair<std::string, ExprPtr>> rules;
  void add(std::string name, ExprPtr body) { rules.emplace_back(std::move(name), std::move(body)); }
};

// llama.cpp's GBNF: `name ::= alternatives`, "literals" with \n \t \r \\ \" \xHH \uHHHH
// \UHHHHHHHH escapes, [character classes] (ranges, ^ negation), `.`, ( groups ), * + ?
// {m} {m,} {m,n}, # comments. Throws lumen::Error "grammar line L: ..." on a syntax error.
GrammarSource parse_gbnf(std::string_view text);

// ------------------------------------------------------------------------ lowered grammar

struct Symbol {
  enum class Kind : uint8_t { Bytes, Token, Rule, End };
  Kind kind = Kind::End;
  uint8_t lo = 0, hi = 0;
  int32_t id = -1;  // Token: token id; Rule: rule index
};

// Every alternative of every rule laid out in one array of positions; each alternative ends
// with an End symbol. A position is an index into `symbols`.
struct Grammar {
  std::vector<Symbol> symbols;
  std::vector<std::string> rule_names;
  std::vector<std::vector<int32_t>> rule_alternatives;  // rule -> start positions
  int32_t root = -1;
};

// Lowers the rules (repetitions and groups become helper rules, characters become UTF-8
// byte sequences). Throws lumen::Error naming the rule for an undefined reference, a missing
// root, a left-recursive rule (the matcher would loop), or a grammar too large to run.
Grammar lower(const GrammarSource& source);

}  // namespace lumen::runtime
