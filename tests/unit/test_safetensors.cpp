// Safetensors reader: valid single, sharded and directory checkpoints read back exactly;
// every malformed input fails with one lumen::Error line naming the file and tensor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dtype.h"
#include "base/error.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"
#include "formats/tensor.h"
#include "test_helpers.h"

using lumen::test_support::write_file;

namespace lumen::formats {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Little-endian u64 header length, the JSON text, then the data bytes.
std::string safetensors_bytes(const std::string& header_text, const std::string& payload) {
  std::string out;
  uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) out += char((length >> (8 * i)) & 0xff);
  return out + header_text + payload;
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Lays tensors out back to back, the way real writers do; tests then edit the header
// to make it wrong in one particular way.
class CheckpointBuilder {
 public:
  CheckpointBuilder& add(const std::string& name, const std::string& dtype, json shape,
                         const std::string& data) {
    header_[name] = {{"dtype", dtype},
                     {"shape", std::move(shape)},
                     {"data_offsets", {payload_.size(), payload_.size() + data.size()}}};
    payload_ += data;
    return *this;
  }
  json& header() { return header_; }
  std::string& payload() { return payload_; }
  std::string bytes() const { return safetensors_bytes(header_.dump(), payload_); }
  void write(const fs::path& path) const { write_file(path, bytes()); }

 private:
  json header_ = json::object();
  std::string payload_;
};

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lumen_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Opens `path`, expects a lumen::Error, and checks that its single line holds every
  // fragment in `expected`.
  void expect_open_error(const std::string& path, std::initializer_list<std::string> expected) {
    try {
      SafetensorsCheckpoint::open(path);
      ADD_FAILURE() << "open('" << path << "') did not throw";
    } catch (const lumen::Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      for (const std::string& fragment : expected)
        EXPECT_NE(message.find(fragment), std::string::npos)
            << "missing '" << fragment << "' in: " << message;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "open('" << path << "') threw a non-lumen error: " << e.what();
    }
  }

  // Writes a file with one good BF16 tensor "w" of shape [2, 2], lets `edit` break it,
  // and returns the path.
  template <typename Edit>
  std::string write_broken(Edit edit) {
    CheckpointBuilder builder;
    builder.add("w", "BF16", {2, 2}, std::string(8, '\x01'));
    edit(builder);
    const std::string path = file("broken.safetensors");
    builder.write(path);
    return path;
  }

  fs::path dir_;
};

// --- shape_to_string and MappedFile ---------------------------------------------------

TEST(ShapeToString, FormatsDimsAndScalars) {
  EXPECT_EQ(shape_to_string({3, 4}), "[3, 4]");
  EXPECT_EQ(shape_to_string({3840, 262144}), "[3840, 262144]");
  EXPECT_EQ(shape_to_string({7}), "[7]");
  EXPECT_EQ(shape_to_string({}), "[]");
}

