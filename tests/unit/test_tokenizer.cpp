// Tokenizer layer: BPE merge order, byte fallback, added/special tokens, decoding and the
// UTF-8-safe stream decoder on small hand-made vocabularies (tokenizer.json and GGUF
// metadata) whose answers are worked out by hand; the Gemma 3 and Gemma 4 chat formats byte
// for byte; and one-line errors for malformed tokenizer files and invalid UTF-8.
// (Parity with the real 262144-entry vocabularies: tests/parity/test_tokenizer_*.py.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "test_helpers.h"
#include "formats/gguf.h"
#include "spec/model_spec.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace lumen::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_dir() {
  return test_support::process_temp_dir("lumen-tokenizer-test-");
}

fs::path write_temp_file(const std::string& name, const std::string& bytes) {
  const fs::path path = temp_dir() / name;
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

constexpr int32_t kByte0 = 15;  // id of "<0x00>"; byte b is kByte0 + b
int32_t byte_id(unsigned char b) { return kByte0 + b; }

// pad eos bos unk <start_of_turn> <end_of_turn> ▁ a b c ab bc abc ▁a \n <0x00>..<0xFF> aa
// <|turn> <turn|>; merges by rank: b+c, a+b, a+bc, ▁+a, a+a.
json small_tokenizer_json() {
  std::vector<std::string> vocab = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\u2581",
                                    "a", "b", "c", "ab", "bc", "abc", "\u2581a", "\n"};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab.push_back(name);
  }
  vocab.push_back("aa");       // 271
  vocab.push_back("<|turn>");  // 272
  vocab.push_back("<turn|>");  // 273
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  json added = json::array();
  for (auto [id, special] : std::vector<std::pair<int, bool>>{{0, true}, {1, true}, {2, true}, {3, true}, {4, true},
                                                               {5, true}, {272, true}, {273, true}}) {
    added.push_back({{"id", id}, {"content", vocab[size_t(id)]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", special}});
  }
  added.push_back({{"id", 274}, {"content", "<extra>"}, {"normalized", false}, {"special", false}});
  return {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}},
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
        {"vocab", v},
        {"merges", json::array({json::array({"b", "c"}), "a b", json::array({"a", "bc"}), json::array({"\u2581", "a"}),
                                json::array({"a", "a"})})}}},
  };
}

const Tokenizer& small() {
  static const std::unique_ptr<Tokenizer> tok =
      load_hf_tokenizer(write_temp_file("small_tokenizer.json", small_tokenizer_json().dump()).string());
  return *tok;
}

using Ids = std::vector<int32_t>;

TEST(Tokenizer, MergesApplyLowestRankFirst) {
  EXPECT_EQ(small().encode("abc"), Ids({12}));     // b+c (rank 0), then a+bc
  EXPECT_EQ(small().encode("ab"), Ids({10}));
  EXPECT_EQ(small().encode(" abc"), Ids({6, 12}));  // ▁+a (rank 3) loses to b+c then a+bc
  EXPECT_EQ(small().encode(" a"), Ids({13}));
  EXPECT_EQ(small().encode("aaa"), Ids({271, 7}));  // equal ranks: leftmost first
  EXPECT_EQ(small().encode("a\nb"), Ids({7, 14, 8}));
  EXPECT_EQ(small().encode(""), Ids({}));
}

TEST(Tokenizer, ByteFallbackForCharactersOutsideTheVocabulary) {
  EXPECT_EQ(small().encode("\xc3\xbc"), Ids({byte_id(0xc3), byte_id(0xbc)}));  // ü
  EXPECT_EQ(small().encode("a\xf0\x9f\x98\x80"), Ids({7, byte_id(0xf0), byte_id(0x9f), byte_id(0x98), byte_id(0x80)}));
}

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  EXPECT_EQ(small().encode("<bos>ab<end_of_turn>"), Ids({2, 10, 5}));
  EXPECT_EQ(small().encode("<|turn>a<turn|>"), Ids({272, 7, 273}));
  Ids plain;
  for (unsigned char c : std::string("<bos>")) plain.push_back(c == 'b' ? 8 : byte_id(c));
  plain.push_back(10);
  EXPECT_EQ(small().encode("<bos>ab", false), plain);
  // A non-special added token stays whole either way (as tokenizers does).
  EXPECT_EQ(small().encode("a<extra>", false), Ids({7, 274}));
  EXPECT_TRUE(small().is_special(2));
  EXPECT_FALSE(small().is_special(274));
  EXPECT_FALSE(small().is_special(7));
}

