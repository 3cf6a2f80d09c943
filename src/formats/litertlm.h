// LiteRT-LM packages (.litertlm), format versions 1.1 to 1.9, memory-mapped.
//
// Layout (LiteRT-LM schema/core/litertlm_header_schema.fbs, litertlm_header.h):
//   bytes 0-7   "LITERTLM"
//   bytes 8-19  u32 major, minor, patch (little-endian)
//   bytes 20-23 padding
//   bytes 24-31 u64 header_end_offset
//   bytes 32..header_end_offset  FlatBuffer, root LiteRTLMMetaData:
//     0 system_metadata: SystemMetadata { 0 entries: [KeyValuePair] }
//     1 section_metadata: SectionMetadata { 0 objects: [SectionObject] }
//   KeyValuePair { 0 key: string, 1 value_type: u8, 2 value: VData }
//   VData: 1 UInt8, 2 Int8, 3 UInt16, 4 Int16, 5 UInt32, 6 Int32, 7 Float32, 8 Bool,
//          9 StringValue, 10 UInt64, 11 Int64, 12 Double; each a table { 0 value } — in
//          version 1.1 files the numeric members are structs (the union points at the value).
//   SectionObject { 0 items: [KeyValuePair], 1 begin_offset: u64, 2 end_offset: u64,
//                   3 data_type: u8 AnySectionDataType }
// Sections hold [begin_offset, end_offset) of the file.
//
// open() validates everything it can see without decoding section payloads: magic, version,
// header bounds, the FlatBuffer, value types, data types, section ranges (inside the file,
// after the header, not overlapping). Section readers (tflite(), hf_tokenizer_json(), ...)
// validate their payload. Every defect is one lumen::Error line naming the file and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/llm_metadata.h"
#include "formats/mapped_file.h"
#include "formats/tflite.h"

namespace lumen::formats {

// AnySectionDataType, numbered as the schema numbers it.
enum class SectionType : uint8_t {
  NONE = 0,
  GenericBinaryData = 1,
  Deprecated = 2,
  TFLiteModel = 3,
  SP_Tokenizer = 4,
  LlmMetadataProto = 5,
  HF_Tokenizer_Zlib = 6,
  TFLiteWeights = 7,
  EmbeddingMetadataProto = 8,
  ExecutorMetadataProto = 9,
  TtsMetadataProto = 10,
  AsrMetadataProto = 11,
  Text2ImageMetadataProto = 12,
};
// The schema's name; nullptr outside the enum.
const char* section_type_name(SectionType type);

// A metadata value; the variant index + 1 is the VData union type.
using MetaValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, uint64_t, int64_t, double>;
// "UInt8", "Int8", ..., "String", ..., "Double" (the names LiteRT-LM's peek tool prints).
const char* meta_value_type_name(const MetaValue& v);
nlohmann::json meta_value_to_json(const MetaValue& v);
std::string meta_value_to_text(const MetaValue& v);

struct KeyValue {
  std::string key;
  MetaValue value;
};

struct Section {
  size_t index = 0;
  SectionType type = SectionType::NONE;
  uint64_t begin = 0, end = 0;
  std::vector<KeyValue> items;

  uint64_t size() const { return end - begin; }
  // The string value of item `key`, or "" if absent or not a string.
  std::string item_string(std::string_view key) const;
};

struct LitertlmVersion {
  uint32_t major = 0, minor = 0, patch = 0;
  std::string to_string() const;
};

class LitertlmFile {
 public:
  static LitertlmFile open(const std::string& path);
  // Parses bytes the caller keeps alive (tests corrupt copies in memory); `name` is used in
  // errors in place of a path.
  static LitertlmFile parse(const std::byte* data, size_t size, const std::string& name);

  const std::string& path() const { return name_; }
  size_t file_size() const { return size_; }
  LitertlmVersion version;
  uint64_t header_end_offset = 0;
  std::vector<KeyValue> system_metadata;
  std::vector<Section> sections;

  std::string_view section_bytes(const Section& s) const;
  // Offset in the file of a pointer into the mapped bytes.
  uint64_t file_offset(const char* p) const { return uint64_t(p - reinterpret_cast<const char*>(data_)); }
  // "FILE: section 2 (TFLiteModel)": how errors name a section.
  std::string section_name(const Section& s) const;

  // Typed readers; each throws if the section has another type or a bad payload.
  TfliteModel tflite(const Section& s) const;
  // Inflates an HF_Tokenizer_Zlib section: the tokenizer.json bytes.
  std::string hf_tokenizer_json(const Section& s) const;
  // The serialized SentencePiece model of an SP_Tokenizer section (points into the mapping).
  std::string_view sentencepiece_model(const Section& s) const;
  LlmMetadata llm_metadata(const Section& s) const;

  // The bytes of a tensor whose data lives in an external buffer: group "tflite_weights"
  // means the TFLiteWeights section (the one whose model_type matches `model_section`'s, or
  // the only one), at the buffer's offset from that section's start.
  std::string_view external_tensor_bytes(const Section& model_section, const TfliteModel& model,
                                         const TfliteTensor& tensor) const;

 private:
  void require_type(const Section& s, SectionType type) const;
  std::unique_ptr<MappedFile> file_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
};

// What `lumen inspect` shows: everything open() finds plus each section's decoded summary.
// Payload errors are not swallowed: a section that cannot be read fails the inspection.
nlohmann::json litertlm_to_json(const LitertlmFile& f);
std::string litertlm_to_text(const LitertlmFile& f);

}  // namespace lumen::formats