TEST_F(SafetensorsTest, MappedFileMapsContents) {
  write_file(file("a.bin"), "hello");
  MappedFile mapped(file("a.bin"));
  ASSERT_EQ(mapped.size(), 5u);
  EXPECT_EQ(std::memcmp(mapped.data(), "hello", 5), 0);
  EXPECT_EQ(mapped.path(), file("a.bin"));

  MappedFile moved(std::move(mapped));
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_EQ(std::memcmp(moved.data(), "hello", 5), 0);
  EXPECT_EQ(mapped.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(mapped.size(), 0u);
}

TEST_F(SafetensorsTest, MappedFileEmptyFileHasNoData) {
  write_file(file("empty.bin"), "");
  MappedFile mapped(file("empty.bin"));
  EXPECT_EQ(mapped.size(), 0u);
  EXPECT_EQ(mapped.data(), nullptr);
}

TEST_F(SafetensorsTest, MappedFileMissingFileNamesPathAndReason) {
  const std::string path = file("absent.bin");
  try {
    MappedFile mapped(path);
    FAIL() << "no error";
  } catch (const lumen::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open '" + path + "': No such file or directory");
  }
}

TEST_F(SafetensorsTest, MappedFileRejectsDirectory) {
  try {
    MappedFile mapped(dir_.string());
    FAIL() << "no error";
  } catch (const lumen::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
}

// --- valid checkpoints ----------------------------------------------------------------

TEST_F(SafetensorsTest, SingleFileReadsBackEveryDtypeExactly) {
  const std::vector<uint16_t> bf16 = {f32_to_bf16(1.0f), f32_to_bf16(-2.5f), f32_to_bf16(0.125f),
                                      f32_to_bf16(3.0f), f32_to_bf16(-0.0f), f32_to_bf16(100.0f)};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x3800, 0x0001};  // 1, -2, 0.5, tiny
  const std::vector<float> f32 = {1.5f, -7.25f, 0.0f, 1e-30f};

  CheckpointBuilder builder;
  builder.add("model.embed.weight", "BF16", {2, 3}, bytes_of(bf16))
      .add("model.norm.weight", "F16", {4}, bytes_of(f16))
      .add("lm_head.bias", "F32", {2, 2}, bytes_of(f32));
  builder.header()["__metadata__"] = {{"format", "pt"}};
  builder.write(file("model.safetensors"));

  const auto checkpoint = SafetensorsCheckpoint::open(file("model.safetensors"));
  EXPECT_EQ(checkpoint.path(), file("model.safetensors"));
  ASSERT_EQ(checkpoint.size(), 3u);
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"lm_head.bias", "model.embed.weight",
                                                          "model.norm.weight"}));
  EXPECT_EQ(checkpoint.find("__metadata__"), nullptr);
  EXPECT_EQ(checkpoint.find("absent"), nullptr);

  const TensorView* embed = checkpoint.find("model.embed.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->name, "model.embed.weight");
  EXPECT_EQ(embed->dtype, DType::BF16);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(embed->numel(), 6);
  ASSERT_EQ(embed->nbytes, 12u);
  EXPECT_EQ(embed->file, file("model.safetensors"));
  EXPECT_EQ(std::memcmp(embed->data, bf16.data(), 12), 0);
  uint16_t second;
  std::memcpy(&second, embed->data + 2, 2);
  EXPECT_EQ(bf16_to_f32(second), -2.5f);

  const TensorView* norm = checkpoint.find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, DType::F16);
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{4}));
  ASSERT_EQ(norm->nbytes, 8u);
  EXPECT_EQ(std::memcmp(norm->data, f16.data(), 8), 0);

  const TensorView* bias = checkpoint.find("lm_head.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->dtype, DType::F32);
  ASSERT_EQ(bias->nbytes, 16u);
  EXPECT_EQ(std::memcmp(bias->data, f32.data(), 16), 0);
  // Data sits right after the header, tensors back to back.
  EXPECT_EQ(norm->data, embed->data + 12);
  EXPECT_EQ(bias->data, norm->data + 8);
}

TEST_F(SafetensorsTest, ScalarTensorHasEmptyShapeAndOneElement) {
  CheckpointBuilder builder;
  builder.add("scale", "F32", json::array(), bytes_of(std::vector<float>{3.5f}));
  builder.write(file("scalar.safetensors"));

  const auto checkpoint = SafetensorsCheckpoint::open(file("scalar.safetensors"));
  const TensorView* scale = checkpoint.find("scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_TRUE(scale->shape.empty());
  EXPECT_EQ(scale->numel(), 1);
  EXPECT_EQ(shape_to_string(scale->shape), "[]");
  ASSERT_EQ(scale->nbytes, 4u);
  float value;
  std::memcpy(&value, scale->data, 4);
  EXPECT_EQ(value, 3.5f);
}

TEST_F(SafetensorsTest, EmptyTensorsAreAllowedAndOverlapNothing) {
  CheckpointBuilder builder;
  builder.add("a", "F32", {2}, bytes_of(std::vector<float>{1, 2}));
  builder.header()["empty"] = {{"dtype", "F32"}, {"shape", {0, 4}}, {"data_offsets", {4, 4}}};
  builder.write(file("empty_tensor.safetensors"));

  const auto checkpoint = SafetensorsCheckpoint::open(file("empty_tensor.safetensors"));
  const TensorView* empty = checkpoint.find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_EQ(empty->nbytes, 0u);
}

TEST_F(SafetensorsTest, HeaderOnlyFileHasNoTensors) {
  write_file(file("none.safetensors"), safetensors_bytes("{}", ""));
  EXPECT_EQ(SafetensorsCheckpoint::open(file("none.safetensors")).size(), 0u);
}

TEST_F(SafetensorsTest, DirectoryWithModelSafetensors) {
  CheckpointBuilder builder;
  builder.add("w", "F32", {3}, bytes_of(std::vector<float>{1, 2, 3}));
  builder.write(file("model.safetensors"));

  const auto checkpoint = SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(checkpoint.path(), dir_.string());
  ASSERT_EQ(checkpoint.size(), 1u);
  const TensorView* w = checkpoint.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->file, file("model.safetensors"));
  float third;
  std::memcpy(&third, w->data + 8, 4);
  EXPECT_EQ(third, 3.0f);
}

