// GGUF reader and ggml block dequantization: synthetic files written here read back exactly
// (every metadata type, nested arrays, F32/F16/Q8_0/Q4_K/Q6_K tensors with hand-computed
// values); every malformed input fails with one lumen::Error line naming the file and the
// key or tensor at fault.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "formats/gguf.h"
#include "quant/ggml_blocks.h"
#include "test_helpers.h"

using lumen::test_support::write_file;

namespace lumen::formats {
namespace {

namespace fs = std::filesystem;

// --- byte writers ----------------------------------------------------------------------

template <typename T>
std::string le(T value) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &value, sizeof(T));  // the test hosts are little-endian
  return out;
}
std::string u32(uint32_t v) { return le(v); }
std::string u64(uint64_t v) { return le(v); }
std::string gstr(const std::string& s) { return u64(s.size()) + s; }

// An array value body: element type, count, elements.
std::string garray(GgufType element, uint64_t count, const std::string& elements) {
  return u32(uint32_t(element)) + u64(count) + elements;
}

uint16_t f16_bits(float value) {  // exact for the values used here (small dyadic numbers)
  if (value == 0.0f) return std::signbit(value) ? 0x8000 : 0;
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = int((bits >> 23) & 0xff) - 127 + 15;
  const uint32_t mantissa = (bits >> 13) & 0x3ffu;
  return uint16_t(sign | (uint32_t(exponent) << 10) | mantissa);
}

// Builds a GGUF file the way llama.cpp's writer lays it out; tests then break one thing.
class GgufBuilder {
 public:
  struct Info {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
  };

  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count_override;
  std::optional<uint64_t> kv_count_override;
  uint64_t alignment = 32;  // used to place tensors; set general.alignment separately
  std::vector<Info> infos;
  std::string data;

  GgufBuilder& kv(const std::string& key, GgufType type, const std::string& body) {
    kvs_ += gstr(key) + u32(uint32_t(type)) + body;
    ++kv_count_;
    return *this;
  }
  GgufBuilder& kv_raw(const std::string& bytes, uint64_t count = 1) {
    kvs_ += bytes;
    kv_count_ += count;
    return *this;
  }

  // Appends a tensor's bytes at the next aligned offset.
  GgufBuilder& tensor(const std::string& name, GgmlType type, std::vector<uint64_t> ne,
                      const std::string& bytes) {
    while (data.size() % alignment != 0) data += '\0';
    infos.push_back({name, std::move(ne), uint32_t(type), data.size()});
    data += bytes;
    return *this;
  }

  std::string header_and_infos() const {
    std::string out = magic + u32(version) + u64(tensor_count_override.value_or(infos.size())) +
                      u64(kv_count_override.value_or(kv_count_)) + kvs_;
    for (const Info& info : infos) {
      out += gstr(info.name) + u32(uint32_t(info.ne.size()));
      for (uint64_t d : info.ne) out += u64(d);
      out += u32(info.type) + u64(info.offset);
    }
    return out;
  }

  std::string bytes() const {
    std::string out = header_and_infos();
    while (out.size() % alignment != 0) out += '\0';
    return out + data;
  }

 private:
  std::string kvs_;
  uint64_t kv_count_ = 0;
};

std::string f32_bytes(const std::vector<float>& values) {
  std::string out;
  for (float v : values) out += le(v);
  return out;
}

// --- hand-built blocks -----------------------------------------------------------------

// Q8_0: d = 0.5, q = j - 16 for element j: x = (j - 16) / 2.
std::string q8_0_block() {
  std::string out = le(f16_bits(0.5f));
  for (int j = 0; j < 32; ++j) out += char(int8_t(j - 16));
  return out;
}