TEST(Tokenizer, DecodeAndPieces) {
  EXPECT_EQ(small().decode(Ids{6, 12}), " abc");
  EXPECT_EQ(small().decode(Ids{2, 10, 5}), "<bos>ab<end_of_turn>");
  EXPECT_EQ(small().decode(Ids{2, 10, 5}, true), "ab");
  EXPECT_EQ(small().decode(Ids{byte_id(0xc3), byte_id(0xbc), 7}), "\xc3\xbc" "a");
  EXPECT_EQ(small().decode(Ids{byte_id(0xc3), 7}), "\xef\xbf\xbd" "a");  // a lone lead byte: U+FFFD
  EXPECT_EQ(small().token_bytes(13), " a");
  EXPECT_EQ(small().token_bytes(byte_id(0xc3)), "\xc3");
  EXPECT_EQ(small().piece(13), "\u2581a");
  EXPECT_EQ(small().piece_id("<start_of_turn>"), 4);
  EXPECT_EQ(small().piece_id("abc"), 12);
  EXPECT_EQ(small().piece_id("zzz"), std::nullopt);
  EXPECT_EQ(small().vocab_size(), 275);
  EXPECT_EQ(small().bos_id(), 2);
  EXPECT_EQ(small().eos_id(), 1);
  EXPECT_EQ(small().pad_id(), 0);
  EXPECT_EQ(small().kind(), "hf-bpe");
  EXPECT_THROW(small().decode(Ids{275}), Error);
  EXPECT_THROW(small().piece(-1), Error);
}

TEST(Tokenizer, LongRunsStayLinear) {
  const Ids spaces = small().encode(std::string(100000, ' '));
  ASSERT_EQ(spaces.size(), 100000u);
  EXPECT_EQ(spaces.front(), 6);
  const Ids word = small().encode(std::string(50001, 'a'));
  ASSERT_EQ(word.size(), 25001u);
  EXPECT_EQ(word.back(), 7);
}

TEST(Tokenizer, InvalidUtf8IsOneLineError) {
  for (const std::string& bad : {std::string("ab\xff"), std::string("a\xc3"), std::string("\xed\xa0\x80"),
                                 std::string("\xc0\xaf"), std::string("ok\xf4\x90\x80\x80")}) {
    try {
      small().encode(bad);
      FAIL() << "accepted invalid UTF-8";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("input text: invalid UTF-8 at byte ", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos);
    }
  }
  try {
    small().encode("ab\xff");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "input text: invalid UTF-8 at byte 2");
  }
}

TEST(StreamDecoder, HoldsIncompleteCharacters) {
  StreamDecoder stream(small());
  EXPECT_EQ(stream.push(6), " ");
  EXPECT_EQ(stream.push(byte_id(0xf0)), "");
  EXPECT_EQ(stream.push(byte_id(0x9f)), "");
  EXPECT_EQ(stream.push(byte_id(0x98)), "");
  EXPECT_EQ(stream.push(byte_id(0x80)), "\xf0\x9f\x98\x80");
  EXPECT_EQ(stream.push(2), "");  // special, skipped
  EXPECT_EQ(stream.push(12), "abc");
  EXPECT_EQ(stream.push(byte_id(0xc3)), "");
  EXPECT_EQ(stream.flush(), "\xef\xbf\xbd");
  EXPECT_EQ(stream.push(byte_id(0xc3)), "");
  EXPECT_EQ(stream.push(7), "\xef\xbf\xbd" "a");  // the held byte could not continue
  EXPECT_EQ(stream.flush(), "");
  StreamDecoder with_special(small(), false);
  EXPECT_EQ(with_special.push(2), "<bos>");
  EXPECT_THROW(with_special.push(9999), Error);
}

// --- malformed tokenizer.json -----------------------------------------------------------

