// GGUF writing (formats/gguf_writer.h): what the writer writes, the reader reads back,
// value for value and byte for byte; a value copied from a file is encoded as it was; a
// writer that does not finish leaves nothing behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

using namespace lumen;
using namespace lumen::formats;
namespace fs = std::filesystem;

namespace {

fs::path writer_temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("lumen-gguf-writer-" + std::to_string(::getpid()) + "-" + name);
}

GgufMetadata sample_metadata() {
  GgufMetadata m;
  m.set_string("general.architecture", "gemma3");
  m.set_u32("gemma3.block_count", 18);
  m.set_i32("test.i32", -5);
  m.set_u64("test.u64", 1ull << 40);
  m.set_f32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  m.set_bool("tokenizer.ggml.add_bos_token", true);
  m.set_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"<pad>", "<eos>", "a b"});
  m.set_f32_array("tokenizer.ggml.scores", {0.0f, -1.5f, 2.25f});
  m.set_i32_array("tokenizer.ggml.token_type", {3, 3, 1});
  m.set_u32_array("test.u32s", {1, 2, 3});
  m.set_bool_array("gemma4.attention.sliding_window_pattern", {true, false, true});
  return m;
}

}  // namespace

TEST(GgufWriter, WhatItWritesTheReaderReads) {
  const fs::path path = writer_temp_path("roundtrip.gguf");
  GgufMetadata m = sample_metadata();
  m.set_u32("gemma3.block_count", 19);  // setting again replaces in place
  std::vector<GgufTensorInfo> tensors = {{"a.weight", GgmlType::F32, {3, 2}},
                                         {"b.weight", GgmlType::Q8_0, {64, 3}},
                                         {"c", GgmlType::F16, {5}}};
  {
    GgufWriter w(path.string(), m, tensors);
    std::vector<float> a = {1, 2, 3, 4, 5, 6};
    w.write(a.data(), 8);  // in pieces
    w.write(a.data() + 2, 16);
    std::vector<uint8_t> b(2 * 34 * 3);
    std::iota(b.begin(), b.end(), uint8_t(0));
    for (size_t k = 0; k < b.size(); k += 34) b[k + 1] = 0x3c;  // f16 scale 1.0
    w.write(b.data(), b.size());
    const uint16_t c[5] = {0x3c00, 0x4000, 0x4200, 0x4400, 0x4500};
    w.write(c, sizeof(c));
    EXPECT_FALSE(fs::exists(path));
    w.finish();
  }
  const GgufFile f = GgufFile::open(path.string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f.get_int("gemma3.block_count"), 19);
  EXPECT_EQ(f.metadata()[1].first, "gemma3.block_count");
  EXPECT_EQ(f.get_int("test.i32"), -5);
  EXPECT_EQ(f.get_int("test.u64"), int64_t(1) << 40);
  EXPECT_FLOAT_EQ(float(f.get_float("gemma3.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[2], "a b");
  EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores"), (std::vector<float>{0.0f, -1.5f, 2.25f}));
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(f.get_int_array("test.u32s"), (std::vector<int64_t>{1, 2, 3}));
  const GgufArray& swa = f.get_array("gemma4.attention.sliding_window_pattern");
  EXPECT_EQ(swa.element_type(), GgufType::BOOL);
  EXPECT_EQ(*swa.at(1).to_bool(), false);

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensor& a = f.tensor("a.weight");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  float av[6];
  std::memcpy(av, a.data, 24);
  EXPECT_EQ(av[5], 6.0f);
  const GgufTensor& b = f.tensor("b.weight");
  EXPECT_EQ(b.type, GgmlType::Q8_0);
  EXPECT_EQ(b.nbytes, 2u * 34 * 3);
  EXPECT_EQ(uint8_t(b.data[5]), 5);
  EXPECT_EQ(b.offset % 32, 0u);
  EXPECT_EQ(f.tensor("c").nbytes, 10u);
  fs::remove(path);
}

TEST(GgufWriter, CopiedValuesAreEncodedAsTheyWere) {
  const fs::path first = writer_temp_path("first.gguf"), second = writer_temp_path("second.gguf");
  {
    GgufWriter w(first.string(), sample_metadata(), {});
    w.finish();
  }
  const GgufFile f = GgufFile::open(first.string());
  GgufMetadata copy;
  for (const auto& [key, value] : f.metadata()) copy.set_value(key, value);
  {
    GgufWriter w(second.string(), copy, {});
    w.finish();
  }
  std::ifstream a(first, std::ios::binary), b(second, std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(sa, sb);
  fs::remove(first);
  fs::remove(second);
}

TEST(GgufWriter, UnfinishedWriterLeavesNothing) {
  const fs::path path = writer_temp_path("unfinished.gguf");
  {
    GgufWriter w(path.string(), sample_metadata(), {{"t", GgmlType::F32, {4}}});
    const float v[2] = {1, 2};
    w.write(v, sizeof(v));
    EXPECT_THROW(w.finish(), Error);  // two of four values
  }
  EXPECT_FALSE(fs::exists(path));
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path()))
    EXPECT_EQ(e.path().filename().string().find(path.filename().string() + ".tmp"), std::string::npos);
}

TEST(GgufWriter, BadTensorsAndPathsAreErrors) {
  const fs::path path = writer_temp_path("bad.gguf");
  EXPECT_THROW(GgufWriter(path.string(), {}, {{"q", GgmlType::Q4_K, {96, 2}}}), Error);  // 96 % 256
  EXPECT_THROW(GgufWriter(path.string(), {}, {{"q", GgmlType::Q4_0, {0}}}), Error);
  try {
    GgufWriter w("/nonexistent-dir/x.gguf", {}, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos) << e.what();
  }
  GgufWriter w(path.string(), {}, {{"t", GgmlType::F32, {1}}});
  const float v[2] = {1, 2};
  EXPECT_THROW(w.write(v, sizeof(v)), Error);  // more bytes than the tensors hold
}
