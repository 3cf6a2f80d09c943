// lumen perplexity -m MODEL -f FILE [--ctx N]: the model's perplexity over a text file
// (runtime/perplexity.h defines the figure). With --kl-divergence-base FILE it saves the
// model's log-probabilities over the text (a reference model's); with --kl-divergence too it
// compares the model against such a file instead (runtime/kl_divergence.h), as
// llama-perplexity does. A progress bar goes to stderr when it is a terminal.
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
#include "cli/progress.h"
#include "runtime/engine.h"
#include "runtime/kl_divergence.h"
#include "runtime/perplexity.h"

namespace {

struct PerplexityOptions {
  std::string model, file, kl_base, quant, imatrix;
  int ctx = 512, chunks = 0;
  int64_t max_tokens = 0;
  bool json = false, kl = false;
};

std::string kl_json(const lumen::runtime::KlStats& s) {
  return fmt::format(
      R"({{"chunks": {}, "ctx": {}, "positions": {}, "ppl": {:.9g}, "ppl_unc": {:.6g}, "ppl_base": {:.9g}, )"
      R"("ppl_base_unc": {:.6g}, "log_ppl_ratio": {:.9g}, "ppl_ratio": {:.9g}, "ppl_diff": {:.9g}, "ppl_diff_unc": {:.6g}, )"
      R"("kld": {:.9g}, "kld_unc": {:.6g}, "kld_max": {:.9g}, "kld_99_9": {:.9g}, "kld_99": {:.9g}, "kld_95": {:.9g}, )"
      R"("kld_median": {:.9g}, "dp": {:.9g}, "rms_dp": {:.9g}, "rms_dp_unc": {:.6g}, "dp_99": {:.9g}, "dp_1": {:.9g}, )"
      R"("same_top": {:.9g}, "same_top_unc": {:.6g}}})",
      s.n_chunk, s.n_ctx, s.count, s.ppl, s.ppl_unc, s.ppl_base, s.ppl_base_unc, s.log_ppl_ratio, s.ppl_ratio, s.ppl_diff,
      s.ppl_diff_unc, s.kld, s.kld_unc, s.kld_max, s.kld_99_9, s.kld_99, s.kld_95, s.kld_median, s.dp, s.rms_dp,
      s.rms_dp_unc, s.dp_99, s.dp_1, s.same_top, s.same_top_unc);
}

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
  cmd->add_option("-m,--model", o->model, "Model directory, .gguf or packed .lmp file (default: the installed Gemma 3 270M)");
  cmd->add_option("-f,--file", o->file, "UTF-8 text file to score");
  cmd->add_option("--ctx", o->ctx, "Tokens per chunk, the BOS included (default 512)");
  cmd->add_option("--kl-divergence-base", o->kl_base,
                  "Save the model's log-probabilities over the text to FILE (llama-perplexity's format); "
                  "with --kl-divergence, compare the model against FILE instead");
  cmd->add_flag("--kl-divergence", o->kl, "Compare against --kl-divergence-base: KL divergence, top-1 agreement, Δp, ΔPPL");
  cmd->add_option("--chunks", o->chunks, "KL modes: use at most N chunks of --ctx tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-tokens", o->max_tokens, "Score only the first N tokens of the text (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  lumen::cli::add_exact_flag(cmd);
  lumen::cli::add_quant_flags(cmd, o->quant, o->imatrix);
  return std::pair{cmd, lumen::cli::Runner([o] {
    lumen::runtime::LoadOptions load;
    load.quant = o->quant;
    load.imatrix = o->imatrix;
    if (o->kl && o->kl_base.empty()) throw lumen::Error("--kl-divergence needs --kl-divergence-base FILE (the saved reference)");
    if (o->kl) {
      auto engine = lumen::runtime::Engine::load(lumen::cli::resolve_model_path(o->model), load);
      lumen::cli::ProgressBar bar("kl-divergence");
      const auto s = lumen::runtime::kl_divergence(*engine, o->kl_base, o->chunks, [&](int done, int total) {
        bar.update(uint64_t(done), uint64_t(total), fmt::format("{}/{} chunks", done, total));
      });
      std::cout << (o->json ? kl_json(s) + "\n" : lumen::runtime::kl_report(s)) << std::flush;
      return 0;
    }
    if (o->file.empty()) throw lumen::Error("perplexity: -f FILE (the text) is required");
    const std::string text = read_text(o->file);
    if (!o->kl_base.empty()) {
      auto engine = lumen::runtime::Engine::load(lumen::cli::resolve_model_path(o->model), load);
      const std::vector<int32_t> ids = engine->require_tokenizer().encode(text, /*parse_special=*/false);
      lumen::cli::ProgressBar bar("kl-divergence-base");
      const auto info = lumen::runtime::save_kl_base(*engine, ids, o->ctx, o->chunks, o->kl_base, [&](int done, int total) {
        bar.update(uint64_t(done), uint64_t(total), fmt::format("{}/{} chunks", done, total));
      });
      if (o->json)
        std::cout << fmt::format(R"({{"base": "{}", "chunks": {}, "ctx": {}, "vocab": {}, "ppl": {:.9g}}})",
                                 lumen::printable(o->kl_base), info.n_chunk, info.n_ctx, info.n_vocab, info.ppl)
                  << std::endl;
      else
        std::cout << fmt::format("saved log-probabilities of {} chunks of {} tokens to {} (perplexity {:.4f})", info.n_chunk,
                                 info.n_ctx, o->kl_base, info.ppl)
                  << std::endl;
      return 0;
    }
    const std::string model_path = lumen::cli::resolve_model_path(o->model);
    auto engine = lumen::runtime::Engine::load(model_path, load);
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
