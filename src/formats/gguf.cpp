#include "formats/gguf.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "base/error.h"

namespace lumen::formats {

namespace {

constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, tensor count, kv count
constexpr int kMaxDims = 4;                      // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;               // nested arrays deeper than this are refused
// The least each record can take, to refuse counts the file cannot possibly hold before
// reserving memory for them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;          // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset


std::string str(uint64_t value) { return std::to_string(value); }

// What to reserve for `count` records the header claims. The count is checked against the
// bytes left, but a record in memory is several times its least size in the file: reserving
// for the claim itself would let a 1 GB file with a lying count ask for many gigabytes before
// its first record fails to parse. Beyond this, lists grow as records actually parse.
size_t reserve_hint(uint64_t count) { return size_t(std::min<uint64_t>(count, 4096)); }

template <typename T>
T load_le(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    auto* bytes = reinterpret_cast<unsigned char*>(&value);
    std::reverse(bytes, bytes + sizeof(T));
  }
  return value;
}

// Bytes of one scalar element; 0 for STRING, ARRAY and unknown types.
size_t scalar_size(GgufType type) {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    case GgufType::STRING: case GgufType::ARRAY: return 0;
  }
  return 0;
}

bool is_known_value_type(uint32_t id) { return id <= uint32_t(GgufType::FLOAT64); }

// Decodes one scalar element (not STRING/ARRAY) at p; the caller checked the bounds and,
// for BOOL, the byte.
GgufValue decode_scalar(GgufType type, const std::byte* p) {
  switch (type) {
    case GgufType::UINT8: return GgufValue::make_unsigned(type, load_le<uint8_t>(p));
    case GgufType::UINT16: return GgufValue::make_unsigned(type, load_le<uint16_t>(p));
    case GgufType::UINT32: return GgufValue::make_unsigned(type, load_le<uint32_t>(p));
    case GgufType::UINT64: return GgufValue::make_unsigned(type, load_le<uint64_t>(p));
    case GgufType::INT8: return GgufValue::make_signed(type, load_le<int8_t>(p));
    case GgufType::INT16: return GgufValue::make_signed(type, load_le<int16_t>(p));
    case GgufType::INT32: return GgufValue::make_signed(type, load_le<int32_t>(p));
    case GgufType::INT64: return GgufValue::make_signed(type, load_le<int64_t>(p));
    case GgufType::FLOAT32: return GgufValue::make_float(type, load_le<float>(p));
    case GgufType::FLOAT64: return GgufValue::make_float(type, load_le<double>(p));
    case GgufType::BOOL: return GgufValue::make_bool(load_le<uint8_t>(p) != 0);
    case GgufType::STRING: case GgufType::ARRAY: break;
  }
  return {};
}

// Layouts ggml numbered once and has since removed.
const char* removed_ggml_type(uint32_t id) {
  switch (id) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    default: return nullptr;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Types

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::UINT8: return "UINT8";
    case GgufType::INT8: return "INT8";
    case GgufType::UINT16: return "UINT16";
    case GgufType::INT16: return "INT16";
    case GgufType::UINT32: return "UINT32";
    case GgufType::INT32: return "INT32";
    case GgufType::FLOAT32: return "FLOAT32";
    case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING";
    case GgufType::ARRAY: return "ARRAY";
    case GgufType::UINT64: return "UINT64";
    case GgufType::INT64: return "INT64";
    case GgufType::FLOAT64: return "FLOAT64";
  }
  return "?";
}

bool gguf_type_is_integer(GgufType type) {
  switch (type) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
      return true;
    default: return false;
  }
}

