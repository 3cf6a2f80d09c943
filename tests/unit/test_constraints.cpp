// Constrained decoding: GBNF parsing, JSON Schema compilation, and the token masks checked
// against an independent brute force (the language enumerated, prefixes compared).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "fake_tokenizer.h"
#include "runtime/json_schema.h"
#include "runtime/token_mask.h"

using namespace lumen;
using namespace lumen::runtime;
using lumen::test_support::FakeTokenizer;
using json = nlohmann::ordered_json;

namespace {

// Every string over `alphabet` of length 1..max_len (no duplicates), plus specials.
std::vector<FakeTokenizer::Entry> all_strings(const std::string& alphabet, int max_len) {
  std::vector<FakeTokenizer::Entry> out = {{"<pad>", true}, {"<eos>", true}, {"<bos>", true}};
  std::vector<std::string> level = {""};
  for (int len = 1; len <= max_len; ++len) {
    std::vector<std::string> next;
    for (const auto& s : level)
      for (char c : alphabet) next.push_back(s + c);
    for (const auto& s : next) out.push_back({s, false});
    level = next;
  }
  return out;
}

std::shared_ptr<CompiledGrammar> compile(const GrammarSource& g, const tokenizer::Tokenizer& t) {
  return std::make_shared<CompiledGrammar>(lower(g), std::make_shared<TokenTrie>(t));
}

bool bit(const std::vector<uint64_t>& m, int32_t id) { return (m[size_t(id) >> 6] >> (id & 63)) & 1; }

// Walks random allowed tokens and, at every step, compares the whole mask with the brute
// force over the enumerated language: token t is allowed iff text+t is a prefix of some
// sentence; the end token iff text is a sentence.
void check_against_language(const std::string& gbnf, const std::set<std::string>& language, const std::string& alphabet,
                            int max_token_len, int walks) {
  FakeTokenizer tok(all_strings(alphabet, max_token_len));
  auto grammar = compile(parse_gbnf(gbnf), tok);
  std::mt19937 rng(7);
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(grammar, {1});
    std::string text;
    for (int step = 0; step < 40; ++step) {
      std::vector<uint64_t> mask;
      const bool any = m.compute_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        bool expect = false;
        if (id == 1) {
          expect = language.count(text) > 0;
        } else if (!tok.is_special(id)) {
          const std::string next = text + tok.piece(id);
          for (const auto& s : language)
            if (s.compare(0, next.size(), next) == 0 && s.size() >= next.size()) {
              expect = true;
              break;
            }
        }
        ASSERT_EQ(bit(mask, id), expect) << "after '" << text << "' token '" << tok.piece(id) << "'";
        if (expect) allowed.push_back(id);
      }
      ASSERT_EQ(any, !allowed.empty());
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      if (pick == 1) break;
      ASSERT_TRUE(m.advance(pick));
      text += tok.piece(pick);
    }
  }
}

std::set<std::string> cross(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::set<std::string> out;
  for (const auto& x : a)
    for (const auto& y : b) out.insert(x + y);
  return out;
}

}  // namespace

TEST(Grammar, MasksEqualBruteForceOnAFiniteLanguage) {
  const std::string g = "root ::= ( \"ab\" | \"abc\" | \"b\" [xy]{1,2} ) end?\nend ::= \"!\" | \"!!\"\n";
  const auto language = cross({"ab", "abc", "bx", "by", "bxx", "bxy", "byx", "byy"}, {"", "!", "!!"});
  check_against_language(g, language, "abcxy!", 3, 60);
}

TEST(Grammar, MasksEqualBruteForceWithRecursionAndRepeats) {
  // Balanced parentheses up to depth 3 with an optional x inside each pair.
  const std::string g = "root ::= p\np ::= \"(\" \"x\"? ( q )? \")\"\nq ::= \"(\" \"x\"? ( r )? \")\"\nr ::= \"(\" \"x\"? \")\"\n";
  std::set<std::string> language;
  for (std::string r : {"()", "(x)"})
    for (std::string q : {std::string("()"), std::string("(x)"), "(" + r + ")", "(x" + r + ")"})
      for (std::string p : {std::string("()"), std::string("(x)"), "(" + q + ")", "(x" + q + ")"}) language.insert(p);
  check_against_language(g, language, "()x", 4, 80);
}

