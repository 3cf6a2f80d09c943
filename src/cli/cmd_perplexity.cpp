// lumen perplexity -m MODEL -f FILE [--ctx N]: the model's perplexity over a text file
// (runtime/perplexity.h defines the figure). A progress bar goes to stderr when it is a
// terminal.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"

namespace {

struct PerplexityOptions {
  std::string model, file;
  int ctx = 512;
  int64_t max_tokens = 0;
  bool json = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw lumen::Error(path + ": cannot open for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw lumen::Error(path + ": read error");
  return text.str();
}

void draw_progress(int done, int total, double mean_nll) {
  constexpr int kWidth = 30;
  const int filled = total ? done * kWidth / total : kWidth;
  fmt::print(stderr, "\rperplexity [{}{}] {}/{} chunks, ppl so far {:.4f}", std::string(size_t(filled), '#'),
             std::string(size_t(kWidth - filled), '.'), done, total, std::exp(mean_nll));
  if (done == total) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

LUMEN_COMMAND(40, [](CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of the model over a text file");
  cmd->add_option("-m,--model", o->model, "Model directory or .gguf file (default: the installed Gemma 3 270M)");
  cmd->add_option("-f,--file", o->file, "UTF-8 text file to score")->required();
  cmd->add_option("--ctx", o->ctx, "Tokens per chunk, the BOS included (default 512)");
  cmd->add_option("--max-tokens", o->max_tokens, "Score only the first N tokens of the text (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  lumen::cli::add_exact_flag(cmd);
  return std::pair{cmd, lumen::cli::Runner([o] {
    const std::string text = read_text(o->file);
    const std::string model_path = lumen::cli::resolve_model_path(o->model);
    auto engine = lumen::runtime::Engine::load(model_path);
    const auto& tok = engine->require_tokenizer();
    std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false);
    if (ids.empty()) throw lumen::Error(o->file + ": no text to score");
    if (o->max_tokens > 0 && int64_t(ids.size()) > o->max_tokens) ids.resize(size_t(o->max_tokens));
    const bool bar = ::isatty(STDERR_FILENO) == 1;
    const auto r = lumen::runtime::perplexity(*engine, ids, o->ctx, tok.bos_id(),
                                              bar ? draw_progress : std::function<void(int, int, double)>());
    if (o->json) {
      std::cout << fmt::format(R"({{"file": "{}", "tokens": {}, "chunks": {}, "ctx": {}, "nll": {:.9g}, "ppl": {:.9g}}})",
                               lumen::printable(o->file), r.scored, r.chunks, r.ctx, r.mean_nll, r.ppl)
                << std::endl;
    } else {
      std::cout << fmt::format("perplexity {:.4f} over {} tokens ({} chunks of up to {} tokens with BOS)", r.ppl,
                               r.scored, r.chunks, r.ctx)
                << std::endl;
    }
    return 0;
  })};
});

}  // namespace