// Packs 8 six-bit scales and mins the way Q4_K/Q5_K store them (12 bytes): sub-blocks 0-3
// keep theirs in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 keep
// their low 4 bits in bytes 8-11 (scale low nibble, min high nibble) and their top 2 bits in
// the top 2 bits of bytes 0-3 (scale) and 4-7 (min).
std::string pack_k_scales(const int sc[8], const int mn[8]) {
  uint8_t b[12] = {};
  for (int j = 0; j < 4; ++j) {
    b[j] = uint8_t(sc[j] & 63);
    b[j + 4] = uint8_t(mn[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    b[j + 4] = uint8_t((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
    b[j - 4] |= uint8_t((sc[j] >> 4) << 6);
    b[j] |= uint8_t((mn[j] >> 4) << 6);
  }
  return std::string(reinterpret_cast<const char*>(b), 12);
}

// One Q4_K super-block: d = 0.5, dmin = 0.25, sub-block s has scale kSc[s], min kMn[s];
// element i has 4-bit q = (i * 5 + 3) % 16. Element i is sub-block i / 32; sub-blocks 2k and
// 2k+1 share the 32 bytes qs[32k .. 32k+31], 2k in the low nibbles, 2k+1 in the high ones.
constexpr int kQ4kSc[8] = {1, 2, 3, 63, 17, 40, 5, 33};
constexpr int kQ4kMn[8] = {0, 7, 12, 1, 50, 20, 63, 16};
int q4k_q(int i) { return (i * 5 + 3) % 16; }
float q4k_expected(int i) {
  const int s = i / 32;
  return 0.5f * float(kQ4kSc[s]) * float(q4k_q(i)) - 0.25f * float(kQ4kMn[s]);
}
std::string q4_k_block() {
  std::string out = le(f16_bits(0.5f)) + le(f16_bits(0.25f)) + pack_k_scales(kQ4kSc, kQ4kMn);
  std::string qs(128, '\0');
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, l = i % 32;
    const size_t byte = size_t(s / 2) * 32 + size_t(l);
    qs[byte] = char(uint8_t(qs[byte]) | (s % 2 == 0 ? q4k_q(i) : q4k_q(i) << 4));
  }
  return out + qs;
}

// One Q6_K super-block: d = 0.25, sixteen int8 scales kQ6Sc, element i has 6-bit
// q = (i * 7 + 1) % 64, x = d * scale[i / 16] * (q - 32). Layout: two halves of 128; in
// half h, element p = g * 32 + l (g = 0..3) keeps its low 4 bits in ql[64h + l + 32 (g & 1)]
// (low nibble for g < 2, high for g >= 2) and its top 2 bits at bit 2g of qh[32h + l].
constexpr int kQ6Sc[16] = {1, -2, 3, -4, 5, -6, 7, -8, 127, -128, 11, -12, 13, -14, 15, 0};
int q6k_q(int i) { return (i * 7 + 1) % 64; }
float q6k_expected(int i) { return 0.25f * float(kQ6Sc[i / 16]) * float(q6k_q(i) - 32); }
std::string q6_k_block() {
  uint8_t ql[128] = {}, qh[64] = {};
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, p = i % 128, g = p / 32, l = p % 32;
    const int q = q6k_q(i);
    uint8_t& low = ql[64 * h + l + 32 * (g & 1)];
    low = uint8_t(low | (g < 2 ? (q & 0xF) : (q & 0xF) << 4));
    qh[32 * h + l] = uint8_t(qh[32 * h + l] | ((q >> 4) << (2 * g)));
  }
  std::string out(reinterpret_cast<const char*>(ql), 128);
  out += std::string(reinterpret_cast<const char*>(qh), 64);
  for (int s : kQ6Sc) out += char(int8_t(s));
  return out + le(f16_bits(0.25f));
}

// --- fixture -----------------------------------------------------------------------------

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("lumen_gguf_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  std::string write(const std::string& bytes, const std::string& name = "model.gguf") {
    const std::string path = file(name);
    write_file(path, bytes);
    return path;
  }

  // Expects a lumen::Error of one line that holds the path and every fragment.
  static void expect_error_text(const std::string& message, const std::string& path,
                                std::initializer_list<std::string> expected) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << "does not start with the path: " << message;
    for (const std::string& fragment : expected)
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "missing '" << fragment << "' in: " << message;
  }

  void expect_open_error(const std::string& bytes, std::initializer_list<std::string> expected) {
    const std::string path = write(bytes, "broken.gguf");
    try {
      GgufFile::open(path);
      ADD_FAILURE() << "open did not throw; expected " << *expected.begin();
    } catch (const lumen::Error& e) {
      expect_error_text(e.what(), path, expected);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-lumen error: " << e.what();
    }
  }

  template <typename Fn>
  void expect_call_error(const std::string& path, Fn fn,
                         std::initializer_list<std::string> expected) {
    try {
      fn();
      ADD_FAILURE() << "did not throw; expected " << *expected.begin();
    } catch (const lumen::Error& e) {
      expect_error_text(e.what(), path, expected);
    }
  }

  // A small valid file: one F32 tensor "a" [4] and one Q8_0 tensor "b" [32, 2].
  static GgufBuilder valid_builder() {
    GgufBuilder b;
    b.kv("general.architecture", GgufType::STRING, gstr("gemma3"));
    b.tensor("a", GgmlType::F32, {4}, f32_bytes({1, 2, 3, 4}));
    b.tensor("b", GgmlType::Q8_0, {32, 2}, q8_0_block() + q8_0_block());
    return b;
  }

  fs::path dir_;
};

// --- metadata ------------------------------------------------------------------------------

