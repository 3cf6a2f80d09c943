// lumen logits -m MODEL --tokens 2,105,9 --out F.npy: float32 logits of every position.
#include <memory>

#include "cli/command.h"
#include "cli/litert_flags.h"
#include "formats/npy.h"
#include "runtime/engine.h"

namespace {

struct LogitsOptions {
  bool allow_unverified = false;
  std::string model, tokens, out, quant;
  std::string litert_config, litert_map, litert_receipt;
};

LUMEN_COMMAND(60, [](CLI::App& app) {
  auto opts = std::make_shared<LogitsOptions>();
  auto* cmd = app.add_subcommand("logits", "Write float32 logits [T, V] of every position to a .npy file");
  cmd->add_option("-m,--model", opts->model, "Model directory, .gguf or packed .lmp file (default: the installed Gemma 3 270M)");
  cmd->add_option("--tokens", opts->tokens, "Comma-separated token ids")->required();
  cmd->add_option("--out", opts->out, "Output .npy file")->required();
  cmd->add_option("--quant", opts->quant, "Convert the weights at load: q4, q8, bf16, f32");
  cmd->add_flag("--allow-unverified", opts->allow_unverified,
                "Run a model whose manifest marks it unsupported (known not to run correctly)");
  lumen::cli::add_litert_flags(cmd, opts->litert_config, opts->litert_map, opts->litert_receipt);
  return std::pair{cmd, lumen::cli::Runner([opts] {
    const auto tokens = lumen::cli::parse_token_list(opts->tokens);
    lumen::runtime::LoadOptions load;
    load.quant = opts->quant;
    load.allow_unverified = opts->allow_unverified;
    load.litert_config = opts->litert_config;
    load.litert_map = opts->litert_map;
    load.litert_receipt = opts->litert_receipt;
    auto engine = lumen::runtime::Engine::load(lumen::cli::resolve_model_path(opts->model), load);
    const auto logits = engine->logits_all(tokens);
    lumen::formats::write_npy_f32(opts->out, logits.data(),
                                  {int64_t(tokens.size()), int64_t(engine->spec().vocab_size)});
    return 0;
  })};
});

}  // namespace
