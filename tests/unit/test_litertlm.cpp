// LiteRT-LM package and TFLite readers: the real fixtures in ../shared/fixtures/litertlm read
// as LiteRT-LM's own peek tool and the `tflite` package read them (values checked here were
// read with those tools: litert-lm-builder 0.18.1, tflite 2.18.0); corrupted copies (in
// memory and on disk) fail with one lumen::Error line naming the file and the field, never a
// crash (this suite also runs under ASan+UBSan).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "formats/flatbuffer.h"
#include "formats/litertlm.h"
#include "formats/llm_metadata.h"
#include "formats/tflite.h"
#include "spec/model_spec.h"

namespace lumen::formats {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(LUMEN_SHARED_DIR) + "/fixtures/litertlm/";

std::vector<std::byte> slurp(const std::string& name) {
  std::ifstream in(kFixtures + name, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

template <typename T>
void poke(std::vector<std::byte>& bytes, size_t pos, T value) {
  ASSERT_LE(pos + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + pos, &value, sizeof(T));
}

// Runs `f`, expects a lumen::Error whose single line contains every `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << *parts.begin() << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

// Reads everything inspect reads (all section payloads), so a corrupt copy exercises all
// the readers.
void read_all(const std::vector<std::byte>& bytes, const std::string& name) {
  const LitertlmFile f = LitertlmFile::parse(bytes.data(), bytes.size(), name);
  (void)litertlm_to_json(f);
}

// Position of a field of section `index`'s SectionObject inside the file.
size_t section_field_pos(const std::vector<std::byte>& bytes, uint32_t index, int field) {
  uint64_t header_end;
  std::memcpy(&header_end, bytes.data() + 24, 8);
  static fb::Buffer buf;
  buf = fb::Buffer{bytes.data() + 32, size_t(header_end - 32), "test"};
  const fb::Table root = fb::Table::root(buf, 0, "");
  const fb::Table obj = root.table(1, "section_metadata")->vector(0, 4, "objects").table(index);
  auto pos = obj.field_position(field);
  EXPECT_TRUE(pos.has_value());
  return 32 + pos.value_or(0);
}

TEST(Litertlm, LoraFixtureMatchesPeek) {
  const auto f = LitertlmFile::open(kFixtures + "test_lm_lora.litertlm");
  EXPECT_EQ(f.version.to_string(), "1.5.0");
  EXPECT_EQ(f.header_end_offset, 504u);
  ASSERT_EQ(f.system_metadata.size(), 2u);
  EXPECT_EQ(f.system_metadata[0].key, "uuid");
  EXPECT_EQ(std::get<std::string>(f.system_metadata[0].value), "6f58198d-189d-47db-936c-a29d69c272f0");
  ASSERT_EQ(f.sections.size(), 3u);
  EXPECT_EQ(f.sections[0].type, SectionType::LlmMetadataProto);
  EXPECT_EQ(f.sections[0].begin, 16384u);
  EXPECT_EQ(f.sections[0].end, 16419u);
  EXPECT_EQ(f.sections[1].type, SectionType::TFLiteModel);
  EXPECT_EQ(f.sections[1].begin, 32768u);
  EXPECT_EQ(f.sections[1].end, 116052u);
  EXPECT_EQ(f.sections[1].item_string("model_type"), "tf_lite_prefill_decode");
  EXPECT_EQ(f.sections[2].type, SectionType::SP_Tokenizer);
  EXPECT_EQ(f.sections[2].begin, 131072u);
  EXPECT_EQ(f.sections[2].end, 131424u);

  const LlmMetadata m = f.llm_metadata(f.sections[0]);
  ASSERT_TRUE(m.start_token && m.start_token->text);
  EXPECT_EQ(*m.start_token->text, "<bos>");
  ASSERT_EQ(m.stop_tokens.size(), 2u);
  EXPECT_EQ(m.stop_tokens[1].text.value_or(""), "<end_of_turn>");

  const TfliteModel model = f.tflite(f.sections[1]);
  ASSERT_EQ(model.subgraphs.size(), 2u);
  EXPECT_EQ(model.subgraphs[0].name, "decode");
  EXPECT_EQ(model.subgraphs[0].tensors.size(), 305u);
  EXPECT_EQ(model.buffers.size(), 592u);
  ASSERT_EQ(model.signatures.size(), 2u);
  EXPECT_EQ(model.signatures[0].key, "decode");
  EXPECT_EQ(model.signatures[1].key, "prefill");
  EXPECT_EQ(model.signatures[1].subgraph_index, 1u);
  EXPECT_EQ(model.signatures[0].inputs[0].name, "input_pos");
  EXPECT_EQ(model.signatures[0].inputs[0].tensor_index, 21u);
  const TfliteTensor& t3 = model.subgraphs[0].tensors[3];
  EXPECT_EQ(t3.name, "decode_key_w_prime_right_26:0");
  EXPECT_EQ(t3.shape, (std::vector<int32_t>{32, 2, 256}));
  EXPECT_EQ(t3.type, TfliteType::FLOAT16);
  EXPECT_EQ(f.sentencepiece_model(f.sections[2]).size(), 352u);
}

TEST(Litertlm, HfTokenizerInflatesToJson) {
  const auto f = LitertlmFile::open(kFixtures + "test_hf_tokenizer.litertlm");
  EXPECT_EQ(f.version.to_string(), "1.1.0");
  ASSERT_EQ(f.sections.size(), 1u);
  const std::string json = f.hf_tokenizer_json(f.sections[0]);
  EXPECT_EQ(json.size(), 2104556u);
  EXPECT_TRUE(nlohmann::json::accept(json));
}

TEST(Litertlm, BareTfliteSignatures) {
  const auto f = TfliteFile::open(kFixtures + "tflite_external_kv_test_fixture.tflite");
  const TfliteModel& m = f.model();
  ASSERT_EQ(m.signatures.size(), 2u);
  EXPECT_EQ(m.signatures[0].key, "decode");
  EXPECT_EQ(m.signatures[0].outputs.back().name, "logits");
  EXPECT_EQ(m.signatures[0].outputs.back().tensor_index, 12u);
  EXPECT_EQ(m.buffers[28].storage, BufferStorage::Inline);
  EXPECT_EQ(m.buffers[28].size, 96u);
}

TEST(LitertlmErrors, BadMagicAndVersion) {
  auto bytes = slurp("test_lm_lora.litertlm");
  auto bad = bytes;
  bad[0] = std::byte{'X'};
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"x.litertlm", "bad magic", "LITERTLM"});
  bad = bytes;
  poke<uint32_t>(bad, 8, 2);
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"unsupported format version 2.5.0"});
  bad = bytes;
  poke<uint32_t>(bad, 12, 10);
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"unsupported format version 1.10.0"});
}

