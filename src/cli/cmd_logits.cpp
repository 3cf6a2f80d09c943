// lumen logits -m MODEL --tokens 2,105,9 --out F.npy: float32 logits of every position.
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/model_flags.h"
#include "formats/npy.h"
#include "runtime/bench.h"
#include "runtime/engine.h"

namespace {

struct LogitsOptions {
  bool allow_unverified = false;
  bool stats = false;
  std::string model, tokens, out;
  lumen::cli::ModelFlags model_flags;  // --manifest, --weights, session settings
};

LUMEN_COMMAND(60, [](CLI::App& app) {
  auto opts = std::make_shared<LogitsOptions>();
  auto* cmd = app.add_subcommand("logits", "Write float32 logits [T, V] of every position to a .npy file");
  cmd->add_option("-m,--model", opts->model, "Model directory, .gguf or packed .lmp file (default: the installed Gemma 3 270M)");
  cmd->add_option("--tokens", opts->tokens, "Comma-separated token ids")->required();
  cmd->add_option("--out", opts->out, "Output .npy file")->required();
  cmd->add_flag("--allow-unverified", opts->allow_unverified,
                "Run a model whose manifest marks it unsupported (known not to run correctly)");
  cmd->add_flag("--stats", opts->stats,
                "Print one JSON line of counters on stderr: per-layer input caches (hits, misses, bytes read), "
                "experts read");
  lumen::cli::add_model_flags(cmd, opts->model_flags, false);
  return std::pair{cmd, lumen::cli::Runner([opts] {
    const auto tokens = lumen::cli::parse_token_list(opts->tokens);
    lumen::runtime::LoadOptions load;
    load.allow_unverified = opts->allow_unverified;
    auto engine = lumen::cli::load_engine(opts->model, opts->model_flags, load);
    const auto logits = engine->logits_all(tokens);
    lumen::formats::write_npy_f32(opts->out, logits.data(),
                                  {int64_t(tokens.size()), int64_t(engine->spec().vocab_size)});
    if (opts->stats) fmt::print(stderr, "{}\n", lumen::runtime::model_counters_json(engine->model()).dump());
    return 0;
  })};
});

}  // namespace