void expect_load_error(const std::string& name, const std::string& content, const std::string& fragment) {
  const fs::path path = write_temp_file(name, content);
  try {
    load_hf_tokenizer(path.string());
    FAIL() << name << ": loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path.string() + ": ", 0), 0u) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(TokenizerJson, MalformedFilesAreOneLineErrors) {
  expect_load_error("notjson.json", "{\"model\": [1, 2", "not valid JSON");
  expect_load_error("array.json", "[1, 2]", "expected a JSON object");
  expect_load_error("nomodel.json", "{}", "model: missing");
  json j = small_tokenizer_json();
  j["model"]["type"] = "Unigram";
  expect_load_error("unigram.json", j.dump(), "model.type: 'Unigram' is not supported");
  j = small_tokenizer_json();
  j["model"]["merges"].push_back("a zz");
  expect_load_error("badmerge.json", j.dump(), "model.merges[5]");
  j = small_tokenizer_json();
  j["model"]["merges"].push_back("a b c");
  expect_load_error("threemerge.json", j.dump(), "not two tokens");
  j = small_tokenizer_json();
  j["model"]["vocab"]["zz"] = 100000;
  expect_load_error("gap.json", j.dump(), "ids must be dense");
  j = small_tokenizer_json();
  j["model"]["vocab"]["a"] = "seven";
  expect_load_error("strid.json", j.dump(), "is not an integer");
  j = small_tokenizer_json();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_load_error("nfkc.json", j.dump(), "normalizer 'NFKC' is not supported");
  j = small_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
  expect_load_error("regex.json", j.dump(), "pre_tokenizer.pattern");
  j = small_tokenizer_json();
  j["added_tokens"][0]["id"] = "zero";
  expect_load_error("addedid.json", j.dump(), "added_tokens[0].id");
  j = small_tokenizer_json();
  j["model"]["unk_token"] = "<nope>";
  expect_load_error("unk.json", j.dump(), "unk_token '<nope>' is not in the vocabulary");
  j = small_tokenizer_json();  // a Strip count beyond any token is refused, not narrowed to int
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 4294967297ull}, {"stop", 0}};
  expect_load_error("strip.json", j.dump(), "start and stop must be counts");
  try {
    load_hf_tokenizer((temp_dir() / "missing.json").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

TEST(TokenizerFiles, LoadTokenizerPicksTheLoader) {
  const fs::path dir = temp_dir() / "model-dir";
  fs::create_directories(dir);
  // Written here, not copied from another test's file: CTest runs each test in its own process.
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << small_tokenizer_json().dump();
  EXPECT_EQ(load_tokenizer(dir.string())->encode("abc"), Ids({12}));
  EXPECT_NE(find_tokenizer(dir.string()), nullptr);
  EXPECT_EQ(find_tokenizer(temp_dir().string() + "/nowhere"), nullptr);
  EXPECT_THROW(load_tokenizer((temp_dir() / "nowhere").string()), Error);
  EXPECT_THROW(load_tokenizer(write_temp_file("weights.bin", "xyz").string()), Error);
}

// --- SentencePiece ----------------------------------------------------------------------

TEST(SentencePiece, MalformedModelsAreOneLineErrors) {
  for (const std::string& bytes : {std::string(), std::string("not a protobuf at all \xff\xff\xff"), std::string(64, '\0')}) {
    try {
      load_sentencepiece_bytes(bytes, "bad.model");
      FAIL() << "loaded " << bytes.size() << " bytes";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("bad.model: ", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  const fs::path garbage = write_temp_file("garbage.model", "\x0a\x05hello\x12");
  EXPECT_THROW(load_sentencepiece(garbage.string()), Error);
  EXPECT_THROW(load_sentencepiece((temp_dir() / "none.model").string()), Error);
}

// A model trained by the sentencepiece package with five normalization rules (A->a, B->b,
// fullwidth A->a, fullwidth B->bb, circled 1->1): its precompiled character map is a real
// 256-unit darts trie. Ids as the sentencepiece package gives them.
std::string rules_model_bytes() {
  std::ifstream in(fs::path(LUMEN_TEST_DATA_DIR) / "sentencepiece-rules.model", std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SentencePiece, PrecompiledCharsMapNormalizes) {
  const std::string bytes = rules_model_bytes();
  ASSERT_FALSE(bytes.empty());
  const auto tok = load_sentencepiece_bytes(bytes, "rules.model");
  EXPECT_EQ(tok->encode("AB \uFF21\uFF22 \u2460 x"), Ids({3, 19, 7, 3, 19, 7, 7, 3, 24, 3, 14}));
}

TEST(SentencePiece, BrokenCharsMapsAreRefusedBeforeTheLibraryReadsThem) {
  const std::string good = rules_model_bytes();
  // normalizer_spec.precompiled_charsmap: tag 0x12, length 1037 (varint 0x8d 0x08), then a
  // 4-byte trie size (1024) and the trie.
  const size_t at = good.find("\x12\x8d\x08");
  ASSERT_NE(at, std::string::npos);
  const size_t blob = at + 3;
  auto put32 = [](std::string& s, size_t pos, uint32_t v) { std::memcpy(s.data() + pos, &v, 4); };
  auto refused = [](const std::string& bytes) {
    try {
      load_sentencepiece_bytes(bytes, "bad.model");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  std::string short_trie = good;  // a 3-byte trie: no unit at all (the fuzzer's crash)
  put32(short_trie, blob, 3);
  EXPECT_NE(refused(short_trie).find("bad.model: normalizer_spec.precompiled_charsmap: has an empty trie"),
            std::string::npos) << refused(short_trie);
  std::string far_root = good;  // the root's children far outside the trie
  put32(far_root, blob + 4, 0xfffffc00u);
  EXPECT_NE(refused(far_root).find("trie transition outside its 256 units"), std::string::npos) << refused(far_root);
  std::string oversized = good;  // a trie larger than the blob
  put32(oversized, blob, 5000);
  EXPECT_NE(refused(oversized).find("claims a 5000-byte trie"), std::string::npos) << refused(oversized);
  // A replacement offset past the strings: every leaf's value unit set to a huge offset.
  std::string far_value = good;
  int changed = 0;
  for (size_t u = 0; u < 256; ++u) {
    uint32_t unit;
    std::memcpy(&unit, far_value.data() + blob + 4 + 4 * u, 4);
    const bool leaf = (unit >> 8) & 1u;
    if (!leaf) continue;
    const uint32_t offset = (unit >> 10) << ((unit & (1u << 9)) >> 6);
    // The leaf's value sits at (this unit's index) ^ offset; the label of a leaf child is 0.
    const size_t value_unit = u ^ offset;
    if (value_unit < 256) {
      put32(far_value, blob + 4 + 4 * value_unit, 0x7ffffff0u);
      ++changed;
    }
  }
  ASSERT_GT(changed, 0);
  EXPECT_NE(refused(far_value).find("has a replacement at byte"), std::string::npos) << refused(far_value);
  for (const auto& entry : fs::directory_iterator(LUMEN_TEST_DATA_DIR))
    if (entry.path().extension() == ".model") {
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string model(std::istreambuf_iterator<char>(in), {});
      EXPECT_NO_THROW(load_sentencepiece_bytes(model, entry.path().string()));
    }
}

// --- GGUF metadata --------------------------------------------------------------------

formats::GgufTokenizerData gguf_data(std::vector<std::string_view> tokens, std::vector<int32_t> types) {
  formats::GgufTokenizerData d;
  d.model = "llama";
  d.architecture = "gemma3";
  d.tokens = std::move(tokens);
  d.token_type = std::move(types);
  d.scores.assign(d.tokens.size(), 0.0f);
  d.bos_id = 2;
  d.eos_id = 1;
  d.unk_id = 3;
  d.pad_id = 0;
  return d;
}

TEST(GgufTokenizer, MergesFollowFilePositionAndBlankTokensAreRespelled) {
  // "ab" before "bc": a+b outranks b+c, so "abc" (not a token) is ab|c.
  const auto ab_first = load_gguf_tokenizer(
      gguf_data({"<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "c", "ab", "bc", "  ", "\u2581", "<start_of_turn>", "\n"},
                {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 4}),
      "first.gguf");
  EXPECT_EQ(ab_first->encode("abc"), Ids({7, 6}));
  EXPECT_EQ(ab_first->encode("  "), Ids({9}));  // "  " is looked up as "▁▁"
  EXPECT_EQ(ab_first->piece(9), "\u2581\u2581");
  EXPECT_EQ(ab_first->decode(Ids{9, 4}), "  a");
  EXPECT_EQ(ab_first->encode("<start_of_turn>a\n\n"), Ids({11, 4, 12, 12}));
  EXPECT_TRUE(ab_first->is_special(11));
  EXPECT_FALSE(ab_first->is_special(12));
  EXPECT_EQ(ab_first->encode("xy"), Ids({3}));  // no byte tokens: one fused <unk>
  EXPECT_EQ(ab_first->kind(), "gguf-gemma");
  const auto bc_first = load_gguf_tokenizer(
      gguf_data({"<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "c", "bc", "ab"}, {3, 3, 3, 3, 1, 1, 1, 1, 1}), "second.gguf");
  EXPECT_EQ(bc_first->encode("abc"), Ids({4, 7}));
}

TEST(GgufTokenizer, UnsupportedModelsAreRefused) {
  auto data = gguf_data({"<pad>", "<eos>", "<bos>", "<unk>", "a"}, {3, 3, 3, 3, 1});
  data.model = "gpt2";
  try {
    load_gguf_tokenizer(data, "x.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("x.gguf: tokenizer.ggml.model: 'gpt2'", 0), 0u) << e.what();
  }
  data.model = "llama";
  data.architecture = "llama";
  EXPECT_THROW(load_gguf_tokenizer(data, "x.gguf"), Error);
}

// --- chat formats ---------------------------------------------------------------------

std::vector<ChatMessage> messages(std::initializer_list<std::pair<const char*, const char*>> list) {
  std::vector<ChatMessage> out;
  for (auto [role, content] : list) out.push_back({role, content});
  return out;
}

TEST(ChatFormat, Gemma4) {
  EXPECT_EQ(render_chat(ChatFormat::Gemma4, messages({{"user", " Hi "}})),
            "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  ChatOptions thinking;
  thinking.thinking = true;
  EXPECT_EQ(render_chat(ChatFormat::Gemma4, messages({{"system", " Be exact. "}, {"user", " Solve it. "}}), thinking),
            "<bos><|turn>system\n<|think|>\nBe exact.<turn|>\n<|turn>user\nSolve it.<turn|>\n<|turn>model\n");
  EXPECT_EQ(render_chat(ChatFormat::Gemma4, messages({{"user", "q"}}), thinking),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nq<turn|>\n<|turn>model\n");
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(render_chat(ChatFormat::Gemma4,
                        messages({{"system", "S"}, {"user", "look"}, {"assistant", " done\n"}, {"user", "\u3000more"}}),
                        no_prompt),
            "<bos><|turn>system\nS<turn|>\n<|turn>user\nlook<turn|>\n<|turn>model\ndone<turn|>\n<|turn>user\nmore<turn|>\n");
  EXPECT_EQ(render_chat(ChatFormat::Gemma4, {}), "<bos><|turn>model\n<|channel>thought\n<channel|>");
  // A system message later on is a turn of its own, as the template writes it.
  EXPECT_EQ(render_chat(ChatFormat::Gemma4, messages({{"user", "a"}, {"system", "b"}})),
            "<bos><|turn>user\na<turn|>\n<|turn>system\nb<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_THROW(render_chat(ChatFormat::Gemma4, messages({{"robot", "a"}})), Error);
  EXPECT_THROW(render_chat(ChatFormat::Gemma4, messages({{"user", "bad \xff"}})), Error);
}

TEST(ChatFormat, Gemma3) {
  EXPECT_EQ(render_chat(ChatFormat::Gemma3, messages({{"system", "Be brief. "}, {"user", " Hi"}, {"assistant", "Hello!"},
                                                      {"user", "More\n"}})),
            "<bos><start_of_turn>user\nBe brief. \n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n");
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(render_chat(ChatFormat::Gemma3, messages({{"user", "a"}, {"model", "b"}}), no_prompt),
            "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n");
  EXPECT_THROW(render_chat(ChatFormat::Gemma3, messages({{"assistant", "first"}})), Error);
  EXPECT_THROW(render_chat(ChatFormat::Gemma3, messages({{"user", "a"}, {"user", "b"}})), Error);
  EXPECT_THROW(render_chat(ChatFormat::Gemma3, messages({{"user", "a"}, {"system", "b"}})), Error);
}

TEST(ChatFormat, RenderedPromptIds) {
  Ids user;
  for (unsigned char c : std::string("user")) user.push_back(c == 'b' ? 8 : c == 'a' ? 7 : byte_id(c));
  Ids expected = {2, 4};
  expected.insert(expected.end(), user.begin(), user.end());
  expected.insert(expected.end(), {14, 12, 5, 14});
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(small().encode(render_chat(ChatFormat::Gemma3, messages({{"user", "abc"}}), no_prompt)), expected);
  Ids g4 = {2, 272};
  g4.insert(g4.end(), user.begin(), user.end());
  g4.insert(g4.end(), {14, 12, 273, 14});
  EXPECT_EQ(small().encode(render_chat(ChatFormat::Gemma4, messages({{"user", "abc"}}), no_prompt)), g4);
}

TEST(ChatFormat, DetectAndStopTokens) {
  spec::ModelSpec spec;
  EXPECT_EQ(detect_chat_format(spec, small()), ChatFormat::Gemma4);  // has <|turn>
  spec.chat_template = "gemma3";
  EXPECT_EQ(detect_chat_format(spec, small()), ChatFormat::Gemma3);
  spec.chat_template = "chatml";
  EXPECT_THROW(detect_chat_format(spec, small()), Error);
  spec.chat_template.clear();
  const auto gguf = load_gguf_tokenizer(
      gguf_data({"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}, {3, 3, 3, 3, 3, 3}), "g.gguf");
  EXPECT_EQ(detect_chat_format(spec, *gguf), ChatFormat::Gemma3);
  spec.tokens.stop = {1, 2};
  EXPECT_EQ(chat_stop_tokens(ChatFormat::Gemma3, spec, *gguf), Ids({1, 5, 2}));
  EXPECT_EQ(chat_stop_tokens(ChatFormat::Gemma4, spec, small()), Ids({1, 273, 2}));
}

}  // namespace
}  // namespace lumen::tokenizer