TEST(LitertlmErrors, Truncated) {
  const auto bytes = slurp("test_lm_lora.litertlm");
  for (size_t cut : {size_t(0), size_t(5), size_t(20), size_t(31), size_t(100), size_t(503), size_t(20000),
                     bytes.size() - 1}) {
    std::vector<std::byte> part(bytes.begin(), bytes.begin() + cut);
    try {
      read_all(part, "cut.litertlm");
      ADD_FAILURE() << "cut at " << cut << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      EXPECT_EQ(std::string(e.what()).rfind("cut.litertlm", 0), 0u) << e.what();
    }
  }
}

TEST(LitertlmErrors, SectionRanges) {
  const auto bytes = slurp("test_lm_lora.litertlm");
  auto bad = bytes;
  poke<uint64_t>(bad, section_field_pos(bytes, 2, 2), bytes.size() + 1);  // end past EOF
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"section 2 (SP_Tokenizer)", "past the end of the file"});
  bad = bytes;
  poke<uint64_t>(bad, section_field_pos(bytes, 1, 1), 16400);  // begins inside section 0
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"section 1", "overlaps section 0"});
  bad = bytes;
  poke<uint64_t>(bad, section_field_pos(bytes, 0, 1), 100);  // inside the header
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"section 0", "inside the header"});
  bad = bytes;
  poke<uint64_t>(bad, 24, bytes.size() + 10);
  expect_error([&] { read_all(bad, "x.litertlm"); }, {"header_end_offset"});
}

TEST(LitertlmErrors, UnknownDataType) {
  auto bytes = slurp("test_lm_lora.litertlm");
  poke<uint8_t>(bytes, section_field_pos(bytes, 2, 3), 200);
  expect_error([&] { read_all(bytes, "x.litertlm"); }, {"section 2", "unknown data_type 200"});
}