TEST_F(GgufTest, ReadsEveryMetadataTypeInOrder) {
  GgufBuilder b;
  b.version = 2;
  b.kv("u8", GgufType::UINT8, le<uint8_t>(200))
      .kv("i8", GgufType::INT8, le<int8_t>(-100))
      .kv("u16", GgufType::UINT16, le<uint16_t>(65000))
      .kv("i16", GgufType::INT16, le<int16_t>(-30000))
      .kv("u32", GgufType::UINT32, le<uint32_t>(4000000000u))
      .kv("i32", GgufType::INT32, le<int32_t>(-2000000000))
      .kv("f32", GgufType::FLOAT32, le(0.1f))
      .kv("bool", GgufType::BOOL, le<uint8_t>(1))
      .kv("str", GgufType::STRING, gstr("h\xc3\xa9llo"))
      .kv("u64", GgufType::UINT64, le<uint64_t>(18446744073709551615ull))
      .kv("i64", GgufType::INT64, le<int64_t>(-4611686018427387904ll))
      .kv("f64", GgufType::FLOAT64, le(0.1))
      .kv("arr.str", GgufType::ARRAY,
          garray(GgufType::STRING, 3, gstr("a") + gstr("") + gstr("ccc")))
      .kv("arr.i16", GgufType::ARRAY,
          garray(GgufType::INT16, 3, le<int16_t>(-1) + le<int16_t>(2) + le<int16_t>(-3)))
      .kv("arr.f32", GgufType::ARRAY, garray(GgufType::FLOAT32, 2, le(0.5f) + le(-1.25f)))
      .kv("arr.bool", GgufType::ARRAY, garray(GgufType::BOOL, 2, le<uint8_t>(0) + le<uint8_t>(1)))
      .kv("arr.empty", GgufType::ARRAY, garray(GgufType::UINT64, 0, ""))
      .kv("arr.nested", GgufType::ARRAY,
          garray(GgufType::ARRAY, 2,
                 garray(GgufType::UINT32, 2, u32(1) + u32(2)) +
                     garray(GgufType::ARRAY, 1, garray(GgufType::STRING, 1, gstr("deep")))));
  const std::string path = write(b.bytes());
  const GgufFile f = GgufFile::open(path);

  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  ASSERT_EQ(f.metadata().size(), 18u);
  const std::vector<std::string> keys = {"u8",      "i8",      "u16",      "i16",       "u32",
                                         "i32",     "f32",     "bool",     "str",       "u64",
                                         "i64",     "f64",     "arr.str",  "arr.i16",   "arr.f32",
                                         "arr.bool", "arr.empty", "arr.nested"};
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(f.metadata()[i].first, keys[i]);

  EXPECT_EQ(f.find_metadata("u8")->type(), GgufType::UINT8);
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 65000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_int("i64"), -4611686018427387904ll);
  EXPECT_EQ(f.find_metadata("u64")->to_uint(), 18446744073709551615ull);
  EXPECT_EQ(f.get_float("f32"), double(0.1f));
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_float("u16"), 65000.0);  // integers are numbers too
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("str"), "h\xc3\xa9llo");
  EXPECT_TRUE(f.has("str"));
  EXPECT_FALSE(f.has("absent"));
  EXPECT_EQ(f.find_metadata("absent"), nullptr);

  EXPECT_EQ(f.get_string_array("arr.str"), (std::vector<std::string_view>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_int_array("arr.i16"), (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(f.get_float_array("arr.f32"), (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(f.get_float_array("arr.i16"), (std::vector<float>{-1.f, 2.f, -3.f}));
  const GgufArray& bools = f.get_array("arr.bool");
  EXPECT_EQ(bools.element_type(), GgufType::BOOL);
  ASSERT_EQ(bools.size(), 2u);
  EXPECT_EQ(bools.at(0).to_bool(), false);
  EXPECT_EQ(bools.at(1).to_bool(), true);
  EXPECT_TRUE(f.get_array("arr.empty").empty());
  EXPECT_EQ(f.get_array("arr.empty").element_type(), GgufType::UINT64);
  EXPECT_EQ(f.get_array("arr.i16").at(2).to_int(), -3);
  EXPECT_EQ(f.get_array("arr.str").at(2).to_string(), "ccc");
  EXPECT_THROW(f.get_array("arr.i16").at(3), std::out_of_range);

  const GgufArray& nested = f.get_array("arr.nested");
  EXPECT_EQ(nested.element_type(), GgufType::ARRAY);
  ASSERT_EQ(nested.size(), 2u);
  ASSERT_EQ(nested.arrays().size(), 2u);
  const GgufArray* first = nested.arrays()[0].array();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->element_type(), GgufType::UINT32);
  EXPECT_EQ(first->to_ints(), (std::vector<int64_t>{1, 2}));
  const GgufArray* second = nested.at(1).array();
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(second->size(), 1u);
  const GgufArray* deepest = second->arrays()[0].array();
  ASSERT_NE(deepest, nullptr);
  EXPECT_EQ(deepest->strings()[0], "deep");

  EXPECT_EQ(f.find_metadata("f32")->summary(), "0.1");
  EXPECT_EQ(f.find_metadata("i8")->summary(), "-100");
  EXPECT_EQ(f.find_metadata("bool")->summary(), "true");
  EXPECT_EQ(f.find_metadata("arr.str")->summary(), "[STRING x 3]");
}

TEST_F(GgufTest, TypedLookupsNameFileAndKeyOnMisuse) {
  GgufBuilder b;
  b.kv("name", GgufType::STRING, gstr("x"))
      .kv("big", GgufType::UINT64, le<uint64_t>(1ull << 63))
      .kv("eps", GgufType::FLOAT32, le(1e-6f))
      .kv("ints", GgufType::ARRAY, garray(GgufType::INT32, 1, le<int32_t>(5)))
      .kv("bigs", GgufType::ARRAY, garray(GgufType::UINT64, 1, u64(1ull << 63)))
      .kv("strs", GgufType::ARRAY, garray(GgufType::STRING, 1, gstr("s")));
  const std::string path = write(b.bytes());
  const GgufFile f = GgufFile::open(path);

  expect_call_error(path, [&] { f.get_string("missing.key"); }, {"'missing.key'", "is missing"});
  expect_call_error(path, [&] { f.get_int("name"); }, {"'name'", "STRING", "not an integer"});
  expect_call_error(path, [&] { f.get_int("eps"); }, {"'eps'", "FLOAT32", "not an integer"});
  expect_call_error(path, [&] { f.get_int("big"); }, {"'big'", "9223372036854775808", "too large"});
  expect_call_error(path, [&] { f.get_float("name"); }, {"'name'", "not a number"});
  expect_call_error(path, [&] { f.get_bool("eps"); }, {"'eps'", "not BOOL"});
  expect_call_error(path, [&] { f.get_string("eps"); }, {"'eps'", "not a string"});
  expect_call_error(path, [&] { f.get_array("name"); }, {"'name'", "not an array"});
  expect_call_error(path, [&] { f.get_string("ints"); }, {"'ints'", "ARRAY of INT32"});
  expect_call_error(path, [&] { f.get_string_array("ints"); }, {"'ints'", "INT32", "not of STRING"});
  expect_call_error(path, [&] { f.get_int_array("strs"); }, {"'strs'", "not of integers"});
  expect_call_error(path, [&] { f.get_int_array("bigs"); }, {"'bigs'", "too large"});
  expect_call_error(path, [&] { f.get_float_array("strs"); }, {"'strs'", "not of numbers"});
  expect_call_error(path, [&] { f.tensor("blk.0.attn_q.weight"); }, {"'blk.0.attn_q.weight'"});
  EXPECT_EQ(f.get_int_array("ints"), std::vector<int64_t>{5});
}

TEST_F(GgufTest, LargeStringArrayLoadsAsViews) {
  constexpr uint64_t kCount = 262144;
  std::string elements;
  for (uint64_t i = 0; i < kCount; ++i) elements += gstr("t" + std::to_string(i));
  GgufBuilder b;
  b.kv("tokenizer.ggml.tokens", GgufType::ARRAY, garray(GgufType::STRING, kCount, elements));
  const GgufFile f = GgufFile::open(write(b.bytes()));
  const GgufArray& tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.strings().size(), kCount);
  EXPECT_EQ(tokens.strings()[0], "t0");
  EXPECT_EQ(tokens.strings()[kCount - 1], "t262143");
}

TEST_F(GgufTest, MovedFileKeepsViewsValid) {
  GgufFile f = GgufFile::open(write(valid_builder().bytes()));
  const std::byte* data = f.find("a")->data;
  GgufFile moved = std::move(f);
  EXPECT_EQ(moved.find("a")->data, data);
  EXPECT_EQ(moved.get_string("general.architecture"), "gemma3");
  float first;
  std::memcpy(&first, moved.find("a")->data, 4);
  EXPECT_EQ(first, 1.0f);
}

// --- tensors -------------------------------------------------------------------------------

TEST_F(GgufTest, TensorsDequantizeToHandComputedValues) {
  GgufBuilder b;
  b.kv("general.alignment", GgufType::UINT32, u32(64));
  b.alignment = 64;
  const std::vector<float> f32 = {1.5f, -2.0f, 0.25f, 8.0f, -0.0f, 3.0f};
  std::string f16;
  for (float v : {1.0f, -2.0f, 0.5f, 65504.0f}) f16 += le(f16_bits(v));
  b.tensor("f32", GgmlType::F32, {3, 2}, f32_bytes(f32))
      .tensor("f16", GgmlType::F16, {4}, f16)
      .tensor("q8", GgmlType::Q8_0, {64, 1}, q8_0_block() + q8_0_block())
      .tensor("q4k", GgmlType::Q4_K, {256, 2}, q4_k_block() + q4_k_block())
      .tensor("q6k", GgmlType::Q6_K, {256, 1, 1}, q6_k_block());
  const std::string path = write(b.bytes());
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.tensors()[0].name, "f32");  // file order
  EXPECT_EQ(f.tensors()[4].name, "q6k");

  auto row = [](const GgufTensor& t, int64_t r) {
    std::vector<float> out(static_cast<size_t>(t.row_length()));
    quant::dequantize_ggml_row(int(t.type), t.data + size_t(r) * t.row_bytes(), t.row_length(),
                               out.data());
    return out;
  };

  const GgufTensor& t32 = f.tensor("f32");
  EXPECT_EQ(t32.type, GgmlType::F32);
  EXPECT_EQ(t32.ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t32.shape, (std::vector<int64_t>{2, 3}));  // row-major: [ne1, ne0]
  EXPECT_EQ(t32.numel(), 6);
  EXPECT_EQ(t32.rows(), 2);
  EXPECT_EQ(t32.row_length(), 3);
  EXPECT_EQ(t32.row_bytes(), 12u);
  EXPECT_EQ(t32.nbytes, 24u);
  EXPECT_EQ(t32.offset, 0u);
  EXPECT_EQ(row(t32, 0), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  EXPECT_EQ(row(t32, 1), (std::vector<float>{8.0f, -0.0f, 3.0f}));

  const GgufTensor& t16 = f.tensor("f16");
  EXPECT_EQ(t16.offset, 64u);  // aligned to general.alignment
  EXPECT_EQ(t16.nbytes, 8u);
  EXPECT_EQ(row(t16, 0), (std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f}));

  const GgufTensor& q8 = f.tensor("q8");
  EXPECT_EQ(q8.type, GgmlType::Q8_0);
  EXPECT_EQ(q8.offset, 128u);
  EXPECT_EQ(q8.nbytes, 68u);
  EXPECT_EQ(q8.rows(), 1);
  const std::vector<float> q8_row = row(q8, 0);
  EXPECT_EQ(q8_row[0], -8.0f);   // (0 - 16) * 0.5
  EXPECT_EQ(q8_row[16], 0.0f);
  EXPECT_EQ(q8_row[31], 7.5f);   // (31 - 16) * 0.5
  EXPECT_EQ(q8_row[32], -8.0f);  // second block
  for (int j = 0; j < 64; ++j) EXPECT_EQ(q8_row[size_t(j)], float((j % 32) - 16) * 0.5f) << j;

  const GgufTensor& q4k = f.tensor("q4k");
  EXPECT_EQ(q4k.shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(q4k.nbytes, 288u);
  EXPECT_EQ(q4k.row_bytes(), 144u);
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> y = row(q4k, r);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[size_t(i)], q4k_expected(i)) << "q4k " << i;
  }
  const std::vector<float> y4 = row(q4k, 0);
  EXPECT_EQ(y4[0], 1.5f);      // sub-block 0: scale 1, min 0, q 3: 0.5*1*3 - 0.25*0
  EXPECT_EQ(y4[100], 220.25f); // sub-block 3: scale 63, min 1, q 7: 0.5*63*7 - 0.25*1
  EXPECT_EQ(y4[130], 98.0f);   // sub-block 4 (packed high bits): scale 17, min 50, q 13
  EXPECT_EQ(y4[255], 227.0f);  // sub-block 7: scale 33, min 16, q 14: 231 - 4

  const GgufTensor& q6k = f.tensor("q6k");
  EXPECT_EQ(q6k.ne, (std::vector<int64_t>{256, 1, 1}));
  EXPECT_EQ(q6k.shape, (std::vector<int64_t>{1, 1, 256}));
  EXPECT_EQ(q6k.nbytes, 210u);
  const std::vector<float> y6 = row(q6k, 0);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y6[size_t(i)], q6k_expected(i)) << "q6k " << i;
  EXPECT_EQ(y6[0], -7.75f);    // scale 1, q 1: 0.25*1*(1-32)
  EXPECT_EQ(y6[17], -12.0f);    // scale -2, q 120 % 64 = 56: 0.25*-2*24
  EXPECT_EQ(y6[130], -539.75f); // second half, scale 127, q 15: 0.25*127*-17
  EXPECT_EQ(y6[143], 317.5f);   // second half, scale 127, q 42: 0.25*127*10
  EXPECT_EQ(y6[255], 0.0f);     // scale 0
}

