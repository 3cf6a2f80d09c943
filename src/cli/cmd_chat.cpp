// lumen chat -m MODEL [--system TEXT]: an interactive conversation. Each turn re-renders the
// whole conversation with the chat template; the session's KV cache already holds the
// earlier turns, so only the new text is prefilled. /reset starts over, /exit (or EOF, or
// Ctrl-C at the prompt) leaves; Ctrl-C during an answer stops that answer only.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "cli/text_options.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "tokenizer/chat_format.h"

namespace {

constexpr const char* kPromptMarker = "> ";

struct ChatOptions {
  std::string model;
  std::optional<std::string> system;
  std::optional<int> n;
  std::vector<std::string> stops;
  bool think = false, verbose = false, quiet = false;
  lumen::cli::SamplingFlags sampling;
  lumen::cli::ModelFlags model_flags;  // --manifest, --weights, session settings
};

int run_chat(const ChatOptions& o) {
  using namespace lumen;
  const std::string model_path = cli::model_path_of(o.model, o.model_flags);
  runtime::GenerationRequest base;
  base.sampling = cli::sampling_from_flags(o.sampling, model_path);
  cli::ModelFlags load_flags = o.model_flags;
  load_flags.verbose_fields = load_flags.verbose_fields || o.verbose;
  auto engine = cli::load_engine(o.model, load_flags, {}, true);
  const auto& tok = engine->require_tokenizer();
  const auto format = tokenizer::detect_chat_format(engine->spec(), tok);
  base.max_tokens = o.n.value_or(1024);
  for (const auto& stop : o.stops) base.stop_strings.push_back(cli::unescape(stop));
  base.stop_tokens = tokenizer::chat_stop_tokens(format, engine->spec(), tok);
  base.skip_special = !o.think;
  for (int32_t id : engine->run_config().stop_tokens)
    if (std::find(base.stop_tokens.begin(), base.stop_tokens.end(), id) == base.stop_tokens.end()) base.stop_tokens.push_back(id);

  runtime::Session session(*engine);
  std::vector<tokenizer::ChatMessage> history;
  auto start = [&] {
    history.clear();
    if (o.system) history.push_back({"system", *o.system});
  };
  start();
  cli::InterruptGuard interrupt;
  if (!o.quiet)
    fmt::print(stderr, "lumen chat: {} ({} layers). /reset starts over, /exit leaves; Ctrl-C stops an answer.\n",
               engine->path(), engine->spec().num_layers());

  std::string line;
  uint64_t turn = 0;
  while (true) {
    std::fputs(kPromptMarker, stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) {
      std::fputc('\n', stdout);
      break;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      start();
      session.reset();
      std::fputs("(conversation reset)\n", stdout);
      continue;
    }
    if (line.empty()) continue;

    history.push_back({"user", line});
    runtime::GenerationRequest req = base;
    // A different seed per turn, derived from the chosen one: reproducible yet not repetitive.
    req.sampling.seed = base.sampling.seed + turn++;

    cli::InterruptGuard::cancel = false;
    cli::InterruptGuard::generating = true;
    runtime::GenerationResult result;
    try {
      req.prompt = cli::chat_prompt(*engine, format, history, o.think);
      result = session.generate(
          req,
          [](std::string_view text) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
          },
          &cli::InterruptGuard::cancel);
    } catch (const Error& e) {
      // A turn the model cannot take (invalid UTF-8, the context is full) is reported; the
      // conversation stays as it was before it.
      cli::InterruptGuard::generating = false;
      history.pop_back();
      std::string msg = e.what();
      for (char& c : msg)
        if (c == '\n') c = ' ';
      fmt::print(stderr, "lumen: error: {}\n", msg);
      continue;
    }
    cli::InterruptGuard::generating = false;
    if (result.finish == runtime::FinishReason::Cancelled) std::fputs(" [stopped]", stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // The answer joins the history (an interrupted one as far as it got), without thoughts.
    history.push_back({"assistant", cli::strip_thoughts(result.text)});
    if (o.verbose || !o.quiet) fmt::print(stderr, "[{}]\n", cli::stats_line(result));
  }
  return 0;
}

LUMEN_COMMAND(15, [](CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat");
  cmd->add_option("-m,--model", o->model, "Model directory, .gguf or packed file (default: the installed Gemma 3 270M)");
  cmd->add_option("--system", o->system, "System message");
  cmd->add_option("-n,--n-predict", o->n, "Most tokens per answer (default 1024)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--stop", o->stops, "Stop an answer when this text appears (repeatable)");
  cmd->add_flag("--think", o->think, "Let the model think first (Gemma 4 thinking mode)");
  cmd->add_flag("-v,--verbose", o->verbose, "Print speed figures after each answer (the default unless --quiet)");
  cmd->add_flag("-q,--quiet", o->quiet, "No banner and no speed figures");
  lumen::cli::add_sampling_flags(cmd, o->sampling);
  lumen::cli::add_model_flags(cmd, o->model_flags, true);
  return std::pair{cmd, lumen::cli::Runner([o] { return run_chat(*o); })};
});

}  // namespace