TEST(LitertlmErrors, PayloadDefects) {
  // A corrupt zlib stream, and a wrong declared size.
  auto bytes = slurp("small_hf_tokenizer.litertlm");
  auto bad = bytes;
  for (size_t i = 16384 + 8 + 2; i < 16384 + 40; ++i) bad[i] = std::byte{0x55};
  expect_error([&] { read_all(bad, "t.litertlm"); }, {"t.litertlm: section 0 (HF_Tokenizer_Zlib)"});
  bad = bytes;
  poke<uint64_t>(bad, 16384, 274);
  expect_error([&] { read_all(bad, "t.litertlm"); }, {"section 0 (HF_Tokenizer_Zlib)", "inflated 273 bytes", "274"});
  poke<uint64_t>(bad, 16384, 272);
  expect_error([&] { read_all(bad, "t.litertlm"); }, {"more than the declared 272 bytes"});
  poke<uint64_t>(bad, 16384, uint64_t(1) << 40);
  expect_error([&] { read_all(bad, "t.litertlm"); }, {"declared uncompressed size", "impossible"});

  // A truncated LlmMetadata proto: the section ends one byte early.
  bytes = slurp("test_lm_lora.litertlm");
  bad = bytes;
  poke<uint64_t>(bad, section_field_pos(bytes, 0, 2), 16418);
  expect_error([&] { read_all(bad, "m.litertlm"); }, {"section 0 (LlmMetadataProto)"});

  // The TFL3 identifier.
  bad = bytes;
  bad[32768 + 4] = std::byte{'X'};
  expect_error([&] { read_all(bad, "m.litertlm"); }, {"section 1 (TFLiteModel)", "not a TFLite model"});
}

// Locates tensor `t` of subgraph `s` of the model at `model_pos`, returns its field position.
size_t tensor_field_pos(const std::vector<std::byte>& bytes, size_t model_pos, size_t model_size, uint32_t s,
                        uint32_t t, int field) {
  static fb::Buffer buf;
  buf = fb::Buffer{bytes.data() + model_pos, model_size, "test"};
  const fb::Table root = fb::Table::root(buf, 0, "");
  const fb::Table tensor = root.vector(2, 4, "subgraphs").table(s).vector(0, 4, "tensors").table(t);
  return model_pos + tensor.field_position(field).value();
}

TEST(LitertlmErrors, TfliteReferencesOutOfRange) {
  auto bytes = slurp("test_lm_lora.litertlm");
  auto bad = bytes;
  poke<uint32_t>(bad, tensor_field_pos(bytes, 32768, 116052 - 32768, 0, 3, 2), 99999);
  expect_error([&] { read_all(bad, "m.litertlm"); },
               {"section 1 (TFLiteModel)", "tensors[3]", "decode_key_w_prime_right_26:0", "buffer 99999 out of range"});

  // A constant tensor whose shape no longer matches its buffer's size: tensor 291
  // 'arith.constant6', INT32 [3] in a 12-byte buffer.
  bad = bytes;
  const size_t shape_ref = tensor_field_pos(bytes, 32768, 116052 - 32768, 0, 291, 0);
  uint32_t rel;
  std::memcpy(&rel, bytes.data() + shape_ref, 4);
  poke<int32_t>(bad, shape_ref + rel + 4, 4);  // [3] -> [4]
  expect_error([&] { read_all(bad, "m.litertlm"); },
               {"tensors[291]", "arith.constant6", "holds 12 bytes", "needs 16"});

  // A bare .tflite on disk with a tensor's buffer index out of range.
  auto tfl = slurp("tflite_external_kv_test_fixture.tflite");
  poke<uint32_t>(tfl, tensor_field_pos(tfl, 0, tfl.size(), 1, 0, 2), 500);
  const fs::path dir = fs::temp_directory_path() / ("lumen_litertlm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "bad.tflite";
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(tfl.data()), std::streamsize(tfl.size()));
  }
  expect_error([&] { TfliteFile::open(file.string()); }, {file.string(), "subgraphs[1].tensors[0]", "buffer 500 out of range"});
  fs::remove_all(dir);
}

