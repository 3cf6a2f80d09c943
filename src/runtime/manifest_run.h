// Running a model from a doppler.execution/v1 manifest: the manifest gives the model spec,
// the session settings (RunConfig) and the tokenizer rules; the weights (a safetensors
// directory, a GGUF, a packed .lmp, later a .litertlm) give the tensors, and whatever
// description they carry of themselves is checked against the manifest.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/manifest_fields.h"
#include "runtime/run_config.h"
#include "spec/model_spec.h"

namespace lumen::runtime {

struct ManifestRun {
  std::string path;
  spec::ModelSpec spec;
  RunConfig run;
  FieldTable table;
};

// Reads the manifest and builds its spec, run config and field table. Throws one lumen::Error
// line naming the field when any field is refused. The `unsupported` gate is applied:
// refused with code, message and recommendation unless `allow_unverified`.
// `package`: the .litertlm the manifest runs ("" for other weights); a passing `lumen verify`
// receipt for it (`receipt`, else the one beside the package) lifts the `unsupported` gate.
ManifestRun load_manifest_run(const std::string& path, bool allow_unverified, const std::string& package = "",
                              const std::string& receipt = "");

// The spec Engine::load runs. Without options.manifest_spec: `from_weights` (required). With
// it: the manifest's spec, after the gate and, when the weights describe themselves
// (`from_weights`), after every shape matched (spec::check_manifest_matches_weights; the
// behaviour differences it reports become notes of the returned spec).
spec::ModelSpec spec_to_run(std::optional<spec::ModelSpec> from_weights, const LoadOptions& options);

}  // namespace lumen::runtime
