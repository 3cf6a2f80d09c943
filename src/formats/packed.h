// Lumen's packed model file (".lmp"): one file holding a model spec and its weights already
// in the kernels' layout, so loading is an mmap and a check.
//
//   bytes 0..7    magic "LUMENPK\0"
//   bytes 8..11   u32 format version (kPackedVersion)
//   bytes 12..15  u32 reserved (0)
//   bytes 16..23  u64 length of the JSON header that follows
//   JSON header   {"architecture": "gemma4", "config": {HF config.json}, "quant": "q4",
//                  "source": "...", "tensors": [{"name", "format", "shape", "offset", "size"}]}
//   data          from the first multiple of 64 after the header; each tensor's `offset`
//                 (relative to the data start) is a multiple of 64
//
// `format` is a storage format name: a dtype ("F32", "BF16") or a quant layout name
// ("q4_0x4", "q8_0x4"); this layer only locates the bytes. Little-endian throughout.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/mapped_file.h"
#include "formats/tensor.h"

namespace lumen::formats {

constexpr uint32_t kPackedVersion = 1;
constexpr size_t kPackedAlign = 64;
constexpr const char* kPackedArchitecture = "gemma4";

// True when `path` is a regular file starting with the packed magic.
bool is_packed_file(const std::string& path);

class PackedFile {
 public:
  // Throws lumen::Error (one line naming the file) when the file is not a packed model, is
  // truncated, has a newer version, another architecture, or a bad header/tensor table.
  static std::unique_ptr<PackedFile> open(const std::string& path);
  // The same for bytes the caller keeps alive; `name` stands for the path in errors.
  static std::unique_ptr<PackedFile> parse(const std::byte* data, size_t size, const std::string& name);

  const nlohmann::json& header() const { return header_; }
  const nlohmann::json& config() const { return header_.at("config"); }
  const TensorView* find(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& path() const { return file_->path(); }
  const MappedFile& mapped_file() const { return *file_; }

 private:
  static std::unique_ptr<PackedFile> read(std::unique_ptr<MappedFile> file);
  std::unique_ptr<MappedFile> file_;
  nlohmann::json header_;
  std::map<std::string, TensorView> tensors_;
};

struct PackedTensorEntry {
  std::string name;
  std::string format;  // storage format name
  std::vector<int64_t> shape;
  size_t size = 0;  // bytes
};

// Writes a packed file: the header first, then each tensor's bytes in table order, to
// "<path>.tmp-<pid>"; finish() syncs and renames it to `path`. A writer destroyed before
// finish() removes its temp file, so nothing half-written is ever at `path`.
class PackedWriter {
 public:
  // `header` holds everything but "tensors", which the writer fills in.
  PackedWriter(const std::string& path, nlohmann::json header, std::vector<PackedTensorEntry> entries);
  ~PackedWriter();
  PackedWriter(const PackedWriter&) = delete;
  PackedWriter& operator=(const PackedWriter&) = delete;

  // Appends bytes of the current tensor; moves to the next tensor once one is complete.
  void write(const void* data, size_t n);
  void finish();
  uint64_t total_bytes() const { return total_; }
  uint64_t written_bytes() const { return written_; }

 private:
  void pad_to(uint64_t pos);

  std::string path_, temp_path_;
  std::FILE* file_ = nullptr;
  std::vector<PackedTensorEntry> entries_;
  std::vector<uint64_t> offsets_;  // absolute file offsets
  size_t current_ = 0;
  uint64_t in_current_ = 0, pos_ = 0, total_ = 0, written_ = 0;
  bool finished_ = false;
};

}  // namespace lumen::formats
