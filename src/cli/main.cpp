// The `lumen` command line: one subcommand per job, each in its own cmd_*.cpp file. Every
// user error ends as a single "lumen: error: ..." line on stderr and exit status 1; usage
// errors exit 2.
#include <algorithm>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "formats/temp_files.h"
#include "kernels/block_matmul.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul.h"

namespace lumen::cli {

std::vector<std::pair<int, Registration>>& registered_commands() {
  static std::vector<std::pair<int, Registration>> commands;
  return commands;
}

CommandRegistrar::CommandRegistrar(int order, Registration registration) {
  registered_commands().emplace_back(order, std::move(registration));
}

std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 0 || value > INT32_MAX)
      throw Error(flag + ": '" + printable(item) + "' is not a token id (expected comma-separated integers)");
    ids.push_back(int32_t(value));
    start = comma + 1;
  }
  return ids;
}

std::string ids_to_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace lumen::cli

int main(int argc, char** argv) {
  using namespace lumen::cli;
  // A file being written (quantize, convert, imatrix...) is removed if Ctrl-C or SIGTERM ends us.
  lumen::formats::install_temp_file_cleanup();
  CLI::App app{"Lumen: Gemma inference on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lumen 0.1.0");

  std::string isa;
  app.add_option("--isa", isa, "Force a kernel variant (scalar, avx2, avx512); default: the best the CPU has (also LUMEN_ISA)");
  std::string activations;
  app.add_option("--activations", activations,
                 "How the int8 kernels quantize activations: int8x2 (default: 16 bits as two int8 planes, "
                 "perplexity within 1e-5 of the f32 path) or int8 (one plane, as llama.cpp: faster, ~1.5% "
                 "perplexity on Gemma 3 270M); also LUMEN_BLOCK_ACT and LUMEN_Q8_ACT");
  bool exact = false;
  app.add_flag("--exact", exact,
               "Run every matrix product on the f32 reference path (weights expanded exactly, f32 activations) "
               "instead of the int8 kernels (also LUMEN_EXACT=1)");

  auto commands = registered_commands();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (auto& [order, reg] : commands) runners.push_back(reg(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (!isa.empty()) {
      lumen::kernels::Isa forced;
      if (!lumen::kernels::parse_isa(isa.c_str(), forced))
        throw lumen::Error("--isa: unknown kernel variant " + lumen::in_quotes(isa) + " (scalar, avx2, avx512)");
      if (!lumen::kernels::cpu_supports(forced))
        throw lumen::Error("--isa: this CPU does not support " + isa);
      lumen::kernels::set_isa(forced);
    }
    if (!activations.empty()) {
      lumen::kernels::Q8Activations mode;
      if (!lumen::kernels::parse_q8_activations(activations.c_str(), mode))
        throw lumen::Error("--activations: " + lumen::in_quotes(activations) + " is not one of: int8, int8x2");
      lumen::kernels::set_q8_activations(mode);
      lumen::kernels::set_block_activations(mode == lumen::kernels::Q8Activations::Int8
                                                ? lumen::kernels::BlockActivationMode::Int8
                                                : lumen::kernels::BlockActivationMode::Int8x2);
    }
    if (exact) lumen::kernels::set_exact_matmul(true);
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    fmt::print(stderr, "lumen: error: {}\n", msg);
    return 1;
  }
  return 0;
}