// Two shards and an index, as Hugging Face writes them.
class ShardedTest : public SafetensorsTest {
 protected:
  void write_shards() {
    CheckpointBuilder first;
    first.add("embed", "BF16", {2, 2}, bytes_of(std::vector<uint16_t>{1, 2, 3, 4}))
        .add("layer.0", "F32", {2}, bytes_of(std::vector<float>{5, 6}));
    first.write(file(kShard1));
    CheckpointBuilder second;
    second.add("layer.1", "F32", {2}, bytes_of(std::vector<float>{7, 8}))
        .add("norm", "F16", {1}, bytes_of(std::vector<uint16_t>{0x3c00}));
    second.write(file(kShard2));
  }
  json index() const {
    return {{"metadata", {{"total_size", 28}}},
            {"weight_map",
             {{"embed", kShard1}, {"layer.0", kShard1}, {"layer.1", kShard2}, {"norm", kShard2}}}};
  }
  void write_index(const json& index_json) { write_file(index_path(), index_json.dump(2)); }
  std::string index_path() const { return file("model.safetensors.index.json"); }

  static constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
  static constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
};

TEST_F(ShardedTest, ReadsTensorsFromEveryShard) {
  write_shards();
  write_index(index());
  const auto checkpoint = SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(checkpoint.names(),
            (std::vector<std::string>{"embed", "layer.0", "layer.1", "norm"}));

  const TensorView* embed = checkpoint.find("embed");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->file, file(kShard1));
  EXPECT_EQ(embed->dtype, DType::BF16);
  const std::vector<uint16_t> expected_embed = {1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(embed->data, expected_embed.data(), 8), 0);

  const TensorView* layer1 = checkpoint.find("layer.1");
  ASSERT_NE(layer1, nullptr);
  EXPECT_EQ(layer1->file, file(kShard2));
  const std::vector<float> expected_layer1 = {7, 8};
  EXPECT_EQ(std::memcmp(layer1->data, expected_layer1.data(), 8), 0);

  const TensorView* norm = checkpoint.find("norm");
  ASSERT_NE(norm, nullptr);
  uint16_t one;
  std::memcpy(&one, norm->data, 2);
  EXPECT_EQ(f16_to_f32(one), 1.0f);
}

TEST_F(ShardedTest, IndexTakesPrecedenceOverModelSafetensors) {
  write_shards();
  write_index(index());
  write_file(file("model.safetensors"), "not even a header");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir_.string()).size(), 4u);
}

TEST_F(ShardedTest, ViewsStayValidAfterTheCheckpointMoves) {
  write_shards();
  write_index(index());
  auto opened = SafetensorsCheckpoint::open(dir_.string());
  const std::byte* before = opened.find("layer.0")->data;
  SafetensorsCheckpoint moved = std::move(opened);
  ASSERT_NE(moved.find("layer.0"), nullptr);
  EXPECT_EQ(moved.find("layer.0")->data, before);
  float five;
  std::memcpy(&five, before, 4);
  EXPECT_EQ(five, 5.0f);
}

// --- errors: paths ---------------------------------------------------------------------

TEST_F(SafetensorsTest, MissingPath) {
  expect_open_error(file("nope.safetensors"), {file("nope.safetensors"), "No such file"});
}

TEST_F(SafetensorsTest, DirectoryWithoutCheckpoint) {
  write_file(file("config.json"), "{}");
  expect_open_error(dir_.string(),
                    {dir_.string(), "model.safetensors.index.json", "model.safetensors"});
}

// --- errors: one file ------------------------------------------------------------------

