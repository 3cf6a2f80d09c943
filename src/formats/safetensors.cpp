#include "formats/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"

namespace lumen::formats {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kHeaderLengthBytes = 8;
constexpr const char* kIndexFileName = "model.safetensors.index.json";
constexpr const char* kSingleFileName = "model.safetensors";


// "PATH: message" — every error about a file starts with the file.
[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(printable(path) + ": " + message);
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& tensor,
                              const std::string& message) {
  fail(path, "tensor " + in_quotes(tensor) + " " + message);
}

// nlohmann's what() is "[json.exception.parse_error.101] parse error at ..."; the bracketed
// tag means nothing to a user, the rest does.
std::string json_error_reason(const json::exception& e) {
  std::string_view reason = e.what();
  if (!reason.empty() && reason.front() == '[') {
    size_t close = reason.find("] ");
    if (close != std::string_view::npos) reason.remove_prefix(close + 2);
  }
  return printable(reason);
}

std::string_view as_chars(const std::byte* data, size_t size) {
  if (size == 0) return {};  // an empty mapping has no data pointer
  return {reinterpret_cast<const char*>(data), size};
}

uint64_t read_u64_le(const std::byte* bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value |= uint64_t(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
  return value;
}

// The JSON value as a non-negative integer, or nullopt if it is anything else
// (a float such as 3.0, a string, a negative number, ...).
std::optional<uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) return uint64_t(value.get<int64_t>());
  return std::nullopt;
}

// One tensor entry after checking its fields, before checking it against the file.
struct TensorEntry {
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

const json& require_field(const std::string& path, const std::string& name, const json& entry,
                          const char* field) {
  auto it = entry.find(field);
  if (it == entry.end()) fail_tensor(path, name, std::string("has no '") + field + "' field");
  return *it;
}

DType parse_dtype(const std::string& path, const std::string& name, const json& entry) {
  const json& value = require_field(path, name, entry, "dtype");
  if (!value.is_string())
    fail_tensor(path, name, std::string("has a 'dtype' that is not a string (it is ") +
                                value.type_name() + ")");
  const auto& text = value.get_ref<const std::string&>();
  std::optional<DType> dtype = dtype_from_name(text);
  if (!dtype) fail_tensor(path, name, "has unknown dtype " + in_quotes(text));
  return *dtype;
}

std::vector<int64_t> parse_shape(const std::string& path, const std::string& name,
                                 const json& entry) {
  const json& value = require_field(path, name, entry, "shape");
  if (!value.is_array())
    fail_tensor(path, name, std::string("has a 'shape' that is not an array (it is ") +
                                value.type_name() + ")");
  std::vector<int64_t> shape;
  shape.reserve(value.size());
  for (const json& dim : value) {
    if (dim.is_number_integer() && !dim.is_number_unsigned() && dim.get<int64_t>() < 0)
      fail_tensor(path, name, "has negative dimension " + std::to_string(dim.get<int64_t>()) +
                                  " in its shape");
    std::optional<uint64_t> size = as_unsigned(dim);
    if (!size)
      fail_tensor(path, name,
                  "has a 'shape' entry that is not an integer: " + printable(dim.dump()));
    if (*size > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_tensor(path, name, "has dimension " + std::to_string(*size) + " that is too large");
    shape.push_back(int64_t(*size));
  }
  return shape;
}

std::pair<uint64_t, uint64_t> parse_data_offsets(const std::string& path, const std::string& name,
                                                 const json& entry) {
  const json& value = require_field(path, name, entry, "data_offsets");
  std::optional<uint64_t> begin, end;
  if (value.is_array() && value.size() == 2) {
    begin = as_unsigned(value[0]);
    end = as_unsigned(value[1]);
  }
  if (!begin || !end)
    fail_tensor(path, name, "has 'data_offsets' " + printable(value.dump()) +
                                ", not an array of two non-negative integers");
  if (*begin > *end)
    fail_tensor(path, name, "has data_offsets [" + std::to_string(*begin) + ", " +
                                std::to_string(*end) + "] whose begin is past its end");
  return {*begin, *end};
}

// Bytes that dtype x shape needs, or nullopt if that overflows 64 bits.
std::optional<uint64_t> required_bytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t bytes = dtype_size(dtype);
  for (int64_t dim : shape) {
    if (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / uint64_t(dim))
      return std::nullopt;
    bytes *= uint64_t(dim);
  }
  return bytes;
}

// Parses the header so that a key given twice is caught: nlohmann would silently keep
// the last one, hiding a tensor the writer meant to store.
json parse_header_json(const std::string& path, std::string_view text) {
  std::optional<std::string> duplicate_key;
  std::set<std::string> top_level_keys;
  json::parser_callback_t note_duplicates = [&](int depth, json::parse_event_t event,
                                                json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw json::parse_error::create(101, 0, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                                      nullptr);
    if (event == json::parse_event_t::key && depth == 1 && !duplicate_key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!top_level_keys.insert(key).second) duplicate_key = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, note_duplicates);
  } catch (const json::exception& e) {
    fail(path, "header is not valid JSON (" + json_error_reason(e) + ")");
  }
  if (!header.is_object())
    fail(path, std::string("header is not a JSON object (it is ") + header.type_name() + ")");
  if (duplicate_key) fail_tensor(path, *duplicate_key, "appears twice in the header");
  return header;
}

