// Safetensors checkpoints: one `*.safetensors` file, or a directory with
// `model.safetensors.index.json` naming shards, or a directory with a single
// `model.safetensors`. Every shard is memory-mapped; tensors point into the maps.
//
// Every defect is reported as a lumen::Error with one line naming the file and,
// where there is one, the tensor: header length past the end, header that is not JSON,
// unknown dtype, offsets out of order / past the end / not matching dtype x shape,
// index naming a missing shard or a tensor the shard lacks, duplicate tensors.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/mapped_file.h"
#include "formats/tensor.h"

namespace lumen::formats {

class SafetensorsCheckpoint {
 public:
  // `path`: a .safetensors file or a directory holding the checkpoint.
  static SafetensorsCheckpoint open(const std::string& path);
  // One .safetensors file's bytes, kept alive by the caller; `name` stands for the path.
  static SafetensorsCheckpoint parse(const std::byte* data, size_t size, const std::string& name);

  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // The file or directory it was opened from.
  const std::string& path() const { return path_; }
  // The mapped shards, to check that none has changed on disk since it was opened.
  const std::vector<std::unique_ptr<MappedFile>>& mapped_files() const { return files_; }
  // Per-file `__metadata__` string map is ignored except for reporting.

 private:
  std::string path_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace lumen::formats