TEST_F(GgufTest, FindAndTensorLookups) {
  const std::string path = write(valid_builder().bytes());
  const GgufFile f = GgufFile::open(path);
  ASSERT_NE(f.find("a"), nullptr);
  EXPECT_EQ(f.find("a")->name, "a");
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_EQ(&f.tensor("b"), f.find("b"));
  EXPECT_EQ(f.tensor("b").offset, 32u);  // "a" takes 16 bytes, padded to 32
  expect_call_error(path, [&] { f.tensor("absent"); }, {"has no tensor 'absent'"});
}

TEST_F(GgufTest, ScalarAndEmptyTensors) {
  GgufBuilder b;
  b.tensor("scalar", GgmlType::F32, {}, f32_bytes({42.0f}))
      .tensor("empty", GgmlType::Q4_K, {256, 0}, "");
  const GgufFile f = GgufFile::open(write(b.bytes()));
  EXPECT_TRUE(f.tensor("scalar").ne.empty());
  EXPECT_EQ(f.tensor("scalar").numel(), 1);
  EXPECT_EQ(f.tensor("scalar").nbytes, 4u);
  EXPECT_EQ(f.tensor("empty").nbytes, 0u);
  EXPECT_EQ(f.tensor("empty").numel(), 0);
}

// --- tokenizer -----------------------------------------------------------------------------

