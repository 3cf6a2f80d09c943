// lumen inspect PATH [--json]: a .litertlm package or .tflite model listed in full (see
// inspect_litert.h), or the model spec Lumen derives from a model directory, config.json or
// manifest.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/inspect_litert.h"
#include "spec/model_spec.h"

namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
};

LUMEN_COMMAND(50, [](CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand(
      "inspect", "List a .litertlm package or .tflite model, or print the model spec of a model directory, config.json, manifest or GGUF file");
  cmd->add_option("path", opts->path, ".litertlm, .tflite, .gguf, model directory, config.json or doppler.execution/v1 manifest")->required();
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  return std::pair{cmd, lumen::cli::Runner([opts] {
    if (lumen::cli::inspect_litert_file(opts->path, opts->json)) return 0;
    const lumen::spec::ModelSpec spec = lumen::spec::load_spec(opts->path);
    if (opts->json) std::cout << lumen::spec::spec_to_json(spec).dump(2) << "\n";
    else std::cout << lumen::spec::spec_to_text(spec);
    return 0;
  })};
});

}  // namespace
