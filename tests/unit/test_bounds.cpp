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
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "base/json.h"
#include "formats/mapped_file.h"
#include "formats/packed.h"
#include "formats/safetensors.h"
#include "runtime/sampler.h"
#include "server/openai_api.h"
#include "spec/model_spec.h"
#include "tokenizer/tokenizer.h"

namespace lumen {
namespace {

namespace fs = std::filesystem;

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

fs::path temp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("lumen-bounds-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((v >> (8 * i)) & 0xff);
  return out;
}

// The error `fn` throws, which must be a one-line lumen::Error.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(JsonBounds, NestingDeeperThanTheLimitIsAParseError) {
  EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth)));
  EXPECT_THROW(parse_json(nested(kMaxJsonDepth + 1)), nlohmann::json::parse_error);
  // A megabyte of brackets is refused without recursing through it.
  EXPECT_THROW(parse_json(nested(500000)), nlohmann::json::parse_error);
  EXPECT_THROW(parse_json("{\"a\":" + nested(100) + "}"), nlohmann::json::parse_error);
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
  const fs::path config = temp_path("config.json");
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

TEST(MappedFileChange, TruncatedModifiedReplacedRemoved) {
  const fs::path path = temp_path("weights.bin");
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
    const fs::path other = temp_path("weights.new");
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