TEST(Grammar, MultiByteCharactersAcrossTokens) {
  // "é" is C3 A9: tokens that hold half of it must be allowed only in order.
  FakeTokenizer tok({{"<pad>", true}, {"<eos>", true}, {"<bos>", true}, {"\xC3", false}, {"\xA9", false},
                     {"\xC3\xA9", false}, {"a", false}, {"\xA9" "a", false}});
  GrammarSource g = parse_gbnf("root ::= [^a] \"a\"");
  auto grammar = compile(g, tok);
  GrammarMatcher m(grammar, {1});
  std::vector<uint64_t> mask;
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 3));
  EXPECT_TRUE(bit(mask, 5));
  EXPECT_FALSE(bit(mask, 4));  // a lone continuation byte
  EXPECT_FALSE(bit(mask, 6));  // 'a' is excluded
  ASSERT_TRUE(m.advance(3));
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 4));
  EXPECT_TRUE(bit(mask, 7));
  EXPECT_FALSE(bit(mask, 3));
  EXPECT_FALSE(bit(mask, 1));
  ASSERT_TRUE(m.advance(7));
  EXPECT_TRUE(m.must_end());
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 1));
  EXPECT_FALSE(bit(mask, 6));
}

TEST(Grammar, SpecialTokensAsTerminals) {
  FakeTokenizer tok({{"<pad>", true}, {"<eos>", true}, {"<q>", true}, {"a", false}, {"b", false}});
  GrammarSource g;
  g.add("root", seq({token(2), repeat(alt({literal("a"), literal("b")}), 0, -1), token(2)}));
  auto grammar = compile(g, tok);
  GrammarMatcher m(grammar, {1});
  std::vector<uint64_t> mask;
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 2));
  EXPECT_FALSE(bit(mask, 3));
  ASSERT_TRUE(m.advance(2));
  ASSERT_TRUE(m.advance(3));
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 2) && bit(mask, 3) && bit(mask, 4));
  EXPECT_FALSE(m.advance(0));
  ASSERT_TRUE(m.advance(2));
  EXPECT_TRUE(m.must_end());
}

// A vocabulary may keep a token the grammar names as a terminal, or an end token, as ordinary
// text (Gemma 4's GGUF has <|tool_call> and <|"|> as user-defined tokens): the mask and
// advance() must both take such a token only whole, never through its bytes.
TEST(Grammar, TerminalsAndEndTokensThatAreOrdinaryTextAreTakenWhole) {
  FakeTokenizer tok({{"<pad>", true}, {"<e>", false}, {"<q>", false}, {"a", false}, {"<", false}, {">", false},
                     {"q", false}, {"!", false}});
  GrammarSource g;
  // A "string" between <q> tokens whose content may hold '<', 'q' and '>', then "!".
  g.add("root", seq({token(2), repeat(char_class({{'<', '<'}, {'>', '>'}, {'a', 'a'}, {'q', 'q'}}), 0, -1), token(2),
                     literal("!")}));
  auto grammar = compile(g, tok);
  GrammarMatcher m(grammar, {1});
  std::vector<uint64_t> mask;
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 2));
  EXPECT_FALSE(bit(mask, 1)) << "the end token before the grammar is complete";
  ASSERT_TRUE(m.advance(2));
  ASSERT_TRUE(m.advance(3));
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 2) && bit(mask, 4) && bit(mask, 6));
  EXPECT_FALSE(bit(mask, 1)) << "'<e>' spells content bytes, but it is the end token";
  EXPECT_FALSE(m.advance(1));
  ASSERT_TRUE(m.advance(2)) << "<q> closes the string: it is not the bytes '<', 'q', '>'";
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 7));
  EXPECT_FALSE(bit(mask, 2) || bit(mask, 1));
  ASSERT_TRUE(m.advance(7));
  EXPECT_TRUE(m.must_end());
  ASSERT_TRUE(m.compute_mask(mask));
  EXPECT_TRUE(bit(mask, 1));
  EXPECT_TRUE(m.advance(1));
}

TEST(Grammar, DeadEndIsReported) {
  FakeTokenizer tok({{"<pad>", true}, {"<eos>", true}, {"a", false}});
  auto grammar = compile(parse_gbnf("root ::= \"a\" \"q\""), tok);
  GrammarMatcher m(grammar, {1});
  std::vector<uint64_t> mask;
  ASSERT_TRUE(m.compute_mask(mask));
  ASSERT_TRUE(m.advance(2));
  EXPECT_FALSE(m.compute_mask(mask));  // no token spells "q", and the grammar is not complete
  EXPECT_FALSE(m.can_end());
}