// Random byte flips anywhere in the header and in each payload: every outcome is a parse or
// one lumen::Error line; ASan/UBSan see every out-of-bounds read.
TEST(LitertlmErrors, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(1234);
  for (const char* name : {"test_lm_lora.litertlm", "dummy_audio_only.litertlm", "small_hf_tokenizer.litertlm"}) {
    const auto bytes = slurp(name);
    uint64_t header_end;
    std::memcpy(&header_end, bytes.data() + 24, 8);
    const LitertlmFile clean = LitertlmFile::parse(bytes.data(), bytes.size(), name);
    std::vector<std::pair<size_t, size_t>> regions = {{0, size_t(header_end)}};
    for (const auto& s : clean.sections) regions.push_back({size_t(s.begin), size_t(s.end)});
    int errors = 0;
    for (int iter = 0; iter < 40; ++iter) {
      auto bad = bytes;
      const auto [lo, hi] = regions[size_t(iter) % regions.size()];
      const int flips = 1 + int(rng() % 4);
      for (int k = 0; k < flips; ++k) bad[lo + rng() % (hi - lo)] = std::byte(uint8_t(rng()));
      try {
        read_all(bad, "fuzz");
      } catch (const Error& e) {
        ++errors;
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      }
    }
    EXPECT_GT(errors, 0) << name;
  }
}

TEST(Tflite, ExpectedBytes) {
  TfliteTensor t;
  t.type = TfliteType::INT4;
  t.shape = {3, 5};  // 15 nibbles, low nibble first: the last byte half used
  EXPECT_EQ(TfliteModel::expected_bytes(t), 8u);
  t.type = TfliteType::BFLOAT16;
  EXPECT_EQ(TfliteModel::expected_bytes(t), 30u);
  t.shape = {};  // a scalar
  EXPECT_EQ(TfliteModel::expected_bytes(t), 2u);
  t.shape = {-1, 4};
  EXPECT_EQ(TfliteModel::expected_bytes(t), 0u);
  t.shape = {INT32_MAX, INT32_MAX, INT32_MAX};
  EXPECT_EQ(TfliteModel::expected_bytes(t), UINT64_MAX);
  t.type = TfliteType::STRING;
  t.shape = {4};
  EXPECT_EQ(TfliteModel::expected_bytes(t), 0u);
}

TEST(LlmMetadataDecode, AllFieldsFromHandWrittenWire) {
  // start_token {token_ids {ids: 2}}, stop_tokens {token_str "<eos>"}, max_num_tokens 4096,
  // llm_model_type {gemma4 {}}, supports_thinking true, sampler_params {type TOP_P, k 64}.
  const std::string wire = std::string("\x0a\x04\x0a\x02\x08\x02", 6) + std::string("\x12\x07\x12\x05<eos>", 9) +
                           std::string("\x28\x80\x20", 3) + std::string("\x32\x02\x42\x00", 4) +
                           std::string("\x58\x01", 2) + std::string("\x22\x04\x08\x02\x10\x40", 6);
  const LlmMetadata m = decode_llm_metadata(wire, "w");
  ASSERT_TRUE(m.start_token);
  EXPECT_EQ(m.start_token->ids, std::vector<int32_t>{2});
  ASSERT_EQ(m.stop_tokens.size(), 1u);
  EXPECT_EQ(m.stop_tokens[0].text.value_or(""), "<eos>");
  EXPECT_EQ(m.max_num_tokens, 4096);
  EXPECT_EQ(m.model_type, "gemma4");
  EXPECT_EQ(m.supports_thinking, std::optional<bool>(true));
  ASSERT_TRUE(m.sampler);
  EXPECT_EQ(m.sampler->type, "TOP_P");
  EXPECT_EQ(m.sampler->k, 64);
  expect_error([&] { decode_llm_metadata(wire.substr(0, 5), "meta"); }, {"meta", "runs past the end"});
  expect_error([&] { decode_llm_metadata(std::string("\x28\x80", 2), "meta"); }, {"meta", "truncated"});
}

TEST(UnsupportedGate, RefusesSeedManifestUnlessForced) {
  const spec::ModelSpec spec = spec::load_spec(std::string(LUMEN_SHARED_DIR) + "/manifests/litert-gemma-4-12b-it.json");
  ASSERT_TRUE(spec.unsupported);
  expect_error([&] { spec::require_supported(spec, false); },
               {"litert-gemma-4-12b-it.json", "gemma4-12b-litert-direct-source-unverified",
                "47 repeated decoder-weight groups", "recommendation: Use a supported RDRR/QAT conversion path",
                "--allow-unverified"});
  EXPECT_NO_THROW(spec::require_supported(spec, true));
  spec::ModelSpec clean = spec;
  clean.unsupported.reset();
  EXPECT_NO_THROW(spec::require_supported(clean, false));
}

}  // namespace
}  // namespace lumen::formats
