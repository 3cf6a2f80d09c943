// The flags of commands that load a .litertlm package (run, logits).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace lumen::cli {

inline void add_litert_flags(CLI::App* cmd, std::string& config, std::string& map, std::string& receipt) {
  cmd->add_option("--config", config,
                  "For a .litertlm package: the model's HF config.json or a manifest (default: config.json beside the package)");
  cmd->add_option("--map", map, "For a .litertlm package: a lumen.litert-map/v1 file mapping its constants (default: by name)");
  cmd->add_option("--receipt", receipt,
                  "For a .litertlm package: a passing `lumen verify` receipt for it, which lifts a manifest's "
                  "`unsupported` refusal (default: PACKAGE.receipt.json when present)");
}

}  // namespace lumen::cli
