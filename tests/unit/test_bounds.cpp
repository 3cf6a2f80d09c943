// Bounds no file can break: JSON nesting is limited in every reader that parses JSON (a deep
// document is a one-line error, not a stack overflow in a later recursive walk); sizes that
// wrap 64 bits are refused before a view is made; a mapped file that changes on disk is
// noticed (truncated, modified, replaced, removed). The fuzz targets (tests/fuzz/) hunt for
// the rest; these pin what was fixed by hand.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <vector>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "base/json.h"
#include "formats/mapped_file.h"
#include "formats/packed.h"
#include "formats/safetensors.h"
#include "formats/tflite.h"
#include "runtime/sampler.h"
#include "server/openai_api.h"
#include "spec/model_spec.h"
#include "tokenizer/tokenizer.h"
#include "test_helpers.h"

using lumen::test_support::error_of;

namespace lumen {
namespace {

namespace fs = std::filesystem;

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

fs::path bounds_temp_path(const std::string& name) {
  return test_support::process_temp_dir("lumen-bounds-") / name;
}

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((v >> (8 * i)) & 0xff);
  return out;
}

TEST(JsonBounds, NestingDeeperThanTheLimitIsAParseError) {
  EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth)));
  EXPECT_THROW(parse_json(nested(kMaxJsonDepth + 1)), nlohmann::json::parse_error);
  // A megabyte of brackets is refused without recursing through it.
  EXPECT_THROW(parse_json(nested(500000)), nlohmann::json::parse_error);
  EXPECT_THROW(parse_json("{\"a\":" + nested(100) + "}"), nlohmann::json::parse_error);
}

