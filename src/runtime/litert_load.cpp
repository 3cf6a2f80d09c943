#include "runtime/litert_load.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "formats/litertlm.h"
#include "model/weights_litert.h"
#include "spec/litert_map.h"
#include "spec/litert_receipt.h"

namespace lumen::runtime {

namespace fs = std::filesystem;

bool is_litertlm_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  in.read(head, 8);
  return in.gcount() == 8 && std::memcmp(head, "LITERTLM", 8) == 0;
}

spec::ModelSpec litert_package_spec(const std::string& package_path, const std::string& config) {
  if (!config.empty()) return spec::load_spec(config);
  const fs::path beside = fs::path(package_path).parent_path() / "config.json";
  std::error_code ec;
  if (fs::is_regular_file(beside, ec)) return spec::load_spec(beside.string());
  throw Error(package_path + ": a .litertlm package does not carry the model's full configuration; pass --config "
              "CONFIG.json (the model's HF config.json or a manifest), or put config.json beside the package");
}

namespace {

// The package's LlmMetadata model type must be the spec's family.
void check_model_type(const formats::LitertlmFile& pkg, const spec::ModelSpec& spec) {
  for (const auto& s : pkg.sections) {
    if (s.type != formats::SectionType::LlmMetadataProto) continue;
    const std::string type = pkg.llm_metadata(s).model_type;
    if (type.empty() || type == "generic_model") return;
    const bool gemma3 = type == "gemma3" || type == "gemma3270m" || type == "function_gemma";
    const std::string family = gemma3 ? "gemma3" : type;
    if (family != spec.family)
      throw Error(pkg.path() + ": LlmMetadata model type " + in_quotes(type) + " is not the " + spec.family +
                  " model " + spec.source + " describes");
    return;
  }
}

}  // namespace

LitertModel load_litert_package(const std::string& path, const LitertLoadOptions& options) {
  LitertModel out;
  out.spec = options.spec ? *options.spec : litert_package_spec(path, options.config);
  // Before any weight is read: a manifest's `unsupported` block needs a receipt for this package.
  spec::require_supported_package(out.spec, options.allow_unverified, path, options.receipt);
  for (const auto& l : out.spec.layers)
    if (l.moe())
      throw Error(path + ": the model has mixture-of-experts layers (" + out.spec.source +
                  "): Lumen reads LiteRT-LM packages of dense and per-layer-input (E2B/E4B) models; run the "
                  "experts from the HF checkpoint, a GGUF or a .lmp");
  const formats::LitertlmFile pkg = formats::LitertlmFile::open(path);
  check_model_type(pkg, out.spec);
  const spec::PackageConstants constants = spec::collect_package_constants(pkg);
  const spec::LitertMap map =
      options.map.empty() ? spec::map_by_names(constants) : spec::load_map_file(options.map, constants);
  out.weights = model::bind_litert_weights(out.spec, constants, map);
  if (options.requantize) model::requantize_weights(out.weights, *options.requantize);
  for (const auto& s : pkg.sections)
    if (s.type == formats::SectionType::SP_Tokenizer) {
      out.tokenizer = tokenizer::load_sentencepiece_bytes(pkg.sentencepiece_model(s), pkg.section_name(s));
      break;
    }
  return out;
}

}  // namespace lumen::runtime