GgufBuilder tokenizer_builder() {
  GgufBuilder b;
  b.kv("tokenizer.ggml.model", GgufType::STRING, gstr("llama"))
      .kv("tokenizer.ggml.pre", GgufType::STRING, gstr("default"))
      .kv("tokenizer.ggml.tokens", GgufType::ARRAY,
          garray(GgufType::STRING, 4, gstr("<pad>") + gstr("<eos>") + gstr("<bos>") + gstr("a")))
      .kv("tokenizer.ggml.scores", GgufType::ARRAY,
          garray(GgufType::FLOAT32, 4, le(-1000.f) + le(-1000.f) + le(-1000.f) + le(-3.5f)))
      .kv("tokenizer.ggml.token_type", GgufType::ARRAY,
          garray(GgufType::INT32, 4, le<int32_t>(3) + le<int32_t>(3) + le<int32_t>(3) +
                                         le<int32_t>(1)))
      .kv("tokenizer.ggml.merges", GgufType::ARRAY, garray(GgufType::STRING, 1, gstr("a b")))
      .kv("tokenizer.ggml.bos_token_id", GgufType::UINT32, u32(2))
      .kv("tokenizer.ggml.eos_token_id", GgufType::UINT32, u32(1))
      .kv("tokenizer.ggml.padding_token_id", GgufType::UINT32, u32(0))
      .kv("tokenizer.ggml.add_bos_token", GgufType::BOOL, le<uint8_t>(1))
      .kv("tokenizer.ggml.add_eos_token", GgufType::BOOL, le<uint8_t>(0));
  return b;
}

TEST_F(GgufTest, TokenizerDataIsLocated) {
  const GgufFile f = GgufFile::open(write(tokenizer_builder().bytes()));
  const GgufTokenizerData t = f.tokenizer();
  EXPECT_EQ(t.model, "llama");
  EXPECT_EQ(t.pre, "default");
  EXPECT_EQ(t.tokens, (std::vector<std::string_view>{"<pad>", "<eos>", "<bos>", "a"}));
  EXPECT_EQ(t.scores, (std::vector<float>{-1000.f, -1000.f, -1000.f, -3.5f}));
  EXPECT_EQ(t.token_type, (std::vector<int32_t>{3, 3, 3, 1}));
  EXPECT_EQ(t.merges, (std::vector<std::string_view>{"a b"}));
  EXPECT_EQ(t.bos_id, 2);
  EXPECT_EQ(t.eos_id, 1);
  EXPECT_EQ(t.pad_id, 0);
  EXPECT_FALSE(t.unk_id.has_value());
  EXPECT_EQ(t.add_bos, true);
  EXPECT_EQ(t.add_eos, false);
  EXPECT_FALSE(t.chat_template.has_value());
}

TEST_F(GgufTest, TokenizerErrorsNameTheKey) {
  {
    GgufBuilder b;
    b.kv("general.architecture", GgufType::STRING, gstr("gemma3"));
    const std::string path = write(b.bytes(), "none.gguf");
    const GgufFile f = GgufFile::open(path);
    expect_call_error(path, [&] { f.tokenizer(); }, {"'tokenizer.ggml.model'", "is missing"});
  }
  {
    GgufBuilder b = tokenizer_builder();
    b.kv("tokenizer.ggml.unknown_token_id", GgufType::UINT32, u32(4));
    const std::string path = write(b.bytes(), "unk.gguf");
    const GgufFile f = GgufFile::open(path);
    expect_call_error(path, [&] { f.tokenizer(); },
                      {"'tokenizer.ggml.unknown_token_id'", "4", "outside the vocabulary of 4"});
  }
  {
    GgufBuilder b;
    b.kv("tokenizer.ggml.model", GgufType::STRING, gstr("llama"))
        .kv("tokenizer.ggml.tokens", GgufType::ARRAY, garray(GgufType::STRING, 1, gstr("x")))
        .kv("tokenizer.ggml.scores", GgufType::ARRAY,
            garray(GgufType::FLOAT32, 2, le(1.f) + le(2.f)));
    const std::string path = write(b.bytes(), "scores.gguf");
    const GgufFile f = GgufFile::open(path);
    expect_call_error(path, [&] { f.tokenizer(); },
                      {"'tokenizer.ggml.scores'", "has 2 entries", "tokens has 1"});
  }
}

// --- malformed files -----------------------------------------------------------------------

