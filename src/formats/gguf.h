// GGUF files (llama.cpp's single-file format), versions 2 and 3, little-endian.
//
// Layout: "GGUF" magic, u32 version, u64 tensor count, u64 metadata count, the metadata
// (key string, u32 value type, value), the tensor infos (name string, u32 n_dims, n_dims x u64
// dims, u32 ggml type, u64 offset), padding to `general.alignment` (default 32), then the
// data section; each tensor's offset is relative to the start of that section. Strings are
// a u64 byte length followed by the bytes (no terminator).
//
// The whole file is memory-mapped: tensor data pointers, metadata strings and numeric
// arrays point into the mapping and stay valid while the GgufFile (or a GgufFile it was
// moved into) lives. Nothing is dequantized here; the formats layer only locates bytes
// (quant/ggml_blocks.h turns ggml blocks into numbers).
//
// Every defect is a lumen::Error of one line that starts with the file's path and names the
// metadata key or tensor at fault: file too short, bad magic, unsupported version, counts
// the file cannot hold, truncated strings/arrays/values, unknown value types, duplicate keys,
// a bad general.alignment, unknown tensor types, bad dims, offsets not aligned, data past the
// end of the file, overlapping tensors, duplicate tensor names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "formats/mapped_file.h"

namespace lumen::formats {

// Metadata value types, numbered as the GGUF spec numbers them.
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

// "UINT32", "STRING", ...; "?" for a value outside the enum.
const char* gguf_type_name(GgufType type);
bool gguf_type_is_integer(GgufType type);  // UINT8..INT64 (BOOL is not an integer)
bool gguf_type_is_float(GgufType type);    // FLOAT32, FLOAT64

// Tensor element types, numbered as ggml numbers them (ids 4, 5, 31-33 and 36-38 belong to
// layouts ggml has removed; a file using them is rejected).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

// Storage layout of a ggml type: `block_size` elements take `type_size` bytes.
struct GgmlTypeTraits {
  const char* name;  // "Q4_K"
  int64_t block_size;
  size_t type_size;
};

// nullopt for an id this reader does not know (removed or newer than it).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
// "Q4_K"; for an unknown id "type 99".
std::string ggml_type_name(GgmlType type);

class GgufArray;

// One metadata value: its type and a scalar, a string view or an array.
class GgufValue {
 public:
  GgufValue() = default;
  static GgufValue make_unsigned(GgufType type, uint64_t value);
  static GgufValue make_signed(GgufType type, int64_t value);
  static GgufValue make_float(GgufType type, double value);
  static GgufValue make_bool(bool value);
  static GgufValue make_string(std::string_view value);
  static GgufValue make_array(std::shared_ptr<const GgufArray> value);

  GgufType type() const { return type_; }
  bool is_integer() const { return gguf_type_is_integer(type_); }
  bool is_float() const { return gguf_type_is_float(type_); }

  // nullopt when the value is not of a fitting type: to_int: an integer type whose value
  // fits int64; to_uint: an integer type whose value is >= 0; to_float: FLOAT32/FLOAT64 or
  // an integer type (converted); to_bool: BOOL; to_string: STRING; array: ARRAY.
  std::optional<int64_t> to_int() const;
  std::optional<uint64_t> to_uint() const;
  std::optional<double> to_float() const;
  std::optional<bool> to_bool() const;
  std::optional<std::string_view> to_string() const;
  const GgufArray* array() const { return array_.get(); }

  // For reports: `640`, `1e-06`, `true`, `"gemma3"`, `[STRING x 262144]`.
  std::string summary() const;

