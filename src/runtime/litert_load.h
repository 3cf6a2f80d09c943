// Loading a model from a LiteRT-LM package (.litertlm): the spec from --config (an HF
// config.json or a manifest) or the package directory's config.json, cross-checked with the
// package's LlmMetadata model type; the weights through the declared constant map
// (spec/litert_map.h: name rules, or a lumen.litert-map/v1 file); the tokenizer from the
// package's SP_Tokenizer section; the manifest's `unsupported` gate lifted only by a passing
// parity receipt for this exact package (spec/litert_receipt.h) or --allow-unverified.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/weights.h"
#include "quant/weight_matrix.h"
#include "spec/model_spec.h"
#include "tokenizer/tokenizer.h"

namespace lumen::runtime {

// True when `path` is a regular file starting with "LITERTLM".
bool is_litertlm_file(const std::string& path);

struct LitertLoadOptions {
  std::string config;   // "" : PACKAGE_DIR/config.json
  std::string map;      // "" : the name rules
  std::string receipt;  // "" : PACKAGE.receipt.json when it exists
  bool allow_unverified = false;
  std::optional<quant::WeightFormat> requantize;  // e.g. f32: every matrix dequantized exactly
};

struct LitertModel {
  spec::ModelSpec spec;
  model::ModelWeights weights;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null when the package has no SP section
};

LitertModel load_litert_package(const std::string& path, const LitertLoadOptions& options);

// The spec of a package: `config` when given, else the package directory's config.json.
spec::ModelSpec litert_package_spec(const std::string& package_path, const std::string& config);

}  // namespace lumen::runtime
