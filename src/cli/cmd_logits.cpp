// lumen logits -m MODEL --tokens 2,105,9 --out F.npy: float32 logits of every position.
#include <memory>

#include "cli/command.h"
#include "formats/npy.h"
#include "runtime/engine.h"

namespace {

struct LogitsOptions {
  std::string model, tokens, out;
};

LUMEN_COMMAND(60, [](CLI::App& app) {
  auto opts = std::make_shared<LogitsOptions>();
  auto* cmd = app.add_subcommand("logits", "Write float32 logits [T, V] of every position to a .npy file");
  cmd->add_option("-m,--model", opts->model, "Model directory or .gguf file (default: the installed Gemma 3 270M)");
  cmd->add_option("--tokens", opts->tokens, "Comma-separated token ids")->required();
  cmd->add_option("--out", opts->out, "Output .npy file")->required();
  return std::pair{cmd, lumen::cli::Runner([opts] {
    const auto tokens = lumen::cli::parse_token_list(opts->tokens);
    auto engine = lumen::runtime::Engine::load(lumen::cli::resolve_model_path(opts->model));
    const auto logits = engine->logits_all(tokens);
    lumen::formats::write_npy_f32(opts->out, logits.data(),
                                  {int64_t(tokens.size()), int64_t(engine->spec().vocab_size)});
    return 0;
  })};
});

}  // namespace
