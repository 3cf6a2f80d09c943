#include "formats/litertlm.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include <zlib.h>

#include "base/error.h"
#include "base/json.h"
#include "formats/flatbuffer.h"
#include "formats/little_endian.h"

namespace lumen::formats {

namespace {

constexpr char kLitertlmMagic[8] = {'L', 'I', 'T', 'E', 'R', 'T', 'L', 'M'};
constexpr size_t kHeaderBegin = 32;
constexpr uint32_t kMinMinor = 1, kMaxMinor = 9;
// An HF tokenizer.json is a few MiB; refuse to allocate absurd declared sizes.
constexpr uint64_t kMaxTokenizerJson = uint64_t(1) << 30;

// One VData value. `structs`: version 1.1, where numeric members are structs (the union
// offset points straight at the value) rather than tables with a `value` field 0.
MetaValue read_value(const fb::Table& kv, uint8_t type, bool structs) {
  const std::string path = kv.child("value");
  if (type == 9) {  // StringValue is a table in every version
    auto t = kv.union_table(2, "value");
    if (!t) kv.buffer().fail(path, "missing value");
    auto s = t->string(0, "value");
    return std::string(s ? *s : std::string_view());
  }
  auto numeric = [&](auto zero) -> MetaValue {
    using T = decltype(zero);
    if (structs) {
      auto pos = kv.reference(2, "value");
      if (!pos) kv.buffer().fail(path, "missing value");
      kv.buffer().check_range(*pos, sizeof(T), path, "value");
      return kv.buffer().read<T>(*pos);
    }
    auto t = kv.union_table(2, "value");
    if (!t) kv.buffer().fail(path, "missing value");
    return t->scalar<T>(0, zero, "value");
  };
  switch (type) {
    case 1: return numeric(uint8_t{});
    case 2: return numeric(int8_t{});
    case 3: return numeric(uint16_t{});
    case 4: return numeric(int16_t{});
    case 5: return numeric(uint32_t{});
    case 6: return numeric(int32_t{});
    case 7: return numeric(float{});
    case 8: {
      MetaValue v = numeric(uint8_t{});
      return bool(std::get<uint8_t>(v) != 0);
    }
    case 10: return numeric(uint64_t{});
    case 11: return numeric(int64_t{});
    case 12: return numeric(double{});
    default:
      kv.buffer().fail(kv.child("value_type"), "unknown value type " + std::to_string(type) +
                                                   " (expected 1-12)");
  }
}

std::vector<KeyValue> read_pairs(const fb::Vector& v, bool structs) {
  std::vector<KeyValue> out;  // grows as pairs decode: never reserved for a count from the file
  for (uint32_t i = 0; i < v.size(); ++i) {
    const fb::Table kv = v.table(i);
    auto key = kv.string(0, "key");
    if (!key) kv.buffer().fail(kv.child("key"), "missing (required)");
    const uint8_t type = kv.scalar<uint8_t>(1, 0, "value_type");
    if (type == 0) kv.buffer().fail(kv.child("value"), "missing (required)");
    out.push_back({std::string(*key), read_value(kv, type, structs)});
  }
  return out;
}

}  // namespace

const char* section_type_name(SectionType type) {
  static const char* kNames[] = {"NONE", "GenericBinaryData", "Deprecated", "TFLiteModel",
                                 "SP_Tokenizer", "LlmMetadataProto", "HF_Tokenizer_Zlib",
                                 "TFLiteWeights", "EmbeddingMetadataProto", "ExecutorMetadataProto",
                                 "TtsMetadataProto", "AsrMetadataProto", "Text2ImageMetadataProto"};
  const size_t i = size_t(type);
  return i < std::size(kNames) ? kNames[i] : nullptr;
}

const char* meta_value_type_name(const MetaValue& v) {
  static const char* kNames[] = {"UInt8", "Int8", "UInt16", "Int16", "UInt32", "Int32",
                                 "Float32", "Bool", "String", "UInt64", "Int64", "Double"};
  return kNames[v.index()];
}

nlohmann::json meta_value_to_json(const MetaValue& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

std::string meta_value_to_text(const MetaValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) return in_quotes(x);
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_floating_point_v<T>) {
          std::ostringstream o;
          o << x;
          return o.str();
        } else return std::to_string(+x);
      },
      v);
}