TEST(Grammar, GbnfSyntaxAndErrors) {
  // llama.cpp's examples: comments, multi-line alternatives, classes, repetition counts.
  const auto g = parse_gbnf(
      "# a comment\n"
      "root   ::= item (\",\" item){0,3}   # trailing comment\n"
      "item ::= [a-z]+\n"
      "       | \"\\x41\" [^\\n\"]? \n"
      "       | ( \"n\" \"o\" )*\n");
  EXPECT_EQ(g.rules.size(), 2u);
  EXPECT_NO_THROW(lower(g));
  auto error_of = [](const std::string& text) {
    try {
      lower(parse_gbnf(text));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("root ::= \"a"), "grammar line 1: unterminated string literal");
  EXPECT_EQ(error_of("root ::= a\n"), "grammar: rule 'root' refers to undefined rule 'a'");
  EXPECT_EQ(error_of("item ::= \"a\""), "grammar: there is no rule named 'root'");
  EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""),
            "grammar: rule 'root' is left-recursive (it can reach itself without consuming input)");
  EXPECT_EQ(error_of("root ::= \"a\"\n\nroot ::= \"b\""), "grammar: rule 'root' is defined twice");
  EXPECT_EQ(error_of("root ::= [b-a]"), "grammar line 1: character range is backwards");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "grammar line 1: repetition {m,n} with n < m");
  EXPECT_EQ(error_of("root ::= (\"a\"\n"), "grammar line 2: expected ')'");
}

namespace {

// A vocabulary with JSON-ish multi-character pieces so masks cross token boundaries.
FakeTokenizer json_vocabulary() {
  std::vector<FakeTokenizer::Entry> e = {{"<pad>", true}, {"<eos>", true}, {"<bos>", true}, {"<|\"|>", true}};
  for (int c = 0x20; c < 0x7F; ++c) e.push_back({std::string(1, char(c)), false});
  for (const char* p : {"{\"", "\":", "\",", "\"}", "true", "false", "null", ", \"", "\": ", "12", "0.", "e+", "]}",
                        "[\"", "\"]", "é", "\xE2\x82", "\xAC", "\\u00", "name", "2024-", "-0", "},{"})
    e.push_back({p, false});
  return FakeTokenizer(e);
}

// Random masked walk to the end; returns the text (fails the test if it runs out of steps).
std::string random_output(const std::shared_ptr<CompiledGrammar>& grammar, const FakeTokenizer& tok, uint32_t seed) {
  GrammarMatcher m(grammar, {1});
  std::mt19937 rng(seed);
  std::string text;
  for (int step = 0; step < 3000; ++step) {
    std::vector<uint64_t> mask;
    EXPECT_TRUE(m.compute_mask(mask)) << "dead end after '" << text << "'";
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < tok.vocab_size(); ++id)
      if (bit(mask, id)) allowed.push_back(id);
    if (allowed.empty()) return text;
    // Prefer ending once possible, so bounded outputs stay short.
    int32_t pick = allowed[rng() % allowed.size()];
    if (m.can_end() && rng() % 4 == 0) pick = 1;
    if (pick == 1) {
      EXPECT_TRUE(m.can_end());
      return text;
    }
    EXPECT_TRUE(m.advance(pick));
    text += tok.piece(pick);
  }
  ADD_FAILURE() << "no end after 3000 tokens: " << text.substr(0, 200);
  return text;
}

}  // namespace

TEST(JsonSchema, RandomWalksProduceValidDocuments) {
  const json schema = json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 6},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3, null]}, "minItems": 1, "maxItems": 3},
      "when": {"type": "string", "format": "date"},
      "kind": {"const": "x"},
      "nested": {"type": "object", "properties": {"ok": {"type": "boolean"}, "v": {"type": ["number", "null"]}},
                 "required": ["ok"], "additionalProperties": false},
      "either": {"anyOf": [{"type": "string", "maxLength": 2}, {"$ref": "#/$defs/point"}]}
    },
    "required": ["name", "tags", "kind"],
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}
  })");
  FakeTokenizer tok = json_vocabulary();
  auto grammar = compile(json_schema_grammar(schema), tok);
  for (uint32_t seed = 0; seed < 40; ++seed) {
    const std::string text = random_output(grammar, tok, seed);
    json doc;
    ASSERT_NO_THROW(doc = json::parse(text)) << text;
    ASSERT_TRUE(doc.is_object()) << text;
    ASSERT_TRUE(doc["name"].is_string());
    EXPECT_LE(doc["name"].get<std::string>().size(), 6u * 4);
    ASSERT_TRUE(doc["tags"].is_array());
    EXPECT_GE(doc["tags"].size(), 1u);
    EXPECT_LE(doc["tags"].size(), 3u);
    EXPECT_EQ(doc["kind"], "x");
    if (doc.contains("age")) {
      EXPECT_TRUE(doc["age"].is_number_integer()) << text;
    }
    if (doc.contains("nested")) {
      EXPECT_TRUE(doc["nested"]["ok"].is_boolean()) << text;
    }
    if (doc.contains("either")) {
      EXPECT_TRUE(doc["either"].is_string() || doc["either"]["x"].is_number()) << text;
    }
    if (doc.contains("when")) {
      EXPECT_EQ(doc["when"].get<std::string>().size(), 10u) << text;
    }
    for (auto it = doc.begin(); it != doc.end(); ++it)
      EXPECT_TRUE(schema["properties"].contains(it.key())) << it.key();
  }
}