TEST_F(SafetensorsTest, FileShorterThanHeaderLength) {
  write_file(file("short.safetensors"), "abcde");
  expect_open_error(file("short.safetensors"), {file("short.safetensors"), "5 bytes", "short"});
  write_file(file("empty.safetensors"), "");
  expect_open_error(file("empty.safetensors"), {file("empty.safetensors"), "0 bytes"});
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string bytes = safetensors_bytes("{}", "");
  bytes[0] = char(200);  // claims a 200-byte header in a 10-byte file
  write_file(file("trunc.safetensors"), bytes);
  expect_open_error(file("trunc.safetensors"),
                    {file("trunc.safetensors"), "header length 200", "truncated"});

  std::string huge(8, char(0xff));  // 2^64-1 must not wrap around
  write_file(file("huge.safetensors"), huge + "{}");
  expect_open_error(file("huge.safetensors"), {file("huge.safetensors"), "truncated"});
}

TEST_F(SafetensorsTest, HeaderNotJson) {
  write_file(file("bad.safetensors"), safetensors_bytes("{\"w\": \n{oops", ""));
  expect_open_error(file("bad.safetensors"), {file("bad.safetensors"), "not valid JSON"});
}

TEST_F(SafetensorsTest, HeaderNotObject) {
  write_file(file("array.safetensors"), safetensors_bytes("[1, 2]", ""));
  expect_open_error(file("array.safetensors"),
                    {file("array.safetensors"), "not a JSON object", "array"});
}

TEST_F(SafetensorsTest, TensorListedTwiceInHeader) {
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  write_file(file("dup.safetensors"),
             safetensors_bytes("{\"w\":" + entry + ",\"w\":" + entry + "}", std::string(4, '\0')));
  expect_open_error(file("dup.safetensors"), {file("dup.safetensors"), "'w'", "twice"});
}

TEST_F(SafetensorsTest, EntryNotObject) {
  const auto path = write_broken([](CheckpointBuilder& b) { b.header()["w"] = "BF16"; });
  expect_open_error(path, {path, "'w'", "not a JSON object"});
}

TEST_F(SafetensorsTest, MissingFields) {
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    SCOPED_TRACE(field);
    const auto path = write_broken([&](CheckpointBuilder& b) { b.header()["w"].erase(field); });
    expect_open_error(path, {path, "'w'", std::string("'") + field + "'"});
  }
}

TEST_F(SafetensorsTest, FieldsOfWrongJsonType) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"dtype", 16},
      {"shape", "2x2"},
      {"shape", {2.0, 2}},
      {"shape", {"2", 2}},
      {"data_offsets", "0-8"},
      {"data_offsets", {0}},
      {"data_offsets", {0, 8, 16}},
      {"data_offsets", {0, "8"}},
      {"data_offsets", {0.0, 8}},
      {"data_offsets", {-8, 8}},
  };
  for (const auto& [field, value] : cases) {
    SCOPED_TRACE(field + " = " + value.dump());
    const auto path = write_broken([&](CheckpointBuilder& b) { b.header()["w"][field] = value; });
    expect_open_error(path, {path, "'w'", field});
  }
}

TEST_F(SafetensorsTest, UnknownDtype) {
  const auto path = write_broken([](CheckpointBuilder& b) { b.header()["w"]["dtype"] = "Q4_K"; });
  expect_open_error(path, {path, "'w'", "unknown dtype", "Q4_K"});
}

TEST_F(SafetensorsTest, NegativeDimension) {
  const auto path =
      write_broken([](CheckpointBuilder& b) { b.header()["w"]["shape"] = {-2, -2}; });
  expect_open_error(path, {path, "'w'", "negative dimension -2"});
}

TEST_F(SafetensorsTest, OffsetsOutOfOrder) {
  const auto path =
      write_broken([](CheckpointBuilder& b) { b.header()["w"]["data_offsets"] = {8, 0}; });
  expect_open_error(path, {path, "'w'", "[8, 0]", "begin is past its end"});
}

TEST_F(SafetensorsTest, DataPastEndOfFile) {
  const auto path = write_broken([](CheckpointBuilder& b) { b.payload().resize(5); });
  EXPECT_NO_FATAL_FAILURE(expect_open_error(
      path, {path + ": tensor 'w' data ends at byte 8 but the file has only 5 bytes of data "
                    "(truncated?)"}));
}

