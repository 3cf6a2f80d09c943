// How a subcommand plugs into the `lumen` program. Each command lives in its own file
// (cmd_*.cpp) and registers itself with a static LUMEN_COMMAND(...) object: it adds its
// subcommand and options to the app and returns the function that runs it. main.cpp parses,
// then runs the one the user picked. Errors thrown by a runner become the single
// "lumen: error: ..." line and exit status 1.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace lumen::cli {

using Runner = std::function<int()>;
// Adds one subcommand to `app`; returns it and its runner.
using Registration = std::function<std::pair<CLI::App*, Runner>(CLI::App& app)>;

// `order` sorts `lumen --help` (smaller first).
struct CommandRegistrar {
  CommandRegistrar(int order, Registration registration);
};
std::vector<std::pair<int, Registration>>& registered_commands();

// "2, 105, 9" -> ids; throws lumen::Error naming `flag` on a bad item.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag = "--tokens");
std::string ids_to_json(const std::vector<int32_t>& ids);

// The model a command runs: `given` (the -m value) when not empty, else $LUMEN_MODEL, else
// the default model scripts/setup installs (models/gemma-3-270m-q4_k_m.gguf of the source
// tree). Throws lumen::Error telling the user to run scripts/setup when it is not installed.
std::string resolve_model_path(const std::string& given);
// Where the default model is (or would be) installed.
std::string default_model_path();

}  // namespace lumen::cli

#define LUMEN_CONCAT_INNER(a, b) a##b
#define LUMEN_CONCAT(a, b) LUMEN_CONCAT_INNER(a, b)
#define LUMEN_COMMAND(order, ...) \
  static ::lumen::cli::CommandRegistrar LUMEN_CONCAT(lumen_command_, __COUNTER__)(order, __VA_ARGS__)