std::string Section::item_string(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.key == key && std::holds_alternative<std::string>(kv.value)) return std::get<std::string>(kv.value);
  return "";
}

std::string LitertlmVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

LitertlmFile LitertlmFile::open(const std::string& path) {
  auto file = std::make_unique<MappedFile>(path);
  LitertlmFile f = parse(file->data(), file->size(), path);
  f.file_ = std::move(file);
  return f;
}

LitertlmFile LitertlmFile::parse(const std::byte* data, size_t size, const std::string& name) {
  LitertlmFile f;
  f.data_ = data;
  f.size_ = size;
  f.name_ = name;
  auto fail = [&](const std::string& what) { throw Error(name + ": " + what); };

  if (size < 8 || std::memcmp(data, kLitertlmMagic, 8) != 0) {
    const size_t n = std::min<size_t>(size, 8);
    fail("not a LiteRT-LM package: bad magic " +
         in_quotes(std::string_view(reinterpret_cast<const char*>(data), n)) + " (expected 'LITERTLM')");
  }
  if (size < kHeaderBegin) {
    fail("truncated: " + std::to_string(size) + " bytes, the fixed header alone is " +
         std::to_string(kHeaderBegin));
  }
  f.version = {read_le<uint32_t>(data + 8), read_le<uint32_t>(data + 12), read_le<uint32_t>(data + 16)};
  if (f.version.major != 1 || f.version.minor < kMinMinor || f.version.minor > kMaxMinor) {
    fail("unsupported format version " + f.version.to_string() + " (this reader knows 1.1 to 1.9)");
  }
  f.header_end_offset = read_le<uint64_t>(data + 24);
  if (f.header_end_offset <= kHeaderBegin + 4 || f.header_end_offset > size) {
    fail("header_end_offset " + std::to_string(f.header_end_offset) + " outside [" +
         std::to_string(kHeaderBegin + 4) + ", " + std::to_string(size) + "] (file is " +
         std::to_string(size) + " bytes)");
  }

  const fb::Buffer header{data + kHeaderBegin, size_t(f.header_end_offset - kHeaderBegin),
                          name + ": header"};
  const bool structs = f.version.minor == 1;
  const fb::Table root = fb::Table::root(header, 0, "");
  if (auto sys = root.table(0, "system_metadata")) {
    f.system_metadata = read_pairs(sys->vector(0, 4, "entries"), structs);
  }
  auto sm = root.table(1, "section_metadata");
  if (!sm) header.fail("section_metadata", "missing");
  const fb::Vector objects = sm->vector(0, 4, "objects");
  for (uint32_t i = 0; i < objects.size(); ++i) {
    const fb::Table obj = objects.table(i);
    Section s;
    s.index = i;
    s.items = read_pairs(obj.vector(0, 4, "items"), structs);
    s.begin = obj.scalar<uint64_t>(1, 0, "begin_offset");
    s.end = obj.scalar<uint64_t>(2, 0, "end_offset");
    const uint8_t type = obj.scalar<uint8_t>(3, 0, "data_type");
    s.type = SectionType(type);
    const std::string where = "section " + std::to_string(i);
    if (section_type_name(s.type) == nullptr)
      fail(where + ": unknown data_type " + std::to_string(type) + " (this reader knows 0-12)");
    if (s.begin > s.end)
      fail(where + ": begin_offset " + std::to_string(s.begin) + " after end_offset " + std::to_string(s.end));
    if (s.end > size) {
      fail(where + " (" + section_type_name(s.type) + "): end_offset " + std::to_string(s.end) +
           " past the end of the file (" + std::to_string(size) + " bytes)");
    }
    if (s.begin < f.header_end_offset) {
      fail(where + " (" + section_type_name(s.type) + "): begin_offset " + std::to_string(s.begin) +
           " inside the header (which ends at " + std::to_string(f.header_end_offset) + ")");
    }
    f.sections.push_back(std::move(s));
  }
  // Sections must not share bytes: a writer bug or a crafted file.
  std::vector<const Section*> by_begin;
  for (const auto& s : f.sections) by_begin.push_back(&s);
  std::sort(by_begin.begin(), by_begin.end(), [](const Section* a, const Section* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->index < b->index;
  });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const Section& a = *by_begin[i - 1];
    const Section& b = *by_begin[i];
    if (b.begin < a.end) {
      fail("section " + std::to_string(b.index) + " [" + std::to_string(b.begin) + ", " +
           std::to_string(b.end) + ") overlaps section " + std::to_string(a.index) + " [" +
           std::to_string(a.begin) + ", " + std::to_string(a.end) + ")");
    }
  }
  return f;
}

