// A sharded checkpoint's model.safetensors.index.json, in a directory that holds two small
// valid shards: shard names (paths that leave the directory, missing shards, normalization),
// tensors claimed by the index against what the shards hold.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "formats/safetensors.h"
#include "fuzz_support.h"

using namespace lumen;
namespace fs = std::filesystem;

namespace {

fs::path checkpoint_dir;

// A valid shard holding F32 tensors of 2 elements each.
std::string shard(std::initializer_list<const char*> names) {
  std::string header = "{";
  std::string data;
  for (const char* name : names) {
    if (header.size() > 1) header += ",";
    header += std::string("\"") + name + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" +
              std::to_string(data.size()) + "," + std::to_string(data.size() + 8) + "]}";
    data += std::string(8, '\x01');
  }
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/lumen-fuzz-index-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) fuzz::crash("cannot make a temporary directory");
  checkpoint_dir = pattern;
  write(checkpoint_dir / "model-00001-of-00002.safetensors", shard({"embed.weight", "norm.weight"}));
  write(checkpoint_dir / "model-00002-of-00002.safetensors", shard({"layers.0.weight"}));
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(checkpoint_dir, ignored);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write(checkpoint_dir / "model.safetensors.index.json", std::string(reinterpret_cast<const char*>(data), size));
  fuzz::expect_clean([&] {
    const auto ckpt = formats::SafetensorsCheckpoint::open(checkpoint_dir.string());
    for (const std::string& name : ckpt.names()) fuzz::touch(ckpt.find(name)->data, ckpt.find(name)->nbytes);
  });
  return 0;
}