TEST(JsonBounds, NumberBeyondDoubleIsAParseError) {
  // nlohmann reports it as out_of_range 406, which no reader catches; parse_json makes it a
  // parse error naming the number (found by fuzz_openai_request).
  try {
    (void)parse_json(R"({"max_tokens": 11e308})");
    ADD_FAILURE() << "no error";
  } catch (const nlohmann::json::parse_error& e) {
    EXPECT_NE(std::string(e.what()).find("11e308"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_json("[-1e400]"), nlohmann::json::parse_error);
  EXPECT_DOUBLE_EQ(parse_json("[1e308]")[0].get<double>(), 1e308);
  // The server answers such a body with a 400.
  try {
    (void)server::parse_chat_request(R"({"messages":[{"role":"user","content":"x"}],"temperature":1e999})",
                                     runtime::default_sampling());
    ADD_FAILURE() << "no error";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
  }
}

TEST(JsonBounds, EveryJsonReaderRefusesDeepNesting) {
  const std::string deep = nested(10000);
  // safetensors header
  const std::string header = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + deep + ",\"data_offsets\":[0,0]}}";
  const std::string st = le64(header.size()) + header;
  EXPECT_NE(error_of([&] {
              formats::SafetensorsCheckpoint::parse(reinterpret_cast<const std::byte*>(st.data()), st.size(), "d.st");
            }).find("nested deeper than"),
            std::string::npos);
  // config.json
  const fs::path config = bounds_temp_path("config.json");
  write(config, "{\"model_type\":\"gemma4_text\",\"x\":" + deep + "}");
  EXPECT_NE(error_of([&] { spec::load_spec(config.string()); }).find("nested deeper than"), std::string::npos);
  // tokenizer.json: normalizer steps recurse into "Sequence"
  std::string seq = "null";
  for (int i = 0; i < 5000; ++i) seq = "{\"type\":\"Sequence\",\"normalizers\":[" + seq + "]}";
  const std::string tok = "{\"normalizer\":" + seq + ",\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}";
  EXPECT_NE(error_of([&] { tokenizer::parse_hf_tokenizer(tok, "deep/tokenizer.json"); }).find("nested deeper than"),
            std::string::npos);
  // packed header
  const std::string pj = "{\"architecture\":\"gemma4\",\"config\":" + deep + "}";
  std::string packed = std::string("LUMENPK\0", 8) + std::string("\x01\0\0\0\0\0\0\0", 8) + le64(pj.size()) + pj;
  EXPECT_NE(error_of([&] {
              formats::PackedFile::parse(reinterpret_cast<const std::byte*>(packed.data()), packed.size(), "d.lmp");
            }).find("not valid JSON"),
            std::string::npos);
  // an OpenAI request body: a 400, not a crash
  try {
    server::parse_chat_request("{\"messages\":" + deep + "}", runtime::default_sampling());
    ADD_FAILURE() << "accepted";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_json");
  }
}

TEST(SizeBounds, PackedTensorSizeThatWrapsIsRefused) {
  // offset + size past 2^64 would wrap to a small end and pass a naive bounds check.
  const std::string pj =
      "{\"architecture\":\"gemma4\",\"config\":{},\"tensors\":[{\"name\":\"w\",\"format\":\"F32\",\"shape\":[4],"
      "\"offset\":0,\"size\":18446744073709551600}]}";
  std::string packed = std::string("LUMENPK\0", 8) + std::string("\x01\0\0\0\0\0\0\0", 8) + le64(pj.size()) + pj;
  packed += std::string(64, '\0');
  EXPECT_NE(error_of([&] {
              formats::PackedFile::parse(reinterpret_cast<const std::byte*>(packed.data()), packed.size(), "w.lmp");
            }).find("tensor 'w'"),
            std::string::npos);
}

TEST(SizeBounds, LayerCountsAreBoundedBeforeLayersAreBuilt) {
  // 2^30 layers would be a hundred gigabytes of layer specs before any tensor is looked at.
  for (const char* type : {"gemma4_text", "gemma3_text"}) {
    const nlohmann::json config = {{"model_type", type},          {"vocab_size", 300},
                                   {"hidden_size", 64},           {"intermediate_size", 64},
                                   {"num_hidden_layers", 1 << 30}, {"num_attention_heads", 2},
                                   {"num_key_value_heads", 1},    {"head_dim", 32},
                                   {"max_position_embeddings", 512}, {"hidden_size_per_layer_input", 0}};
    EXPECT_NE(error_of([&] { spec::spec_from_hf_config(config, "huge/config.json"); }).find("1 to 1024 layers"),
              std::string::npos)
        << type;
  }
}

// Token ids that are not ints (a float far beyond int, a negative, a string) are one-line errors
// naming the field, never a cast (the fuzz finding: bos_token_id 2.9e117 reached get<int>).
TEST(SizeBounds, Gemma3TokenIdsMustBeIntegersInRange) {
  const nlohmann::json base = {{"model_type", "gemma3_text"}, {"vocab_size", 300},     {"hidden_size", 64},
                               {"intermediate_size", 64},     {"num_hidden_layers", 2}, {"num_attention_heads", 2},
                               {"num_key_value_heads", 1},    {"head_dim", 32},         {"max_position_embeddings", 512},
                               {"sliding_window", 64}};
  EXPECT_NO_THROW(spec::spec_from_hf_config(base, "ok/config.json"));
  struct Case { const char* key; nlohmann::json value; };
  const Case cases[] = {{"bos_token_id", 2.888888888888889e117}, {"pad_token_id", -1}, {"bos_token_id", "2"},
                        {"eos_token_id", nlohmann::json::array({1, 1e40})}, {"eos_token_id", 4294967296.0}};
  for (const Case& c : cases) {
    nlohmann::json config = base;
    config[c.key] = c.value;
    const std::string error = error_of([&] { spec::spec_from_hf_config(config, "bad/config.json"); });
    EXPECT_NE(error.find(std::string("`") + c.key + "` must be a token id"), std::string::npos) << c.key << ": " << error;
    EXPECT_NE(error.find("bad/config.json"), std::string::npos) << error;
  }
}

// A TFLite FlatBuffer of a few KB whose offsets all share one subgraph and one tensor:
// `subgraphs` subgraph slots x `tensors` tensor slots decode to subgraphs x tensors tensors.
std::string shared_offsets_tflite(uint32_t subgraphs, uint32_t tensors) {
  std::string b;
  auto u16 = [&](uint16_t v) { b.append(reinterpret_cast<const char*>(&v), 2); };
  auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto set32 = [&](size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); };
  auto offset_to = [&](size_t slot, size_t target) { set32(slot, uint32_t(target - slot)); };
  u32(0);
  b += "TFL3";
  // vtables: Model {2 subgraphs, 4 buffers}, SubGraph {0 tensors}, Buffer {}, Tensor {0 shape}
  const size_t model_vt = b.size();
  u16(4 + 2 * 5); u16(12); u16(0); u16(0); u16(4); u16(0); u16(8);
  const size_t graph_vt = b.size();
  u16(6); u16(8); u16(4);
  const size_t empty_vt = b.size();
  u16(4); u16(4);
  const size_t tensor_vt = b.size();
  u16(6); u16(8); u16(4);
  if (b.size() % 4) b.append(4 - b.size() % 4, '\0');
  const size_t model = b.size();
  offset_to(0, model);
  u32(uint32_t(model - model_vt)); u32(0); u32(0);
  const size_t subgraph_slots = b.size();
  u32(subgraphs);
  for (uint32_t i = 0; i < subgraphs; ++i) u32(0);
  offset_to(model + 4, subgraph_slots);
  const size_t buffers = b.size();
  u32(1); u32(0);
  offset_to(model + 8, buffers);
  const size_t empty_buffer = b.size();
  u32(uint32_t(empty_buffer - empty_vt));
  offset_to(buffers + 4, empty_buffer);
  const size_t graph = b.size();
  u32(uint32_t(graph - graph_vt)); u32(0);
  for (uint32_t i = 0; i < subgraphs; ++i) offset_to(subgraph_slots + 4 + 4 * i, graph);
  const size_t tensor_slots = b.size();
  u32(tensors);
  for (uint32_t i = 0; i < tensors; ++i) u32(0);
  offset_to(graph + 4, tensor_slots);
  const size_t tensor = b.size();
  u32(uint32_t(tensor - tensor_vt)); u32(0);
  for (uint32_t i = 0; i < tensors; ++i) offset_to(tensor_slots + 4 + 4 * i, tensor);
  const size_t shape = b.size();
  u32(1); u32(7);
  offset_to(tensor + 4, shape);
  return b;
}

TEST(SizeBounds, FlatBufferOffsetsSharedOverAndOverAreRefused) {
  // 2 x 2 decodes fine: the builder is right.
  const std::string small = shared_offsets_tflite(2, 2);
  const auto model = formats::TfliteModel::parse(reinterpret_cast<const std::byte*>(small.data()), small.size(), "s");
  ASSERT_EQ(model.subgraphs.size(), 2u);
  EXPECT_EQ(model.subgraphs[1].tensors.size(), 2u);
  EXPECT_EQ(model.subgraphs[1].tensors[1].shape, std::vector<int32_t>{7});
  // 4000 x 4000 (32 KB) would be 16 million tensors: refused long before.
  const std::string bomb = shared_offsets_tflite(4000, 4000);
  EXPECT_LT(bomb.size(), 40000u);
  EXPECT_NE(error_of([&] {
              formats::TfliteModel::parse(reinterpret_cast<const std::byte*>(bomb.data()), bomb.size(), "bomb.tflite");
            }).find("over and over"),
            std::string::npos);
}

TEST(MappedFileChange, TruncatedModifiedReplacedRemoved) {
  const fs::path path = bounds_temp_path("weights.bin");
  write(path, std::string(8192, 'x'));
  {
    const formats::MappedFile file(path.string());
    EXPECT_EQ(file.change_on_disk(), "");
    ::truncate(path.c_str(), 4096);
    EXPECT_EQ(file.change_on_disk(), "truncated from 8192 to 4096 bytes");
  }
  write(path, std::string(8192, 'x'));
  {
    const formats::MappedFile file(path.string());
    // Same size, new contents and time: rewritten in place under the mapping.
    const timespec later[2] = {{0, UTIME_OMIT}, {std::time(nullptr) + 100, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
    EXPECT_EQ(file.change_on_disk(), "modified");
  }
  {
    const formats::MappedFile file(path.string());
    const fs::path other = bounds_temp_path("weights.new");
    write(other, std::string(8192, 'y'));
    fs::rename(other, path);
    EXPECT_EQ(file.change_on_disk(), "replaced by another file");
    fs::remove(path);
    EXPECT_EQ(file.change_on_disk(), "removed");
  }
  // A view of bytes in memory never changes on disk.
  const std::string bytes = "abc";
  const auto view = formats::MappedFile::borrow("mem", reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  EXPECT_EQ(view.change_on_disk(), "");
  EXPECT_EQ(view.size(), 3u);
}

}  // namespace
}  // namespace lumen