std::string_view LitertlmFile::section_bytes(const Section& s) const {
  return std::string_view(reinterpret_cast<const char*>(data_ + s.begin), size_t(s.size()));
}

std::string LitertlmFile::section_name(const Section& s) const {
  return name_ + ": section " + std::to_string(s.index) + " (" + section_type_name(s.type) + ")";
}

void LitertlmFile::require_type(const Section& s, SectionType type) const {
  if (s.type != type) {
    throw Error(section_name(s) + ": expected a " + section_type_name(type) + " section");
  }
}

TfliteModel LitertlmFile::tflite(const Section& s) const {
  require_type(s, SectionType::TFLiteModel);
  return TfliteModel::parse(data_ + s.begin, size_t(s.size()), section_name(s));
}

std::string LitertlmFile::hf_tokenizer_json(const Section& s) const {
  require_type(s, SectionType::HF_Tokenizer_Zlib);
  const std::string where = section_name(s);
  const std::string_view bytes = section_bytes(s);
  if (bytes.size() < 8) throw Error(where + ": " + std::to_string(bytes.size()) + " bytes, too short for the u64 size");
  const uint64_t declared = read_le<uint64_t>(reinterpret_cast<const std::byte*>(bytes.data()));
  // zlib cannot expand more than ~1032:1; anything beyond is a lie we must not allocate for.
  const uint64_t compressed = bytes.size() - 8;
  if (declared > kMaxTokenizerJson || declared > compressed * 1032 + 64) {
    throw Error(where + ": declared uncompressed size " + std::to_string(declared) +
                " is impossible for " + std::to_string(compressed) + " compressed bytes");
  }
  if (compressed > 0xffffffffu) throw Error(where + ": " + std::to_string(compressed) + " compressed bytes, too many for a tokenizer");
  // Inflated in chunks, so a lying size header costs at most what the stream really holds.
  std::string out;
  out.reserve(size_t(std::min<uint64_t>(declared, uint64_t(16) << 20)));
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) throw Error(where + ": zlib initialization failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + 8));
  zs.avail_in = uInt(compressed);
  std::vector<unsigned char> chunk(size_t(1) << 16);
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = chunk.data();
    zs.avail_out = uInt(chunk.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size() - zs.avail_out);
    if (out.size() > declared) break;
    if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {  // input exhausted mid-stream
      rc = Z_BUF_ERROR;
      break;
    }
  }
  const std::string zmsg = zs.msg ? zs.msg : "truncated";
  const uint64_t consumed = zs.total_in;
  inflateEnd(&zs);
  if (out.size() > declared) {
    throw Error(where + ": inflates to more than the declared " + std::to_string(declared) + " bytes");
  }
  if (rc != Z_STREAM_END) throw Error(where + ": corrupt zlib stream (" + zmsg + ")");
  if (out.size() != declared) {
    throw Error(where + ": inflated " + std::to_string(out.size()) + " bytes, the header declares " +
                std::to_string(declared));
  }
  if (consumed != compressed) {
    throw Error(where + ": " + std::to_string(compressed - consumed) + " bytes after the zlib stream");
  }
  return out;
}

std::string_view LitertlmFile::sentencepiece_model(const Section& s) const {
  require_type(s, SectionType::SP_Tokenizer);
  if (s.size() == 0) throw Error(section_name(s) + ": empty");
  return section_bytes(s);
}