bool gguf_type_is_float(GgufType type) {
  return type == GgufType::FLOAT32 || type == GgufType::FLOAT64;
}

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  constexpr int64_t QK_K = 256;
  switch (GgmlType(type_id)) {
    case GgmlType::F32: return GgmlTypeTraits{"F32", 1, 4};
    case GgmlType::F16: return GgmlTypeTraits{"F16", 1, 2};
    case GgmlType::Q4_0: return GgmlTypeTraits{"Q4_0", 32, 2 + 16};
    case GgmlType::Q4_1: return GgmlTypeTraits{"Q4_1", 32, 2 + 2 + 16};
    case GgmlType::Q5_0: return GgmlTypeTraits{"Q5_0", 32, 2 + 4 + 16};
    case GgmlType::Q5_1: return GgmlTypeTraits{"Q5_1", 32, 2 + 2 + 4 + 16};
    case GgmlType::Q8_0: return GgmlTypeTraits{"Q8_0", 32, 2 + 32};
    case GgmlType::Q8_1: return GgmlTypeTraits{"Q8_1", 32, 4 + 4 + 32};
    case GgmlType::Q2_K: return GgmlTypeTraits{"Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4};
    case GgmlType::Q3_K: return GgmlTypeTraits{"Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12};
    case GgmlType::Q4_K: return GgmlTypeTraits{"Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12};
    case GgmlType::Q5_K: return GgmlTypeTraits{"Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12};
    case GgmlType::Q6_K: return GgmlTypeTraits{"Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16};
    case GgmlType::Q8_K: return GgmlTypeTraits{"Q8_K", QK_K, 4 + QK_K + QK_K / 8};
    case GgmlType::IQ2_XXS: return GgmlTypeTraits{"IQ2_XXS", QK_K, 2 + QK_K / 4};
    case GgmlType::IQ2_XS: return GgmlTypeTraits{"IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32};
    case GgmlType::IQ3_XXS: return GgmlTypeTraits{"IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8};
    case GgmlType::IQ1_S: return GgmlTypeTraits{"IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16};
    case GgmlType::IQ4_NL: return GgmlTypeTraits{"IQ4_NL", 32, 2 + 16};
    case GgmlType::IQ3_S:
      return GgmlTypeTraits{"IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4};
    case GgmlType::IQ2_S: return GgmlTypeTraits{"IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16};
    case GgmlType::IQ4_XS: return GgmlTypeTraits{"IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64};
    case GgmlType::I8: return GgmlTypeTraits{"I8", 1, 1};
    case GgmlType::I16: return GgmlTypeTraits{"I16", 1, 2};
    case GgmlType::I32: return GgmlTypeTraits{"I32", 1, 4};
    case GgmlType::I64: return GgmlTypeTraits{"I64", 1, 8};
    case GgmlType::F64: return GgmlTypeTraits{"F64", 1, 8};
    case GgmlType::IQ1_M: return GgmlTypeTraits{"IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32};
    case GgmlType::BF16: return GgmlTypeTraits{"BF16", 1, 2};
    case GgmlType::TQ1_0: return GgmlTypeTraits{"TQ1_0", QK_K, 2 + 4 * 13};
    case GgmlType::TQ2_0: return GgmlTypeTraits{"TQ2_0", QK_K, 2 + 64};
    case GgmlType::MXFP4: return GgmlTypeTraits{"MXFP4", 32, 1 + 16};
    case GgmlType::NVFP4: return GgmlTypeTraits{"NVFP4", 64, 4 + 32};
    case GgmlType::Q1_0: return GgmlTypeTraits{"Q1_0", 128, 2 + 16};
  }
  return std::nullopt;
}

std::string ggml_type_name(GgmlType type) {
  if (auto traits = ggml_type_traits(uint32_t(type))) return traits->name;
  return "type " + std::to_string(uint32_t(type));
}

// ---------------------------------------------------------------------------------------
// Values

GgufValue GgufValue::make_unsigned(GgufType type, uint64_t value) {
  GgufValue v;
  v.type_ = type;
  v.bits_ = value;
  return v;
}

GgufValue GgufValue::make_signed(GgufType type, int64_t value) {
  GgufValue v;
  v.type_ = type;
  v.bits_ = uint64_t(value);
  return v;
}

GgufValue GgufValue::make_float(GgufType type, double value) {
  GgufValue v;
  v.type_ = type;
  std::memcpy(&v.bits_, &value, sizeof value);
  return v;
}

GgufValue GgufValue::make_bool(bool value) {
  GgufValue v;
  v.type_ = GgufType::BOOL;
  v.bits_ = value ? 1 : 0;
  return v;
}

GgufValue GgufValue::make_string(std::string_view value) {
  GgufValue v;
  v.type_ = GgufType::STRING;
  v.string_ = value;
  return v;
}

GgufValue GgufValue::make_array(std::shared_ptr<const GgufArray> value) {
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.array_ = std::move(value);
  return v;
}

namespace {
bool is_signed_type(GgufType type) {
  return type == GgufType::INT8 || type == GgufType::INT16 || type == GgufType::INT32 ||
         type == GgufType::INT64;
}
}  // namespace

std::optional<int64_t> GgufValue::to_int() const {
  if (!is_integer()) return std::nullopt;
  if (is_signed_type(type_)) return int64_t(bits_);
  if (bits_ > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return int64_t(bits_);
}

std::optional<uint64_t> GgufValue::to_uint() const {
  if (!is_integer()) return std::nullopt;
  if (is_signed_type(type_) && int64_t(bits_) < 0) return std::nullopt;
  return bits_;
}

std::optional<double> GgufValue::to_float() const {
  if (is_float()) {
    double value;
    std::memcpy(&value, &bits_, sizeof value);
    return value;
  }
  if (!is_integer()) return std::nullopt;
  if (is_signed_type(type_)) return double(int64_t(bits_));
  return double(bits_);
}

std::optional<bool> GgufValue::to_bool() const {
  if (type_ != GgufType::BOOL) return std::nullopt;
  return bits_ != 0;
}

std::optional<std::string_view> GgufValue::to_string() const {
  if (type_ != GgufType::STRING) return std::nullopt;
  return string_;
}

std::string GgufValue::summary() const {
  switch (type_) {
    case GgufType::BOOL: return bits_ ? "true" : "false";
    case GgufType::STRING: {
      constexpr size_t kMaxShown = 60;
      std::string out = "\"" + printable(string_.substr(0, kMaxShown));
      if (string_.size() > kMaxShown) out += "...";
      return out + "\" (" + str(string_.size()) + " bytes)";
    }
    case GgufType::ARRAY:
      if (array_ == nullptr) return "[]";
      return std::string("[") + gguf_type_name(array_->element_type()) + " x " +
             str(array_->size()) + "]";
    case GgufType::FLOAT32: case GgufType::FLOAT64: {
      char buffer[64];
      double value = *to_float();
      std::to_chars_result result =
          type_ == GgufType::FLOAT32
              ? std::to_chars(buffer, buffer + sizeof buffer, float(value))
              : std::to_chars(buffer, buffer + sizeof buffer, value);
      return std::string(buffer, result.ptr);
    }
    default:
      if (is_signed_type(type_)) return std::to_string(int64_t(bits_));
      return std::to_string(bits_);
  }
}

GgufValue GgufArray::at(size_t i) const {
  if (element_type_ == GgufType::STRING) return GgufValue::make_string(strings_.at(i));
  if (element_type_ == GgufType::ARRAY) return arrays_.at(i);
  if (i >= size_) throw std::out_of_range("GgufArray::at: index out of range");
  return decode_scalar(element_type_, raw_ + i * scalar_size(element_type_));
}

std::span<const GgufValue> GgufArray::arrays() const { return arrays_; }

namespace {

// Appends n packed little-endian elements of type T at p to out, converted.
template <typename T, typename Out>
void convert_packed(const std::byte* p, size_t n, Out* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Out(load_le<T>(p + i * sizeof(T)));
}

}  // namespace

std::optional<std::vector<int64_t>> GgufArray::to_ints() const {
  std::vector<int64_t> out(size_);
  switch (element_type_) {
    case GgufType::UINT8: convert_packed<uint8_t>(raw_, size_, out.data()); return out;
    case GgufType::INT8: convert_packed<int8_t>(raw_, size_, out.data()); return out;
    case GgufType::UINT16: convert_packed<uint16_t>(raw_, size_, out.data()); return out;
    case GgufType::INT16: convert_packed<int16_t>(raw_, size_, out.data()); return out;
    case GgufType::UINT32: convert_packed<uint32_t>(raw_, size_, out.data()); return out;
    case GgufType::INT32: convert_packed<int32_t>(raw_, size_, out.data()); return out;
    case GgufType::INT64: convert_packed<int64_t>(raw_, size_, out.data()); return out;
    case GgufType::UINT64:
      for (size_t i = 0; i < size_; ++i) {
        const auto value = load_le<uint64_t>(raw_ + 8 * i);
        if (value > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
        out[i] = int64_t(value);
      }
      return out;
    default: return std::nullopt;
  }
}

std::optional<std::vector<float>> GgufArray::to_floats() const {
  std::vector<float> out(size_);
  switch (element_type_) {
    case GgufType::FLOAT32: convert_packed<float>(raw_, size_, out.data()); return out;
    case GgufType::FLOAT64: convert_packed<double>(raw_, size_, out.data()); return out;
    case GgufType::UINT8: convert_packed<uint8_t>(raw_, size_, out.data()); return out;
    case GgufType::INT8: convert_packed<int8_t>(raw_, size_, out.data()); return out;
    case GgufType::UINT16: convert_packed<uint16_t>(raw_, size_, out.data()); return out;
    case GgufType::INT16: convert_packed<int16_t>(raw_, size_, out.data()); return out;
    case GgufType::UINT32: convert_packed<uint32_t>(raw_, size_, out.data()); return out;
    case GgufType::INT32: convert_packed<int32_t>(raw_, size_, out.data()); return out;
    case GgufType::UINT64: convert_packed<uint64_t>(raw_, size_, out.data()); return out;
    case GgufType::INT64: convert_packed<int64_t>(raw_, size_, out.data()); return out;
    default: return std::nullopt;
  }
}

// ---------------------------------------------------------------------------------------
// Tensors

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

int64_t GgufTensor::rows() const {
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

size_t GgufTensor::row_bytes() const {
  std::optional<GgmlTypeTraits> traits = ggml_type_traits(uint32_t(type));
  if (!traits) return 0;
  return size_t(row_length() / traits->block_size) * traits->type_size;
}

// ---------------------------------------------------------------------------------------
// Parsing

namespace {

// What a read is for, rendered only when it fails: "the value of metadata key 'k'".
struct Where {
  const char* what;
  std::string_view name = {};
  std::string render() const {
    std::string out = what;
    if (name.data() != nullptr) out += " " + in_quotes(name);
    return out;
  }
};

}  // namespace

class GgufParser {
 public:
  explicit GgufParser(GgufFile& out)
      : out_(out),
        path_(out.file_->path()),
        base_(out.file_->data()),
        size_(out.file_->size()) {}

  void parse() {
    parse_header();
    parse_metadata();
    parse_alignment();
    parse_tensor_infos();
    place_tensors();
    build_indexes();
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw Error(printable(path_) + ": " + message);
  }

  [[noreturn]] void fail_key(std::string_view key, const std::string& message) const {
    fail("metadata key " + in_quotes(key) + " " + message);
  }

  [[noreturn]] void fail_tensor(std::string_view name, const std::string& message) const {
    fail("tensor " + in_quotes(name) + " " + message);
  }

  size_t remaining() const { return size_ - pos_; }

  void need(uint64_t bytes, const Where& where) const {
    if (bytes > remaining())
      fail("truncated: " + where.render() + " needs " + str(bytes) + " bytes at offset " +
           str(pos_) + " but the file ends at " + str(size_));
  }

  template <typename T>
  T read(const Where& where) {
    need(sizeof(T), where);
    T value = load_le<T>(base_ + pos_);
    pos_ += sizeof(T);
    return value;
  }

  std::string_view read_string(const Where& where) {
    const uint64_t length = read<uint64_t>(where);
    need(length, where);
    std::string_view text(reinterpret_cast<const char*>(base_ + pos_), size_t(length));
    pos_ += size_t(length);
    return text;
  }

  void parse_header() {
    if (size_ >= 4) {
      std::string_view magic(reinterpret_cast<const char*>(base_), 4);
      if (magic != "GGUF")
        fail("not a GGUF file (starts with " + in_quotes(magic) + ", not 'GGUF')");
    }
    if (size_ < kHeaderBytes)
      fail("file is " + str(size_) + " bytes, too short for a GGUF header (needs at least " +
           str(kHeaderBytes) + ")");
    pos_ = 4;
    const uint32_t version = read<uint32_t>({"the version"});
    if (version != 2 && version != 3) {
      std::string message = "GGUF version " + str(version) + " is not supported (only 2 and 3 are)";
      if (version == 1) message += "; version 1 files use 32-bit counts, re-convert the model";
      const uint32_t swapped = ((version & 0xffu) << 24) | ((version & 0xff00u) << 8) |
                               ((version >> 8) & 0xff00u) | (version >> 24);
      if (swapped >= 1 && swapped <= 3)
        message += "; this looks like a big-endian file, only little-endian GGUF is supported";
      fail(message);
    }
    out_.version_ = version;
    tensor_count_ = read<uint64_t>({"the tensor count"});
    kv_count_ = read<uint64_t>({"the metadata count"});
    // Each record takes some bytes; a count the rest of the file cannot hold is corrupt.
    if (kv_count_ > remaining() / kMinKvBytes)
      fail("header claims " + str(kv_count_) + " metadata entries, more than the " +
           str(remaining()) + " bytes after the header can hold (corrupt or truncated?)");
    if (tensor_count_ > (remaining() - kv_count_ * kMinKvBytes) / kMinTensorInfoBytes)
      fail("header claims " + str(tensor_count_) + " tensors, more than the " +
           str(remaining()) + " bytes after the header can hold (corrupt or truncated?)");
  }

  void parse_metadata() {
    out_.metadata_.reserve(reserve_hint(kv_count_));
    std::unordered_map<std::string_view, size_t> seen;
    seen.reserve(reserve_hint(kv_count_));
    for (uint64_t i = 0; i < kv_count_; ++i) {
      const std::string index_text = "#" + str(i);
      const std::string_view key = read_string({"the key of metadata entry", index_text});
      const uint32_t type_id = read<uint32_t>({"the value type of metadata key", key});
      if (!is_known_value_type(type_id))
        fail_key(key, "has unknown value type " + str(type_id) + " (known types are 0..12)");
      GgufValue value = read_value(GgufType(type_id), key, 0);
      if (!seen.emplace(key, i).second) fail_key(key, "appears twice in the metadata");
      out_.metadata_.emplace_back(std::string(key), std::move(value));
    }
  }

  GgufValue read_value(GgufType type, std::string_view key, int depth) {
    const Where where{"the value of metadata key", key};
    switch (type) {
      case GgufType::STRING: return GgufValue::make_string(read_string(where));
      case GgufType::ARRAY: return GgufValue::make_array(read_array(key, depth + 1));
      case GgufType::BOOL: {
        const uint8_t byte = read<uint8_t>(where);
        if (byte > 1) fail_key(key, "has BOOL value " + str(byte) + ", neither 0 nor 1");
        return GgufValue::make_bool(byte != 0);
      }
      default: {
        const size_t bytes = scalar_size(type);
        need(bytes, where);
        GgufValue value = decode_scalar(type, base_ + pos_);
        pos_ += bytes;
        return value;
      }
    }
  }

  std::shared_ptr<const GgufArray> read_array(std::string_view key, int depth) {
    if (depth > kMaxArrayDepth)
      fail_key(key, "has arrays nested more than " + str(kMaxArrayDepth) + " deep");
    const Where where{"the array of metadata key", key};
    const uint32_t type_id = read<uint32_t>(where);
    if (!is_known_value_type(type_id))
      fail_key(key, "is an array of unknown value type " + str(type_id) +
                        " (known types are 0..12)");
    const auto element_type = GgufType(type_id);
    const uint64_t count = read<uint64_t>(where);

    // The least one element can take: a scalar's size, a string's length field, a nested
    // array's type and count.
    const uint64_t min_element = element_type == GgufType::STRING  ? 8
                                 : element_type == GgufType::ARRAY ? 12
                                                                   : scalar_size(element_type);
    if (count > remaining() / min_element)
      fail("truncated: metadata key " + in_quotes(key) + " is an array of " + str(count) + " " +
           gguf_type_name(element_type) + " elements at offset " + str(pos_) +
           ", more than the " + str(remaining()) + " bytes left in the file can hold");

    auto array = std::make_shared<GgufArray>();
    array->element_type_ = element_type;
    array->size_ = size_t(count);
    if (element_type == GgufType::STRING) {
      array->strings_.reserve(reserve_hint(count));
      for (uint64_t i = 0; i < count; ++i) array->strings_.push_back(read_string(where));
    } else if (element_type == GgufType::ARRAY) {
      array->arrays_.reserve(reserve_hint(count));
      for (uint64_t i = 0; i < count; ++i)
        array->arrays_.push_back(GgufValue::make_array(read_array(key, depth + 1)));
    } else {
      const size_t bytes = size_t(count) * min_element;
      array->raw_ = base_ + pos_;
      if (element_type == GgufType::BOOL) {
        for (size_t i = 0; i < bytes; ++i) {
          const auto byte = std::to_integer<uint8_t>(base_[pos_ + i]);
          if (byte > 1)
            fail_key(key, "has BOOL array element " + str(i) + " = " + str(byte) +
                              ", neither 0 nor 1");
        }
      }
      pos_ += bytes;
    }
    return array;
  }

  void parse_alignment() {
    for (const auto& [key, value] : out_.metadata_) {
      if (key != "general.alignment") continue;
      if (value.type() != GgufType::UINT32)
        fail_key(key, std::string("is ") + gguf_type_name(value.type()) + ", not UINT32");
      const uint64_t alignment = *value.to_uint();
      if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        fail_key(key, "is " + str(alignment) + ", not a power of two");
      out_.alignment_ = alignment;
    }
  }

  void parse_tensor_infos() {
    out_.tensors_.reserve(reserve_hint(tensor_count_));
    std::unordered_map<std::string_view, size_t> seen;
    seen.reserve(reserve_hint(tensor_count_));
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      const std::string index_text = "#" + str(i);
      const std::string_view name = read_string({"the name of tensor info", index_text});
      const Where where{"the info of tensor", name};
      if (!seen.emplace(name, i).second) fail_tensor(name, "appears twice in the tensor infos");

      GgufTensor tensor;
      tensor.name = std::string(name);
      const uint32_t n_dims = read<uint32_t>(where);
      if (n_dims > uint32_t(kMaxDims))
        fail_tensor(name, "has " + str(n_dims) + " dimensions; ggml allows at most " +
                              str(kMaxDims));
      tensor.ne.reserve(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t dim = read<uint64_t>(where);
        if (dim > uint64_t(std::numeric_limits<int64_t>::max()))
          fail_tensor(name, "has dimension ne[" + str(d) + "] = " + str(dim) + ", too large");
        tensor.ne.push_back(int64_t(dim));
      }
      const uint32_t type_id = read<uint32_t>(where);
      tensor.offset = read<uint64_t>(where);

      std::optional<GgmlTypeTraits> traits = ggml_type_traits(type_id);
      if (!traits) {
        if (const char* removed = removed_ggml_type(type_id))
          fail_tensor(name, "has ggml type " + str(type_id) + " (" + removed +
                                "), a layout ggml has removed; re-quantize the model");
        fail_tensor(name, "has unknown ggml type " + str(type_id));
      }
      tensor.type = GgmlType(type_id);
      tensor.shape.assign(tensor.ne.rbegin(), tensor.ne.rend());

      const std::string layout = std::string(traits->name) + " " + ne_text(tensor.ne);
      if (tensor.row_length() % traits->block_size != 0)
        fail_tensor(name, "is " + layout + ": ne[0] = " + str(uint64_t(tensor.row_length())) +
                              " is not a multiple of the " + traits->name + " block size " +
                              str(uint64_t(traits->block_size)));
      // Bytes = blocks per row x block bytes x rows, refusing anything 64 bits cannot count.
      uint64_t bytes = uint64_t(tensor.row_length() / traits->block_size) * traits->type_size;
      uint64_t elements = uint64_t(tensor.row_length());
      for (size_t d = 1; d < tensor.ne.size(); ++d) {
        const auto dim = uint64_t(tensor.ne[d]);
        if (dim != 0 && (bytes > std::numeric_limits<uint64_t>::max() / dim ||
                         elements > uint64_t(std::numeric_limits<int64_t>::max()) / dim))
          fail_tensor(name, "is " + layout + ", too large to address");
        bytes *= dim;
        elements *= dim;
      }
      if (tensor.offset % out_.alignment_ != 0)
        fail_tensor(name, "has data offset " + str(tensor.offset) +
                              ", not a multiple of the alignment " + str(out_.alignment_));
      tensor.nbytes = size_t(bytes);
      out_.tensors_.push_back(std::move(tensor));
    }
  }

  static std::string ne_text(const std::vector<int64_t>& ne) {
    std::string out = "ne [";
    for (size_t i = 0; i < ne.size(); ++i) {
      if (i) out += ", ";
      out += std::to_string(ne[i]);
    }
    return out + "]";
  }

  void place_tensors() {
    // The data section starts at the first multiple of the alignment after the infos.
    const uint64_t align = out_.alignment_;
    const uint64_t end_of_infos = pos_;
    const uint64_t data_offset = (end_of_infos + align - 1) / align * align;
    out_.data_offset_ = data_offset;
    if (out_.tensors_.empty()) return;
    if (data_offset > size_)
      fail("truncated: the data section starts at byte " + str(data_offset) +
           " but the file ends at " + str(size_));
    const uint64_t data_size = size_ - data_offset;

    for (GgufTensor& tensor : out_.tensors_) {
      if (tensor.offset > data_size || tensor.nbytes > data_size - tensor.offset)
        fail_tensor(tensor.name, "data (" + str(tensor.nbytes) + " bytes at data offset " +
                                     str(tensor.offset) + ") runs past the end of the file: " +
                                     "the data section holds only " + str(data_size) +
                                     " bytes (truncated?)");
      tensor.data = base_ + data_offset + tensor.offset;
    }

    // Two tensors sharing bytes is a corrupt or hand-edited file; empty tensors own none.
    std::vector<const GgufTensor*> by_offset;
    for (const GgufTensor& tensor : out_.tensors_)
      if (tensor.nbytes != 0) by_offset.push_back(&tensor);
    std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) {
      return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
    });
    const GgufTensor* furthest = nullptr;  // the earlier tensor that reaches furthest
    for (const GgufTensor* tensor : by_offset) {
      if (furthest != nullptr && tensor->offset < furthest->offset + furthest->nbytes) {
        auto range = [](const GgufTensor* t) {
          std::string text(1, '[');
          text += str(t->offset) + ", " + str(t->offset + t->nbytes) + ")";
          return text;
        };
        fail("tensors " + in_quotes(furthest->name) + " (data bytes " + range(furthest) +
             ") and " + in_quotes(tensor->name) + " (data bytes " + range(tensor) +
             ") overlap");
      }
      if (furthest == nullptr ||
          tensor->offset + tensor->nbytes > furthest->offset + furthest->nbytes)
        furthest = tensor;
    }

    // ggml lays the tensors out back to back in info order, each padded to the alignment, and
    // refuses any other offset (gguf.cpp: "tensor has offset X, expected Y"). A gap means the
    // tensor before it declares a type or shape that does not fit the bytes it was written with.
    uint64_t expected = 0;
    const GgufTensor* previous = nullptr;
    for (const GgufTensor& tensor : out_.tensors_) {
      if (tensor.offset != expected) {
        if (previous == nullptr)
          fail_tensor(tensor.name, "has data offset " + str(tensor.offset) +
                                       "; the first tensor's data starts at offset 0");
        const uint64_t holds = tensor.offset - previous->offset;
        fail_tensor(previous->name, "is " + std::string(ggml_type_name(previous->type)) + " " + ne_text(previous->ne) +
                                        ", " + str(previous->nbytes) + " bytes, but its data holds " + str(holds) +
                                        " bytes (the next tensor " + in_quotes(tensor.name) + " starts at data offset " +
                                        str(tensor.offset) + "): its type or shape does not match its data");
      }
      expected = tensor.offset + (tensor.nbytes + align - 1) / align * align;
      previous = &tensor;
    }
  }

  // Built last: the views point at strings inside the final vectors.
  void build_indexes() {
    out_.metadata_index_.reserve(out_.metadata_.size());
    for (size_t i = 0; i < out_.metadata_.size(); ++i)
      out_.metadata_index_.emplace(out_.metadata_[i].first, i);
    out_.tensor_index_.reserve(out_.tensors_.size());
    for (size_t i = 0; i < out_.tensors_.size(); ++i)
      out_.tensor_index_.emplace(out_.tensors_[i].name, i);
  }

  GgufFile& out_;
  const std::string& path_;
  const std::byte* base_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
};

// ---------------------------------------------------------------------------------------
// GgufFile

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file;
  file.file_ = std::make_unique<MappedFile>(path);  // reports a missing or unreadable path
  GgufParser(file).parse();
  return file;
}

GgufFile GgufFile::parse(const std::byte* data, size_t size, const std::string& name) {
  GgufFile file;
  file.file_ = std::make_unique<MappedFile>(MappedFile::borrow(name, data, size));
  GgufParser(file).parse();
  return file;
}

const GgufValue* GgufFile::find_metadata(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

void GgufFile::fail_key(std::string_view key, const std::string& message) const {
  throw Error(printable(path()) + ": metadata key " + in_quotes(key) + " " + message);
}

const GgufValue& GgufFile::require(std::string_view key) const {
  const GgufValue* value = find_metadata(key);
  if (value == nullptr) fail_key(key, "is missing");
  return *value;
}

namespace {
std::string type_text(const GgufValue& value) {
  std::string out = gguf_type_name(value.type());
  if (const GgufArray* array = value.array())
    out += std::string(" of ") + gguf_type_name(array->element_type());
  return out;
}
}  // namespace

std::string_view GgufFile::get_string(std::string_view key) const {
  const GgufValue& value = require(key);
  std::optional<std::string_view> text = value.to_string();
  if (!text) fail_key(key, "is " + type_text(value) + ", not a string");
  return *text;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& value = require(key);
  if (!value.is_integer()) fail_key(key, "is " + type_text(value) + ", not an integer");
  std::optional<int64_t> number = value.to_int();
  if (!number) fail_key(key, "is " + value.summary() + ", too large for a signed 64-bit integer");
  return *number;
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& value = require(key);
  std::optional<double> number = value.to_float();
  if (!number) fail_key(key, "is " + type_text(value) + ", not a number");
  return *number;
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& value = require(key);
  std::optional<bool> flag = value.to_bool();
  if (!flag) fail_key(key, "is " + type_text(value) + ", not BOOL");
  return *flag;
}

const GgufArray& GgufFile::get_array(std::string_view key) const {
  const GgufValue& value = require(key);
  if (value.array() == nullptr) fail_key(key, "is " + type_text(value) + ", not an array");
  return *value.array();
}

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
  const GgufArray& array = get_array(key);
  if (array.element_type() != GgufType::STRING)
    fail_key(key, std::string("is an array of ") + gguf_type_name(array.element_type()) +
                      ", not of STRING");
  return {array.strings().begin(), array.strings().end()};
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufArray& array = get_array(key);
  if (!gguf_type_is_integer(array.element_type()))
    fail_key(key, std::string("is an array of ") + gguf_type_name(array.element_type()) +
                      ", not of integers");
  std::optional<std::vector<int64_t>> values = array.to_ints();
  if (!values) fail_key(key, "holds a value too large for a signed 64-bit integer");
  return std::move(*values);
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  const GgufArray& array = get_array(key);
  std::optional<std::vector<float>> values = array.to_floats();
  if (!values)
    fail_key(key, std::string("is an array of ") + gguf_type_name(array.element_type()) +
                      ", not of numbers");
  return std::move(*values);
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* found = find(name);
  if (found == nullptr)
    throw Error(printable(path()) + ": has no tensor " + in_quotes(name));
  return *found;
}

GgufTokenizerData GgufFile::tokenizer() const {
  GgufTokenizerData t;
  t.model = std::string(get_string("tokenizer.ggml.model"));
  if (has("tokenizer.ggml.pre")) t.pre = std::string(get_string("tokenizer.ggml.pre"));
  if (has("general.architecture")) t.architecture = std::string(get_string("general.architecture"));
  t.tokens = get_string_array("tokenizer.ggml.tokens");
  const size_t vocab = t.tokens.size();

  auto check_length = [&](std::string_view key, size_t length) {
    if (length != vocab)
      fail_key(key, "has " + str(length) + " entries but tokenizer.ggml.tokens has " +
                        str(vocab));
  };
  if (has("tokenizer.ggml.scores")) {
    t.scores = get_float_array("tokenizer.ggml.scores");
    check_length("tokenizer.ggml.scores", t.scores.size());
  }
  if (has("tokenizer.ggml.token_type")) {
    constexpr std::string_view key = "tokenizer.ggml.token_type";
    std::vector<int64_t> types = get_int_array(key);
    check_length(key, types.size());
    t.token_type.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < std::numeric_limits<int32_t>::min() ||
          types[i] > std::numeric_limits<int32_t>::max())
        fail_key(key, "entry " + str(i) + " is " + std::to_string(types[i]) +
                          ", outside the 32-bit range");
      t.token_type.push_back(int32_t(types[i]));
    }
  }
  if (has("tokenizer.ggml.merges")) t.merges = get_string_array("tokenizer.ggml.merges");

  auto special = [&](std::string_view key) -> std::optional<int64_t> {
    if (!has(key)) return std::nullopt;
    const int64_t id = get_int(key);
    if (id < 0 || uint64_t(id) >= vocab)
      fail_key(key, "is " + std::to_string(id) + ", outside the vocabulary of " + str(vocab) +
                        " tokens");
    return id;
  };
  t.bos_id = special("tokenizer.ggml.bos_token_id");
  t.eos_id = special("tokenizer.ggml.eos_token_id");
  t.unk_id = special("tokenizer.ggml.unknown_token_id");
  t.pad_id = special("tokenizer.ggml.padding_token_id");
  if (has("tokenizer.ggml.add_bos_token")) t.add_bos = get_bool("tokenizer.ggml.add_bos_token");
  if (has("tokenizer.ggml.add_eos_token")) t.add_eos = get_bool("tokenizer.ggml.add_eos_token");
  if (has("tokenizer.chat_template")) t.chat_template = get_string("tokenizer.chat_template");
  return t;
}

}  // namespace lumen::formats
