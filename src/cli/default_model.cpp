// The default model: Gemma 3 270M (Q4_K_M GGUF), installed by scripts/setup at
// <repo>/models/gemma-3-270m-q4_k_m.gguf.
#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "cli/command.h"

namespace lumen::cli {

namespace fs = std::filesystem;

namespace {
constexpr const char* kDefaultModelFile = "models/gemma-3-270m-q4_k_m.gguf";
}

std::string default_model_path() {
  std::error_code ec;
  // Next to the build folder the binary runs from (build/lumen -> models/...).
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = exe.parent_path().parent_path() / kDefaultModelFile;
    if (fs::is_regular_file(beside, ec)) return beside.string();
  }
  return (fs::path(LUMEN_SOURCE_DIR) / kDefaultModelFile).string();
}

std::string resolve_model_path(const std::string& given) {
  if (!given.empty()) return given;
  if (const char* env = std::getenv("LUMEN_MODEL"); env && *env) return env;
  const std::string path = default_model_path();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw Error("no model given (-m) and the default model is not installed at " + path +
                ": run scripts/setup");
  return path;
}

}  // namespace lumen::cli