// Reads and checks the tensor table of one mapped .safetensors file.
std::vector<TensorView> read_tensor_table(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size() < kHeaderLengthBytes)
    fail(path, "file is " + std::to_string(file.size()) +
                   " bytes, too short for a safetensors header (needs at least 8)");

  const uint64_t header_length = read_u64_le(file.data());
  if (header_length > file.size() - kHeaderLengthBytes)
    fail(path, "header length " + std::to_string(header_length) +
                   " runs past the end of the file (" + std::to_string(file.size()) +
                   " bytes; truncated?)");

  const std::byte* header_start = file.data() + kHeaderLengthBytes;
  const json header = parse_header_json(path, as_chars(header_start, size_t(header_length)));

  const std::byte* data_start = header_start + header_length;
  const uint64_t data_size = file.size() - kHeaderLengthBytes - header_length;

  std::vector<TensorEntry> entries;
  entries.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings, nothing we rely on
    if (!entry.is_object())
      fail_tensor(path, name, std::string("has an entry that is not a JSON object (it is ") +
                                  entry.type_name() + ")");
    TensorEntry parsed;
    parsed.view.name = name;
    parsed.view.dtype = parse_dtype(path, name, entry);
    parsed.view.shape = parse_shape(path, name, entry);
    std::tie(parsed.begin, parsed.end) = parse_data_offsets(path, name, entry);

    if (parsed.end > data_size)
      fail_tensor(path, name, "data ends at byte " + std::to_string(parsed.end) +
                                  " but the file has only " + std::to_string(data_size) +
                                  " bytes of data (truncated?)");
    const uint64_t stored_bytes = parsed.end - parsed.begin;
    std::optional<uint64_t> needed = required_bytes(parsed.view.dtype, parsed.view.shape);
    const std::string layout = std::string(dtype_name(parsed.view.dtype)) + " " +
                               shape_to_string(parsed.view.shape);
    if (!needed)
      fail_tensor(path, name, "has " + layout + ", which is too large to address");
    if (stored_bytes != *needed)
      fail_tensor(path, name, "holds " + std::to_string(stored_bytes) + " bytes but " + layout +
                                  " needs " + std::to_string(*needed));

    parsed.view.data = data_start + parsed.begin;
    parsed.view.nbytes = size_t(stored_bytes);
    parsed.view.file = path;
    entries.push_back(std::move(parsed));
  }

  // Two tensors sharing bytes is a corrupt or hand-edited file. Empty tensors own no
  // bytes, so they cannot overlap anything.
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& entry : entries)
    if (entry.begin != entry.end) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const TensorEntry* furthest = nullptr;  // the earlier tensor that reaches furthest
  for (const TensorEntry* entry : by_offset) {
    if (furthest != nullptr && entry->begin < furthest->end) {
      auto range = [](const TensorEntry* t) {
        std::string text(1, '[');
        text += std::to_string(t->begin) + ", " + std::to_string(t->end) + ")";
        return text;
      };
      fail(path, "tensors " + in_quotes(furthest->view.name) + " (bytes " + range(furthest) +
                     ") and " + in_quotes(entry->view.name) + " (bytes " + range(entry) +
                     ") overlap");
    }
    if (furthest == nullptr || entry->end > furthest->end) furthest = entry;
  }

  std::vector<TensorView> views;
  views.reserve(entries.size());
  for (TensorEntry& entry : entries) views.push_back(std::move(entry.view));
  return views;
}

bool is_existing_file(const fs::path& path) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored);
}