TEST_F(GgufTest, RejectsShortFilesAndBadHeaders) {
  expect_open_error("", {"0 bytes", "too short for a GGUF header"});
  expect_open_error("GGUF" + u32(3), {"8 bytes", "too short"});
  expect_open_error("hello", {"not a GGUF file", "'hell'"});
  expect_open_error("GG", {"2 bytes", "too short"});

  GgufBuilder magic = valid_builder();
  magic.magic = "GGML";
  expect_open_error(magic.bytes(), {"not a GGUF file", "'GGML'"});

  GgufBuilder v1 = valid_builder();
  v1.version = 1;
  expect_open_error(v1.bytes(), {"GGUF version 1 is not supported", "32-bit counts"});
  GgufBuilder v4 = valid_builder();
  v4.version = 4;
  expect_open_error(v4.bytes(), {"GGUF version 4 is not supported"});
  GgufBuilder big_endian = valid_builder();
  big_endian.version = 0x03000000;
  expect_open_error(big_endian.bytes(), {"big-endian"});

  GgufBuilder kvs = valid_builder();
  kvs.kv_count_override = 1ull << 60;
  expect_open_error(kvs.bytes(), {"claims 1152921504606846976 metadata entries"});
  GgufBuilder tensors = valid_builder();
  tensors.tensor_count_override = 1ull << 40;
  expect_open_error(tensors.bytes(), {"claims 1099511627776 tensors"});
}

TEST_F(GgufTest, RejectsBadMetadata) {
  // Truncations end the file right after the metadata (bytes() would pad it).
  {  // a key whose length runs past the end
    GgufBuilder b;
    b.kv_raw(u64(1000) + std::string(20, 'k'));
    expect_open_error(b.header_and_infos(), {"truncated", "key of metadata entry '#0'", "needs 1000 bytes"});
  }
  {  // a value cut short
    GgufBuilder b;
    b.kv("general.name", GgufType::STRING, gstr("ok"));
    b.kv_raw(gstr("cut.value") + u32(uint32_t(GgufType::UINT64)) + "abc");
    expect_open_error(b.header_and_infos(), {"truncated", "'cut.value'", "needs 8 bytes"});
  }
  {  // a string value whose length runs past the end
    GgufBuilder b;
    b.kv_raw(gstr("general.name") + u32(uint32_t(GgufType::STRING)) + u64(1ull << 62) + "x");
    expect_open_error(b.header_and_infos(), {"truncated", "'general.name'", "needs 4611686018427387904"});
  }
  {  // an array claiming more elements than the file holds
    GgufBuilder b;
    b.kv_raw(gstr("tokenizer.ggml.scores") + u32(uint32_t(GgufType::ARRAY)) +
             garray(GgufType::FLOAT32, 1ull << 40, le(1.0f)));
    expect_open_error(b.header_and_infos(), {"truncated", "'tokenizer.ggml.scores'", "1099511627776 FLOAT32"});
  }
  {  // a string inside an array cut short
    GgufBuilder b;
    b.kv_raw(gstr("tokenizer.ggml.tokens") + u32(uint32_t(GgufType::ARRAY)) +
             garray(GgufType::STRING, 2, gstr("a") + u64(50) + "b"));
    expect_open_error(b.header_and_infos(), {"truncated", "'tokenizer.ggml.tokens'", "needs 50 bytes"});
  }
  {
    GgufBuilder b;
    b.kv("weird", GgufType(13), u32(0));
    expect_open_error(b.bytes(), {"metadata key 'weird'", "unknown value type 13"});
  }
  {
    GgufBuilder b;
    b.kv("weird.array", GgufType::ARRAY, garray(GgufType(77), 1, "x"));
    expect_open_error(b.bytes(), {"metadata key 'weird.array'", "array of unknown value type 77"});
  }
  {
    GgufBuilder b;
    b.kv("flag", GgufType::BOOL, le<uint8_t>(2));
    expect_open_error(b.bytes(), {"metadata key 'flag'", "BOOL value 2"});
  }
  {
    GgufBuilder b;
    b.kv("flags", GgufType::ARRAY, garray(GgufType::BOOL, 2, le<uint8_t>(1) + le<uint8_t>(9)));
    expect_open_error(b.bytes(), {"metadata key 'flags'", "element 1 = 9"});
  }
  {  // arrays nested 40 deep
    std::string body = garray(GgufType::UINT8, 0, "");
    for (int i = 0; i < 40; ++i) body = garray(GgufType::ARRAY, 1, body);
    GgufBuilder b;
    b.kv("deep", GgufType::ARRAY, body);
    expect_open_error(b.bytes(), {"metadata key 'deep'", "nested more than 16 deep"});
  }
  {
    GgufBuilder b;
    b.kv("general.name", GgufType::STRING, gstr("a")).kv("general.name", GgufType::STRING, gstr("b"));
    expect_open_error(b.bytes(), {"metadata key 'general.name'", "appears twice"});
  }
  {
    GgufBuilder b;
    b.kv("general.alignment", GgufType::UINT64, u64(32));
    expect_open_error(b.bytes(), {"'general.alignment'", "UINT64, not UINT32"});
  }
  {
    GgufBuilder b;
    b.kv("general.alignment", GgufType::UINT32, u32(24));
    expect_open_error(b.bytes(), {"'general.alignment'", "24, not a power of two"});
  }
  {  // control bytes in a key stay on one line
    GgufBuilder b;
    b.kv("bad\nkey", GgufType(99), "");
    expect_open_error(b.bytes(), {"'bad\\x0akey'"});
  }
}

