#include "runtime/manifest_run.h"

#include "base/error.h"
#include "spec/litert_receipt.h"

namespace lumen::runtime {

ManifestRun load_manifest_run(const std::string& path, bool allow_unverified, const std::string& package,
                              const std::string& receipt) {
  const nlohmann::json doc = read_manifest_json(path);
  if (!doc.is_object()) throw Error(path + ": expected a JSON object (a doppler.execution/v1 manifest)");
  ManifestRun m;
  m.path = path;
  m.table = manifest_field_table(doc, path);
  // The spec first (its errors name the field); then the gate, before any other refusal: a
  // manifest that says it is known not to run says so first.
  m.spec = spec::spec_from_manifest(doc, path);
  // A .litertlm package run under the manifest: a passing receipt for it lifts the gate.
  if (package.empty())
    spec::require_supported(m.spec, allow_unverified);
  else
    spec::require_supported_package(m.spec, allow_unverified, package, receipt);
  if (!m.table.error.empty()) throw Error(m.table.error);
  m.run = run_config_from_manifest(doc, path);
  validate_run_config(m.run, m.spec);
  return m;
}

spec::ModelSpec spec_to_run(std::optional<spec::ModelSpec> from_weights, const LoadOptions& options) {
  if (!options.manifest_spec) {
    if (!from_weights) throw Error("internal: no model spec (the weights carry none and no manifest was given)");
    return std::move(*from_weights);
  }
  spec::ModelSpec spec = *options.manifest_spec;
  spec::require_supported(spec, options.allow_unverified);
  if (from_weights) {
    for (auto& note : spec::check_manifest_matches_weights(spec, *from_weights))
      spec.notes.push_back("manifest overrides the weights' config: " + note);
  }
  return spec;
}

}  // namespace lumen::runtime