 private:
  GgufType type_ = GgufType::UINT8;
  uint64_t bits_ = 0;  // unsigned integers, signed (two's complement), bool, f64 bits
  std::string_view string_;
  std::shared_ptr<const GgufArray> array_;
};

// An array value. Numeric and BOOL elements stay packed little-endian in the mapping;
// STRING elements are views into the mapping; ARRAY elements (nested arrays) are values.
class GgufArray {
 public:
  GgufType element_type() const { return element_type_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Element i as a value (decoded on demand for numeric arrays); std::out_of_range when
  // i >= size().
  GgufValue at(size_t i) const;

  // The strings of a STRING array; empty for any other element type.
  std::span<const std::string_view> strings() const { return strings_; }
  // The elements of an ARRAY array (each itself an array value); empty otherwise.
  std::span<const GgufValue> arrays() const;

  // Packed little-endian elements of a numeric or BOOL array; nullptr otherwise.
  const std::byte* raw_data() const { return raw_; }

  // Whole-array conversions; nullopt when the element type does not fit: integers
  // (any integer type, values representable in int64) and floats (FLOAT32/FLOAT64, and
  // integers, converted).
  std::optional<std::vector<int64_t>> to_ints() const;
  std::optional<std::vector<float>> to_floats() const;

 private:
  friend class GgufParser;
  GgufType element_type_ = GgufType::UINT8;
  size_t size_ = 0;
  const std::byte* raw_ = nullptr;
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> arrays_;
};

// One tensor as the file describes it.
//
// `ne` is ggml's dimension order as written: ne[0] is the fastest-varying dimension (the
// length of a row in memory). `shape` is the same dims in row-major (numpy / PyTorch)
// order, i.e. `ne` reversed: a matrix written as ne = [cols, rows] has shape [rows, cols]
// ([ne1, ne0]). For a weight matrix this is PyTorch's [out_features, in_features]:
// token_embd.weight of Gemma 3 270M has ne = [640, 262144], shape = [262144, 640].
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;     // as written, fastest-varying first
  std::vector<int64_t> shape;  // row-major: ne reversed
  uint64_t offset = 0;         // relative to the data section
  const std::byte* data = nullptr;  // into the mapping
  size_t nbytes = 0;                // ne[0]/block_size * type_size * ne[1] * ne[2] * ...

  int64_t numel() const;
  int64_t row_length() const { return ne.empty() ? 1 : ne[0]; }  // elements per row
  int64_t rows() const;                                           // numel / row_length
  size_t row_bytes() const;  // bytes of one row (rows are stored back to back)
};

// The tokenizer that GGUF metadata stores under `tokenizer.ggml.*`. Located, not
// interpreted: turning text into ids is the tokenizer layer's job. Views point into the
// file's mapping.
struct GgufTokenizerData {
  std::string model;  // tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (BPE), ...
  std::string pre;    // tokenizer.ggml.pre, empty when absent
  std::string architecture;  // general.architecture, empty when absent (picks Gemma's rules)
  std::vector<std::string_view> tokens;   // tokenizer.ggml.tokens (the vocabulary)
  std::vector<float> scores;              // tokenizer.ggml.scores, empty when absent
  std::vector<int32_t> token_type;        // tokenizer.ggml.token_type, empty when absent
  std::vector<std::string_view> merges;   // tokenizer.ggml.merges, empty when absent
  std::optional<int64_t> bos_id, eos_id, unk_id, pad_id;  // tokenizer.ggml.*_token_id
  std::optional<bool> add_bos, add_eos;   // tokenizer.ggml.add_bos_token / add_eos_token
  std::optional<std::string_view> chat_template;  // tokenizer.chat_template
};

class GgufFile {
 public:
  // Maps and validates the whole file. Throws lumen::Error ("PATH: ...") on any defect.
  static GgufFile open(const std::string& path);
  // The same for bytes the caller keeps alive; `name` stands for the path in errors.
  static GgufFile parse(const std::byte* data, size_t size, const std::string& name);
  // The mapping, to check that the file has not changed on disk since it was opened.
  const MappedFile& mapped_file() const { return *file_; }

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* find_metadata(std::string_view key) const;
  bool has(std::string_view key) const { return find_metadata(key) != nullptr; }

  // Typed lookups. Throw lumen::Error naming the file and key when the key is missing or
  // holds a value of another type ("PATH: metadata key 'k' is FLOAT32, not an integer").
  std::string_view get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;     // any integer type that fits int64
  double get_float(std::string_view key) const;    // FLOAT32/FLOAT64 or any integer type
  bool get_bool(std::string_view key) const;
  const GgufArray& get_array(std::string_view key) const;
  std::vector<std::string_view> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensor* find(std::string_view name) const;
  // Throws lumen::Error naming the file and tensor when absent.
  const GgufTensor& tensor(std::string_view name) const;

  // tokenizer.ggml.*; throws lumen::Error naming the key when tokenizer.ggml.model or
  // tokenizer.ggml.tokens is missing, a list's length differs from the vocabulary's, or a
  // special id is outside the vocabulary.
  GgufTokenizerData tokenizer() const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  const GgufValue& require(std::string_view key) const;
  [[noreturn]] void fail_key(std::string_view key, const std::string& message) const;

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;  // views into metadata_ keys
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;  // views into tensors_ names
};

}  // namespace lumen::formats