TEST_F(GgufTest, RejectsBadTensorInfos) {
  auto with_tensor = [](const std::string& name, uint32_t type, std::vector<uint64_t> ne,
                        uint64_t offset, const std::string& data) {
    GgufBuilder b;
    b.infos.push_back({name, std::move(ne), type, offset});
    b.data = data;
    return b.bytes();
  };
  expect_open_error(with_tensor("blk.0.x", 99, {32}, 0, std::string(64, '\0')),
                    {"tensor 'blk.0.x'", "unknown ggml type 99"});
  expect_open_error(with_tensor("blk.0.y", 4, {32}, 0, std::string(64, '\0')),
                    {"tensor 'blk.0.y'", "ggml type 4 (Q4_2)", "removed"});
  expect_open_error(with_tensor("five", 0, {1, 1, 1, 1, 1}, 0, std::string(4, '\0')),
                    {"tensor 'five'", "5 dimensions", "at most 4"});
  expect_open_error(with_tensor("huge.dim", 0, {1ull << 63}, 0, ""),
                    {"tensor 'huge.dim'", "ne[0] = 9223372036854775808", "too large"});
  expect_open_error(with_tensor("overflow", 0, {1ull << 40, 1ull << 40}, 0, ""),
                    {"tensor 'overflow'", "too large to address"});
  expect_open_error(with_tensor("blk.3.ffn_down.weight", uint32_t(GgmlType::Q4_K), {100, 2}, 0,
                                std::string(288, '\0')),
                    {"tensor 'blk.3.ffn_down.weight'", "Q4_K ne [100, 2]",
                     "not a multiple of the Q4_K block size 256"});
  expect_open_error(with_tensor("misaligned", 0, {4}, 8, std::string(64, '\0')),
                    {"tensor 'misaligned'", "data offset 8", "not a multiple of the alignment 32"});
  expect_open_error(with_tensor("token_embd.weight", uint32_t(GgmlType::Q8_0), {64, 4}, 0,
                                std::string(100, '\0')),
                    {"tensor 'token_embd.weight'", "272 bytes at data offset 0",
                     "runs past the end", "holds only 100 bytes", "truncated"});
  expect_open_error(with_tensor("far", 0, {4}, 1ull << 62, std::string(16, '\0')),
                    {"tensor 'far'", "runs past the end"});

  {  // overlapping
    GgufBuilder b = valid_builder();
    b.infos[1].offset = 0;
    b.infos[1].ne = {32, 1};
    b.data.resize(64);
    expect_open_error(b.bytes(), {"tensors 'a'", "'b'", "overlap"});
  }
  {  // duplicate names
    GgufBuilder b = valid_builder();
    b.infos[1].name = "a";
    expect_open_error(b.bytes(), {"tensor 'a'", "appears twice"});
  }
  {  // a truncated tensor info
    GgufBuilder b = valid_builder();
    std::string bytes = b.header_and_infos();
    bytes.resize(bytes.size() - 4);
    expect_open_error(bytes, {"truncated", "info of tensor 'b'"});
  }
  {  // the data section itself missing
    GgufBuilder b = valid_builder();
    expect_open_error(b.header_and_infos() + "x", {"truncated", "data section"});
  }
}

// Every prefix of a valid file fails cleanly (no crash, no non-lumen error), and the file
// itself opens.
TEST_F(GgufTest, EveryTruncationFailsCleanly) {
  GgufBuilder b = tokenizer_builder();
  b.kv("nested", GgufType::ARRAY,
       garray(GgufType::ARRAY, 1, garray(GgufType::STRING, 1, gstr("x"))));
  b.tensor("q4k", GgmlType::Q4_K, {256}, q4_k_block()).tensor("f", GgmlType::F32, {2}, f32_bytes({1, 2}));
  const std::string bytes = b.bytes();
  EXPECT_NO_THROW(GgufFile::open(write(bytes, "whole.gguf")));
  for (size_t length = 0; length < bytes.size(); ++length) {
    const std::string path = write(bytes.substr(0, length), "cut.gguf");
    try {
      GgufFile::open(path);
      ADD_FAILURE() << "prefix of " << length << " bytes opened";
    } catch (const lumen::Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST_F(GgufTest, MissingFileNamesPath) {
  const std::string path = file("absent.gguf");
  try {
    GgufFile::open(path);
    FAIL() << "no error";
  } catch (const lumen::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(GgufTypes, TraitsMatchGgml) {
  EXPECT_EQ(std::string(ggml_type_traits(uint32_t(GgmlType::Q4_K))->name), "Q4_K");
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q4_K))->type_size, 144u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q6_K))->type_size, 210u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q5_K))->type_size, 176u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q8_0))->type_size, 34u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q5_0))->type_size, 22u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::BF16))->block_size, 1);
  EXPECT_FALSE(ggml_type_traits(4).has_value());
  EXPECT_FALSE(ggml_type_traits(1000).has_value());
  EXPECT_EQ(ggml_type_name(GgmlType::BF16), "BF16");
  EXPECT_EQ(ggml_type_name(GgmlType(77)), "type 77");
  EXPECT_STREQ(gguf_type_name(GgufType::FLOAT64), "FLOAT64");
  // The quant layer numbers types the same way.
  EXPECT_EQ(int(GgmlType::Q4_K), quant::ggml_type::Q4_K);
  EXPECT_EQ(int(GgmlType::Q6_K), quant::ggml_type::Q6_K);
  EXPECT_EQ(int(GgmlType::Q5_0), quant::ggml_type::Q5_0);
  EXPECT_EQ(int(GgmlType::BF16), quant::ggml_type::BF16);
  for (int type : {0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30}) {
    EXPECT_EQ(quant::ggml_block_size(type), ggml_type_traits(uint32_t(type))->block_size);
    EXPECT_EQ(quant::ggml_block_bytes(type), ggml_type_traits(uint32_t(type))->type_size);
  }
}

}  // namespace
}  // namespace lumen::formats

// --- ggml blocks, directly -----------------------------------------------------------------

