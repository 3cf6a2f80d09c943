// Writing GGUF files (version 3, the layout formats/gguf.h reads): metadata, tensor infos,
// then each tensor's bytes at `general.alignment` (32 unless the metadata says otherwise).
//
// The writer streams: the header goes out first (every tensor's type and shape, hence its
// size and offset, is known up front), then the caller hands over each tensor's bytes in
// table order, in as many pieces as it likes. Everything goes to "<path>.tmp-<pid>";
// finish() syncs and renames it to `path`, and a writer destroyed before finish() removes
// its temp file, so nothing half-written is ever at `path`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"

namespace lumen::formats {

// Metadata to write, in insertion order; setting a key again replaces its value in place.
class GgufMetadata {
 public:
  void set_string(std::string_view key, std::string_view value);
  void set_u32(std::string_view key, uint32_t value);
  void set_i32(std::string_view key, int32_t value);
  void set_u64(std::string_view key, uint64_t value);
  void set_f32(std::string_view key, float value);
  void set_bool(std::string_view key, bool value);
  void set_string_array(std::string_view key, const std::vector<std::string>& values);
  void set_string_array(std::string_view key, const std::vector<std::string_view>& values);
  void set_i32_array(std::string_view key, const std::vector<int32_t>& values);
  void set_u32_array(std::string_view key, const std::vector<uint32_t>& values);
  void set_f32_array(std::string_view key, const std::vector<float>& values);
  void set_bool_array(std::string_view key, const std::vector<bool>& values);
  // A value as a GgufFile read it (any type, nested arrays included), copied.
  void set_value(std::string_view key, const GgufValue& value);

  void remove(std::string_view key);
  bool has(std::string_view key) const;
  size_t size() const { return entries_.size(); }

  struct Entry {
    std::string key;
    std::vector<uint8_t> value;  // the type tag and the encoded value, as the file holds them
  };
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  void put(std::string_view key, std::vector<uint8_t> encoded);
  std::vector<Entry> entries_;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // fastest-varying first, as GgufTensor::ne
};

// Bytes of a tensor of `type` and dims `ne`. Throws lumen::Error naming `name` for a type
// without a known layout or a row length that is not a whole number of blocks.
size_t gguf_tensor_bytes(const std::string& name, GgmlType type, const std::vector<int64_t>& ne);

class GgufWriter {
 public:
  // Opens the temp file and writes the header. Throws lumen::Error naming the file when it
  // cannot be written, or naming a tensor with a bad type or shape.
  GgufWriter(const std::string& path, const GgufMetadata& metadata, std::vector<GgufTensorInfo> tensors);
  ~GgufWriter();
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Appends bytes of the current tensor; moves on to the next tensor once one is complete.
  void write(const void* data, size_t n);
  // Throws lumen::Error if a tensor is incomplete; then syncs and renames into place.
  void finish();

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  size_t tensor_bytes(size_t i) const { return sizes_[i]; }
  uint64_t total_bytes() const { return total_; }
  uint64_t written_bytes() const { return pos_; }

 private:
  void put(const void* data, size_t n);
  void pad_to(uint64_t pos);
  [[noreturn]] void fail_write();

  std::string path_, temp_path_;
  std::FILE* file_ = nullptr;
  std::vector<GgufTensorInfo> tensors_;
  std::vector<size_t> sizes_;
  std::vector<uint64_t> offsets_;  // absolute file offsets
  size_t current_ = 0;
  uint64_t in_current_ = 0, pos_ = 0, total_ = 0;
  bool finished_ = false;
};

}  // namespace lumen::formats