TEST(JsonSchema, JsonObjectModeAcceptsOnlyObjects) {
  FakeTokenizer tok = json_vocabulary();
  auto grammar = compile(json_object_grammar(), tok);
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::string text = random_output(grammar, tok, seed);
    json doc;
    ASSERT_NO_THROW(doc = json::parse(text)) << text;
    EXPECT_TRUE(doc.is_object());
  }
}

TEST(JsonSchema, GemmaArgumentSpelling) {
  const json schema = json::parse(R"({"type":"object","properties":{"city":{"type":"string"},
      "unit":{"enum":["c","f"]},"n":{"type":"integer"}},"required":["city","unit"]})");
  FakeTokenizer tok = json_vocabulary();
  JsonGrammarOptions o;
  o.dialect = JsonDialect::Gemma4Args;
  o.quote_token = 3;
  auto grammar = compile(json_schema_grammar(schema, o), tok);
  GrammarMatcher m(grammar, {1});
  for (const char* piece : {"{", "c", "i", "t", "y", ":"}) ASSERT_TRUE(m.advance(*tok.piece_id(piece))) << piece;
  ASSERT_TRUE(m.advance(3));
  for (const char* piece : {"P", "a", "r", "i", "s"}) ASSERT_TRUE(m.advance(*tok.piece_id(piece)));
  EXPECT_TRUE(m.advance(*tok.piece_id("\"")));  // a plain quote is string content in this dialect
  ASSERT_TRUE(m.advance(3));
  for (const char* piece : {",", "u", "n", "i", "t", ":"}) ASSERT_TRUE(m.advance(*tok.piece_id(piece))) << piece;
  ASSERT_TRUE(m.advance(3));
  EXPECT_FALSE(m.advance(*tok.piece_id("x")));
  ASSERT_TRUE(m.advance(*tok.piece_id("f")));
  ASSERT_TRUE(m.advance(3));
  ASSERT_TRUE(m.advance(*tok.piece_id("}")));
  EXPECT_TRUE(m.must_end());
}

TEST(JsonSchema, UnsupportedPartsNameTheirPath) {
  auto error_of = [](const char* schema) {
    try {
      json_schema_grammar(json::parse(schema));
    } catch (const SchemaError& e) {
      return e.path + " | " + e.what();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(R"({"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}})"),
            "#/properties/a/pattern | schema at #/properties/a/pattern: 'pattern' is not supported");
  EXPECT_EQ(error_of(R"({"type":"array","items":{"type":"integer","minimum":3}})"),
            "#/items/minimum | schema at #/items/minimum: 'minimum' is not supported");
  EXPECT_EQ(error_of(R"({"oneOf":[{"type":"string"}]})"), "#/oneOf | schema at #/oneOf: 'oneOf' is not supported");
  EXPECT_EQ(error_of(R"({"type":"strin"})"), "#/type | schema at #/type: unknown type 'strin'");
  EXPECT_EQ(error_of(R"({"$ref":"#/$defs/missing"})"),
            "#/$ref | schema at #/$ref: reference '#/$defs/missing' does not resolve");
  EXPECT_EQ(error_of(R"({"type":"string","format":"hostname"})"),
            "#/format | schema at #/format: string format 'hostname' is not supported (date, time, date-time, uuid, "
            "ipv4, email are)");
  EXPECT_EQ(error_of(R"({"type":"array","minItems":3,"maxItems":2})"), "# | schema at #: maxItems is below minItems");
}

TEST(TokenTrie, ContextCacheIsReusedAcrossSteps) {
  FakeTokenizer tok = json_vocabulary();
  auto grammar = compile(json_schema_grammar(json::parse(R"({"type":"string"})")), tok);
  GrammarMatcher m(grammar, {1});
  std::vector<uint64_t> mask;
  ASSERT_TRUE(m.advance(*tok.piece_id("\"")));
  ASSERT_TRUE(m.compute_mask(mask));
  const size_t after_first = grammar->contexts_computed();
  for (const char* p : {"a", "b", "name", "c"}) {
    ASSERT_TRUE(m.advance(*tok.piece_id(p)));
    ASSERT_TRUE(m.compute_mask(mask));
  }
  // Inside a string the state repeats: no new context is classified.
  EXPECT_EQ(grammar->contexts_computed(), after_first);
  EXPECT_TRUE(bit(mask, *tok.piece_id("\"}")) == false);
  EXPECT_TRUE(bit(mask, *tok.piece_id("\"")));
}