namespace lumen::quant {
namespace {

using formats::GgmlType;

std::vector<float> dequant(int type, const std::string& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_ggml_row(type, bytes.data(), n, out.data());
  return out;
}

std::string half(float v) { return formats::le(formats::f16_bits(v)); }

TEST(GgmlBlocks, Q4_0AndQ4_1) {
  // qs[j] = j | (15 - j) << 4: element j < 16 has nibble j, element j + 16 has 15 - j.
  std::string qs;
  for (int j = 0; j < 16; ++j) qs += char(uint8_t(j | ((15 - j) << 4)));
  const std::vector<float> q40 = dequant(ggml_type::Q4_0, half(0.5f) + qs, 32);
  const std::vector<float> q41 = dequant(ggml_type::Q4_1, half(0.5f) + half(-1.0f) + qs, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(q40[size_t(j)], 0.5f * float(j - 8)) << j;
    EXPECT_EQ(q40[size_t(j) + 16], 0.5f * float(15 - j - 8)) << j;
    EXPECT_EQ(q41[size_t(j)], 0.5f * float(j) - 1.0f) << j;
    EXPECT_EQ(q41[size_t(j) + 16], 0.5f * float(15 - j) - 1.0f) << j;
  }
}

TEST(GgmlBlocks, Q5_0AndQ5_1UseTheHighBits) {
  // All nibbles 0xF; qh has bit j set for odd j: element j is 15 | 16 * (j odd).
  const std::string qs(16, char(0xff));
  const std::string qh = formats::u32(0xAAAAAAAAu);
  const std::vector<float> q50 = dequant(ggml_type::Q5_0, half(2.0f) + qh + qs, 32);
  const std::vector<float> q51 = dequant(ggml_type::Q5_1, half(2.0f) + half(0.5f) + qh + qs, 32);
  for (int j = 0; j < 32; ++j) {
    const int q = 15 + (j % 2 ? 16 : 0);
    EXPECT_EQ(q50[size_t(j)], 2.0f * float(q - 16)) << j;
    EXPECT_EQ(q51[size_t(j)], 2.0f * float(q) + 0.5f) << j;
  }
}

TEST(GgmlBlocks, Q5_KMatchesItsLayout) {
  const int sc[8] = {1, 2, 3, 4, 20, 30, 40, 63};
  const int mn[8] = {8, 7, 6, 5, 40, 30, 20, 10};
  // Element i: sub-block s = i / 32, low 4 bits in qs[32 (s / 2) + i % 32] (low nibble for even
  // s), high bit at bit s of qh[i % 32].
  auto q = [](int i) { return (i * 11 + 5) % 32; };
  std::string qs(128, '\0'), qh(32, '\0');
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, l = i % 32;
    const size_t byte = size_t(s / 2) * 32 + size_t(l);
    qs[byte] = char(uint8_t(qs[byte]) | (s % 2 == 0 ? (q(i) & 0xF) : (q(i) & 0xF) << 4));
    qh[size_t(l)] = char(uint8_t(qh[size_t(l)]) | ((q(i) >> 4) << s));
  }
  const std::string block = half(0.25f) + half(0.5f) + formats::pack_k_scales(sc, mn) + qh + qs;
  ASSERT_EQ(block.size(), sizeof(BlockQ5_K));
  const std::vector<float> y = dequant(ggml_type::Q5_K, block, 256);
  for (int i = 0; i < 256; ++i)
    ASSERT_EQ(y[size_t(i)], 0.25f * float(sc[i / 32]) * float(q(i)) - 0.5f * float(mn[i / 32]))
        << i;
}

TEST(GgmlBlocks, KScaleMinUnpacksSixBits) {
  const int sc[8] = {0, 63, 1, 62, 63, 0, 33, 48};
  const int mn[8] = {63, 0, 2, 61, 1, 63, 17, 15};
  const std::string packed = formats::pack_k_scales(sc, mn);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    ggml_k_scale_min(j, reinterpret_cast<const uint8_t*>(packed.data()), &s, &m);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
  }
}

TEST(GgmlBlocks, FloatRowsAndUnalignedInput) {
  std::string bytes = "x" + formats::le(f32_to_bf16(1.5f)) + formats::le(f32_to_bf16(-4.0f));
  std::vector<float> out(2);
  dequantize_ggml_row(ggml_type::BF16, bytes.data() + 1, 2, out.data());  // odd address
  EXPECT_EQ(out, (std::vector<float>{1.5f, -4.0f}));
  EXPECT_EQ(dequant(ggml_type::F16, half(-0.5f) + formats::le(uint16_t(0x0001)), 2),
            (std::vector<float>{-0.5f, std::ldexp(1.0f, -24)}));  // incl. the smallest subnormal
  EXPECT_EQ(dequant(ggml_type::F32, formats::le(7.0f), 1), std::vector<float>{7.0f});
  dequantize_ggml_row(ggml_type::Q4_K, nullptr, 0, nullptr);  // an empty row is fine
}

TEST(GgmlBlocks, SizesAndErrors) {
  EXPECT_EQ(ggml_row_bytes(ggml_type::Q4_K, 640 * 4), 10u * 144u);
  EXPECT_EQ(ggml_row_bytes(ggml_type::Q8_0, 640), 20u * 34u);
  EXPECT_EQ(ggml_row_bytes(ggml_type::Q6_K, 2048), 8u * 210u);
  EXPECT_EQ(ggml_row_bytes(ggml_type::F16, 3), 6u);
  EXPECT_EQ(ggml_block_size(ggml_type::Q5_0), 32);
  EXPECT_TRUE(ggml_can_dequantize(ggml_type::Q5_K));
  EXPECT_FALSE(ggml_can_dequantize(int(GgmlType::IQ2_XXS)));
  EXPECT_STREQ(ggml_blocks_type_name(ggml_type::Q6_K), "Q6_K");

  auto expect_error = [](auto fn, const std::string& fragment) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << fragment;
    } catch (const lumen::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(fragment), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  };
  float out[256];
  expect_error([&] { dequantize_ggml_row(int(GgmlType::IQ2_XXS), out, 256, out); },
               "ggml type 16 is not supported");
  expect_error([&] { dequantize_ggml_row(ggml_type::Q4_K, out, 100, out); },
               "Q4_K row of 100 elements");
  expect_error([&] { ggml_row_bytes(ggml_type::Q8_0, 33); }, "Q8_0 row of 33 elements");
  expect_error([&] { ggml_row_bytes(ggml_type::F32, -1); }, "row of -1 elements");
  expect_error([&] { ggml_block_size(99); }, "ggml type 99");
}

}  // namespace
}  // namespace lumen::quant