LlmMetadata LitertlmFile::llm_metadata(const Section& s) const {
  require_type(s, SectionType::LlmMetadataProto);
  return decode_llm_metadata(section_bytes(s), section_name(s));
}

std::string_view LitertlmFile::external_tensor_bytes(const Section& model_section, const TfliteModel& model,
                                                     const TfliteTensor& tensor) const {
  const TfliteExternalBuffer* ext = nullptr;
  for (const auto& x : model.external_buffers)
    if (x.id == tensor.external_buffer) ext = &x;
  if (ext == nullptr) throw Error(model.where() + ": tensor " + in_quotes(tensor.name) + " has no external buffer");
  const std::string& group = model.external_buffer_groups.at(ext->group);
  if (group != "tflite_weights") {
    throw Error(model.where() + ": tensor " + in_quotes(tensor.name) + ": external buffer group " +
                in_quotes(group) + " is not in this package (expected 'tflite_weights')");
  }
  const Section* weights = nullptr;
  size_t candidates = 0;
  const std::string model_type = model_section.item_string("model_type");
  for (const auto& s : sections) {
    if (s.type != SectionType::TFLiteWeights) continue;
    ++candidates;
    if (weights == nullptr || (!model_type.empty() && s.item_string("model_type") == model_type)) weights = &s;
  }
  if (weights == nullptr) throw Error(model.where() + ": tensor " + in_quotes(tensor.name) + ": no TFLiteWeights section");
  if (candidates > 1 && weights->item_string("model_type") != model_type) {
    throw Error(model.where() + ": tensor " + in_quotes(tensor.name) +
                ": several TFLiteWeights sections and none with model_type " + in_quotes(model_type));
  }
  if (ext->offset > weights->size() || ext->length > weights->size() - ext->offset) {
    throw Error(section_name(*weights) + ": tensor " + in_quotes(tensor.name) + ": external data at offset " +
                std::to_string(ext->offset) + " (" + std::to_string(ext->length) +
                " bytes) runs past the section's end (" + std::to_string(weights->size()) + " bytes)");
  }
  const uint64_t want = TfliteModel::expected_bytes(tensor);
  if (ext->packing.empty() && want != 0 && want != ext->length) {
    throw Error(model.where() + ": tensor " + in_quotes(tensor.name) + ": external buffer holds " +
                std::to_string(ext->length) + " bytes, a " + tflite_type_name(tensor.type) +
                " tensor of this shape needs " + std::to_string(want));
  }
  return section_bytes(*weights).substr(size_t(ext->offset), size_t(ext->length));
}

namespace {

nlohmann::json pairs_json(const std::vector<KeyValue>& pairs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& kv : pairs)
    a.push_back({{"key", kv.key}, {"type", meta_value_type_name(kv.value)}, {"value", meta_value_to_json(kv.value)}});
  return a;
}

}  // namespace

