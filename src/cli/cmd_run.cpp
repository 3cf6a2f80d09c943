// lumen run -m MODEL --tokens 2,105,9 -n 32: the greedy continuation of token ids.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "runtime/engine.h"

namespace {

struct RunOptions {
  std::string model, tokens;
  int n = 32;
};

LUMEN_COMMAND(10, [](CLI::App& app) {
  auto opts = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Greedy continuation of a token sequence");
  cmd->add_option("-m,--model", opts->model, "Model directory or .gguf file (default: the installed Gemma 3 270M)");
  cmd->add_option("--tokens", opts->tokens, "Comma-separated prompt token ids")->required();
  cmd->add_option("-n,--n-predict", opts->n, "Number of tokens to generate")->check(CLI::NonNegativeNumber);
  return std::pair{cmd, lumen::cli::Runner([opts] {
    const auto tokens = lumen::cli::parse_token_list(opts->tokens);
    auto engine = lumen::runtime::Engine::load(lumen::cli::resolve_model_path(opts->model));
    const auto ids = engine->generate_greedy(tokens, opts->n);
    std::cout << lumen::cli::ids_to_json(ids) << std::endl;
    return 0;
  })};
});

}  // namespace