TEST_F(SafetensorsTest, ByteCountDoesNotMatchDtypeAndShape) {
  const auto path =
      write_broken([](CheckpointBuilder& b) { b.header()["w"]["shape"] = {2, 3}; });
  expect_open_error(path, {path, "'w'", "holds 8 bytes", "BF16 [2, 3]", "needs 12"});
}

TEST_F(SafetensorsTest, ShapeTooLargeToAddress) {
  const auto path = write_broken([](CheckpointBuilder& b) {
    b.header()["w"]["shape"] = {int64_t(1) << 40, int64_t(1) << 40};
  });
  expect_open_error(path, {path, "'w'", "too large"});
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const auto path = write_broken([](CheckpointBuilder& b) {
    b.add("v", "F32", {1}, std::string(4, '\0'));
    b.header()["v"]["data_offsets"] = {4, 8};  // the second half of w
  });
  expect_open_error(path, {path, "'w'", "'v'", "overlap"});
}

TEST_F(SafetensorsTest, ControlCharactersInNamesStayOnOneLine) {
  const auto path = write_broken([](CheckpointBuilder& b) {
    b.header()["evil\nname"] = {{"dtype", "NOPE"}, {"shape", {1}}, {"data_offsets", {0, 1}}};
  });
  expect_open_error(path, {path, "evil\\x0aname", "NOPE"});
}

// --- errors: sharded -------------------------------------------------------------------

TEST_F(ShardedTest, IndexNotJson) {
  write_shards();
  write_file(index_path(), "{\"weight_map\": {\n");
  expect_open_error(dir_.string(), {index_path(), "not valid JSON"});
}

TEST_F(ShardedTest, IndexWithoutWeightMap) {
  write_shards();
  write_index({{"metadata", json::object()}});
  expect_open_error(dir_.string(), {index_path(), "'weight_map'"});
  write_index({{"weight_map", {kShard1, kShard2}}});
  expect_open_error(dir_.string(), {index_path(), "'weight_map'"});
  write_index(json::array());
  expect_open_error(dir_.string(), {index_path(), "'weight_map'"});
}

TEST_F(ShardedTest, WeightMapValueNotAString) {
  write_shards();
  json bad = index();
  bad["weight_map"]["norm"] = 2;
  write_index(bad);
  expect_open_error(dir_.string(), {index_path(), "'norm'"});
}

TEST_F(ShardedTest, ShardOutsideDirectory) {
  write_shards();
  json bad = index();
  bad["weight_map"]["norm"] = "../elsewhere.safetensors";
  write_index(bad);
  expect_open_error(dir_.string(), {index_path(), "'norm'", "../elsewhere.safetensors"});
}

TEST_F(ShardedTest, ShardMissing) {
  write_shards();
  fs::remove(file(kShard2));
  write_index(index());
  expect_open_error(dir_.string(), {index_path(), file(kShard2), "does not exist"});
}

TEST_F(ShardedTest, TensorMissingFromItsShard) {
  write_shards();
  json bad = index();
  bad["weight_map"]["ghost"] = kShard1;
  write_index(bad);
  expect_open_error(dir_.string(), {index_path(), "'ghost'", file(kShard1), "does not contain"});
}

TEST_F(ShardedTest, TensorInTheOtherShardThanIndexSays) {
  write_shards();
  json bad = index();
  bad["weight_map"]["norm"] = kShard1;  // norm really lives in shard 2
  write_index(bad);
  expect_open_error(dir_.string(), {"'norm'", file(kShard1), "does not contain"});
}

TEST_F(ShardedTest, SameTensorInTwoShards) {
  write_shards();
  CheckpointBuilder second;
  second.add("layer.1", "F32", {2}, bytes_of(std::vector<float>{7, 8}))
      .add("embed", "BF16", {2, 2}, bytes_of(std::vector<uint16_t>{1, 2, 3, 4}));
  second.write(file(kShard2));
  json with_both = index();
  with_both["weight_map"].erase("norm");
  write_index(with_both);
  expect_open_error(dir_.string(), {index_path(), "'embed'", file(kShard1), file(kShard2)});
}

TEST_F(ShardedTest, BrokenShardNamesTheShard) {
  write_shards();
  write_file(file(kShard2), safetensors_bytes("{\"layer.1\": 3}", ""));
  write_index(index());
  expect_open_error(dir_.string(), {file(kShard2), "'layer.1'", "not a JSON object"});
}

}  // namespace
}  // namespace lumen::formats