// A shard name must stay inside the checkpoint directory.
bool is_plain_relative(const fs::path& name) {
  if (name.empty() || name.has_root_path()) return false;
  for (const fs::path& part : name)
    if (part == "..") return false;
  return true;
}

}  // namespace

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path) {
  SafetensorsCheckpoint checkpoint;
  checkpoint.path_ = path;

  auto add_file = [&checkpoint](const std::string& file_path) -> const MappedFile& {
    checkpoint.files_.push_back(std::make_unique<MappedFile>(file_path));
    return *checkpoint.files_.back();
  };
  auto add_single = [&](const std::string& file_path) {
    for (TensorView& view : read_tensor_table(add_file(file_path))) {
      std::string name = view.name;
      checkpoint.tensors_.emplace(std::move(name), std::move(view));
    }
  };

  std::error_code ignored;
  if (!fs::is_directory(path, ignored)) {
    add_single(path);  // MappedFile reports a missing or unreadable path
    return checkpoint;
  }

  const fs::path directory(path);
  const fs::path index_path = directory / kIndexFileName;
  if (!is_existing_file(index_path)) {
    const fs::path single_path = directory / kSingleFileName;
    if (!is_existing_file(single_path))
      fail(path, std::string("directory holds neither ") + kIndexFileName + " nor " +
                     kSingleFileName);
    add_single(single_path.string());
    return checkpoint;
  }

  // Sharded: the index says which shard holds each tensor.
  const std::string index = index_path.string();
  json index_json;
  {
    MappedFile index_file(index);
    try {
      index_json = parse_json(as_chars(index_file.data(), index_file.size()));
    } catch (const json::exception& e) {
      fail(index, "index is not valid JSON (" + json_error_reason(e) + ")");
    }
  }
  if (!index_json.is_object() || !index_json.contains("weight_map") ||
      !index_json.at("weight_map").is_object())
    fail(index, "index has no 'weight_map' object");
  const json& weight_map = index_json.at("weight_map");
  if (weight_map.empty()) fail(index, "index has an empty 'weight_map'");

  std::map<std::string, std::vector<std::string>> tensors_by_shard;
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string())
      fail(index, "maps tensor " + in_quotes(tensor) + " to " + printable(shard.dump()) +
                      ", not a shard file name");
    const fs::path shard_name = fs::path(shard.get<std::string>()).lexically_normal();
    if (!is_plain_relative(shard_name))
      fail(index, "maps tensor " + in_quotes(tensor) + " to shard " +
                      in_quotes(shard.get<std::string>()) +
                      ", which is not a file inside the checkpoint directory");
    // Normalized so that "a.safetensors" and "./a.safetensors" are one shard, mapped once.
    tensors_by_shard[shard_name.string()].push_back(tensor);
  }

  for (const auto& [shard_name, tensors] : tensors_by_shard) {
    const std::string shard_path = (directory / shard_name).string();
    if (!is_existing_file(shard_path))
      fail(index, "names shard " + in_quotes(shard_path) + " (for tensor " +
                      in_quotes(tensors.front()) + ") but it does not exist");
    for (TensorView& view : read_tensor_table(add_file(shard_path))) {
      auto existing = checkpoint.tensors_.find(view.name);
      if (existing != checkpoint.tensors_.end())
        fail(index, "tensor " + in_quotes(view.name) + " is stored in both " +
                        in_quotes(existing->second.file) + " and " + in_quotes(shard_path));
      std::string name = view.name;
      checkpoint.tensors_.emplace(std::move(name), std::move(view));
    }
  }

  // Every tensor the index promises must be in the shard it names.
  for (const auto& [shard_name, tensors] : tensors_by_shard) {
    const std::string shard_path = (directory / shard_name).string();
    for (const std::string& tensor : tensors) {
      auto found = checkpoint.tensors_.find(tensor);
      if (found == checkpoint.tensors_.end() || found->second.file != shard_path)
        fail(index, "maps tensor " + in_quotes(tensor) + " to " + in_quotes(shard_path) +
                        " but that shard does not contain it");
    }
  }
  return checkpoint;
}

SafetensorsCheckpoint SafetensorsCheckpoint::parse(const std::byte* data, size_t size, const std::string& name) {
  SafetensorsCheckpoint checkpoint;
  checkpoint.path_ = name;
  checkpoint.files_.push_back(std::make_unique<MappedFile>(MappedFile::borrow(name, data, size)));
  for (TensorView& view : read_tensor_table(*checkpoint.files_.back())) {
    std::string tensor = view.name;
    checkpoint.tensors_.emplace(std::move(tensor), std::move(view));
  }
  return checkpoint;
}

const TensorView* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> sorted;
  sorted.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) sorted.push_back(name);  // std::map keeps order
  return sorted;
}

}  // namespace lumen::formats
