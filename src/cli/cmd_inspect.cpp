// lumen inspect PATH [--json]: the model spec Lumen derives from a model directory,
// config.json or manifest.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "spec/model_spec.h"

namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
};

LUMEN_COMMAND(50, [](CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "Print the model spec of a model directory, config.json, manifest or GGUF file");
  cmd->add_option("path", opts->path, "Model directory, config.json, doppler.execution/v1 manifest or .gguf file")->required();
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  return std::pair{cmd, lumen::cli::Runner([opts] {
    const lumen::spec::ModelSpec spec = lumen::spec::load_spec(opts->path);
    if (opts->json) std::cout << lumen::spec::spec_to_json(spec).dump(2) << "\n";
    else std::cout << lumen::spec::spec_to_text(spec);
    return 0;
  })};
});

}  // namespace