nlohmann::json litertlm_to_json(const LitertlmFile& f) {
  nlohmann::json j;
  j["format"] = "litertlm";
  j["path"] = f.path();
  j["file_size"] = f.file_size();
  j["version"] = f.version.to_string();
  j["header_end_offset"] = f.header_end_offset;
  j["system_metadata"] = pairs_json(f.system_metadata);
  j["sections"] = nlohmann::json::array();
  for (const auto& s : f.sections) {
    nlohmann::json sj = {{"index", s.index}, {"data_type", section_type_name(s.type)},
                         {"data_type_id", int(s.type)}, {"begin_offset", s.begin},
                         {"end_offset", s.end}, {"size", s.size()}, {"items", pairs_json(s.items)}};
    switch (s.type) {
      case SectionType::TFLiteModel: {
        const TfliteModel model = f.tflite(s);
        nlohmann::json tj = tflite_to_json(model);
        // External weights must resolve inside this package; show where they are.
        for (size_t g = 0; g < model.subgraphs.size(); ++g) {
          for (size_t i = 0; i < model.subgraphs[g].tensors.size(); ++i) {
            const TfliteTensor& t = model.subgraphs[g].tensors[i];
            if (t.external_buffer == 0) continue;
            const std::string_view bytes = f.external_tensor_bytes(s, model, t);
            auto& out = tj["subgraphs"][g]["tensors"][i];
            out["storage"] = "external";
            out["bytes"] = bytes.size();
            out["file_offset"] = f.file_offset(bytes.data());
          }
        }
        sj["tflite"] = std::move(tj);
        break;
      }
      case SectionType::LlmMetadataProto: sj["llm_metadata"] = llm_metadata_to_json(f.llm_metadata(s)); break;
      case SectionType::HF_Tokenizer_Zlib: {
        const std::string json_text = f.hf_tokenizer_json(s);
        nlohmann::json doc;
        try {
          doc = parse_json(json_text);
        } catch (const nlohmann::json::exception&) {
          throw Error(f.section_name(s) + ": inflated tokenizer is not valid JSON");
        }
        nlohmann::json hj = {{"uncompressed_size", json_text.size()}};
        if (doc.is_object() && doc.contains("model") && doc["model"].is_object()) {
          const auto& model = doc["model"];
          if (model.contains("type") && model["type"].is_string()) hj["model_type"] = model["type"];
          if (model.contains("vocab") && (model["vocab"].is_object() || model["vocab"].is_array()))
            hj["vocab_size"] = model["vocab"].size();
        }
        if (doc.is_object() && doc.contains("added_tokens") && doc["added_tokens"].is_array())
          hj["added_tokens"] = doc["added_tokens"].size();
        sj["hf_tokenizer"] = hj;
        break;
      }
      case SectionType::SP_Tokenizer: {
        const auto model = f.sentencepiece_model(s);
        sj["sentencepiece"] = {{"bytes", model.size()},
                               {"pieces", count_sentencepiece_pieces(model, f.section_name(s))}};
        break;
      }
      default: break;
    }
    j["sections"].push_back(std::move(sj));
  }
  return j;
}

std::string litertlm_to_text(const LitertlmFile& f) {
  std::ostringstream o;
  o << "LiteRT-LM package " << f.path() << "\n";
  o << "version:         " << f.version.to_string() << "\n";
  o << "file size:       " << f.file_size() << " bytes (header ends at " << f.header_end_offset << ")\n";
  o << "system metadata:\n";
  for (const auto& kv : f.system_metadata)
    o << "  " << printable(kv.key) << " (" << meta_value_type_name(kv.value) << "): " << meta_value_to_text(kv.value) << "\n";
  o << "sections:        " << f.sections.size() << "\n";
  for (const auto& s : f.sections) {
    o << "\nsection " << s.index << ": " << section_type_name(s.type) << " [" << s.begin << ", " << s.end
      << ") " << s.size() << " bytes\n";
    for (const auto& kv : s.items)
      o << "  " << printable(kv.key) << " (" << meta_value_type_name(kv.value) << "): " << meta_value_to_text(kv.value) << "\n";
    switch (s.type) {
      case SectionType::TFLiteModel: o << tflite_to_text(f.tflite(s), "  "); break;
      case SectionType::LlmMetadataProto: {
        const auto j = llm_metadata_to_json(f.llm_metadata(s));
        // Protobuf strings need not be UTF-8: shown with U+FFFD, never a JSON type_error.
        o << "  LLM metadata: " << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        break;
      }
      case SectionType::HF_Tokenizer_Zlib: {
        const std::string json_text = f.hf_tokenizer_json(s);
        if (!nlohmann::json::accept(json_text)) throw Error(f.section_name(s) + ": inflated tokenizer is not valid JSON");
        o << "  tokenizer.json: " << json_text.size() << " bytes inflated, valid JSON\n";
        break;
      }
      case SectionType::SP_Tokenizer: {
        const auto model = f.sentencepiece_model(s);
        o << "  SentencePiece model: " << model.size() << " bytes, "
          << count_sentencepiece_pieces(model, f.section_name(s)) << " pieces\n";
        break;
      }
      default: break;
    }
  }
  return o.str();
}

}  // namespace lumen::formats
