// lumen run -m MODEL -p "prompt" [sampling flags]: streams the model's answer to stdout.
// lumen run -m MODEL --tokens 2,105,9 -n 32: the greedy continuation of token ids, as a JSON
// array (what the parity tests compare).
#include <algorithm>
#include <fstream>
#include <iterator>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "cli/text_options.h"
#include "runtime/engine.h"
#include <nlohmann/json.hpp>

#include "runtime/json_schema.h"
#include "runtime/session.h"
#include "runtime/token_mask.h"
#include "tokenizer/chat_format.h"

namespace {

struct RunOptions {
  bool allow_unverified = false;
  std::string model, tokens;
  std::optional<std::string> prompt, system;
  std::optional<int> n;
  std::vector<std::string> stops;
  std::string json_schema_file, grammar_file;
  bool raw = false, think = false, verbose = false;
  lumen::cli::SamplingFlags sampling;
  lumen::cli::ModelFlags model_flags;  // --manifest, --weights, session settings

  lumen::cli::ModelFlags load_flags() const {
    lumen::cli::ModelFlags f = model_flags;
    f.allow_unverified = f.allow_unverified || allow_unverified;
    f.verbose_fields = f.verbose_fields || verbose;
    return f;
  }
};

int run_tokens(const RunOptions& o) {
  const auto tokens = lumen::cli::parse_token_list(o.tokens);
  auto engine = lumen::cli::load_engine(o.model, o.load_flags());
  const auto ids = engine->generate_greedy(tokens, o.n.value_or(32));
  std::cout << lumen::cli::ids_to_json(ids) << std::endl;
  return 0;
}

int run_prompt(const RunOptions& o) {
  using namespace lumen;
  if (o.prompt->empty()) throw Error("-p: the prompt is empty");
  if (o.raw && o.system) throw Error("--system: a system message needs the chat template (drop --raw)");
  const std::string model_path = cli::model_path_of(o.model, o.model_flags);
  // Flags first: a typo costs no model load.
  runtime::GenerationRequest req;
  req.sampling = cli::sampling_from_flags(o.sampling, model_path);
  auto engine = cli::load_engine(o.model, o.load_flags(), {}, true);
  const auto& tok = engine->require_tokenizer();
  const bool add_bos = engine->run_config().add_bos.value_or(true);
  req.max_tokens = o.n.value_or(256);
  for (const auto& stop : o.stops) req.stop_strings.push_back(cli::unescape(stop));
  if (o.raw) {
    const auto ids = tok.encode(*o.prompt, true);
    if (add_bos && tok.bos_id() >= 0 && (ids.empty() || ids[0] != tok.bos_id())) req.prompt.push_back(tok.bos_id());
    req.prompt.insert(req.prompt.end(), ids.begin(), ids.end());
    req.stop_tokens = cli::completion_stop_tokens(*engine);
  } else {
    const auto format = tokenizer::detect_chat_format(engine->spec(), tok);
    std::vector<tokenizer::ChatMessage> messages;
    if (o.system) messages.push_back({"system", *o.system});
    messages.push_back({"user", *o.prompt});
    req.prompt = cli::chat_prompt(*engine, format, messages, o.think);
    req.stop_tokens = tokenizer::chat_stop_tokens(format, engine->spec(), tok);
    // Thinking output is framed by special tokens; show the frame.
    req.skip_special = !o.think;
  }
  for (int32_t id : engine->run_config().stop_tokens)
    if (std::find(req.stop_tokens.begin(), req.stop_tokens.end(), id) == req.stop_tokens.end()) req.stop_tokens.push_back(id);

  if (!o.json_schema_file.empty() || !o.grammar_file.empty()) {
    // The answer is held to the grammar; a file that cannot be compiled is one error line.
    const bool schema = !o.json_schema_file.empty();
    const std::string path = schema ? o.json_schema_file : o.grammar_file;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    runtime::GrammarSource source;
    try {
      if (schema) {
        const auto doc = nlohmann::ordered_json::parse(text, nullptr, false);
        if (doc.is_discarded()) throw Error("not valid JSON");
        source = runtime::json_schema_grammar(doc);
      } else {
        source = runtime::parse_gbnf(text);
      }
      req.grammar = std::make_shared<runtime::CompiledGrammar>(runtime::lower(source),
                                                               std::make_shared<runtime::TokenTrie>(tok));
    } catch (const Error& e) {
      throw Error(path + ": " + e.what());
    }
  }

  runtime::Session session(*engine);
  cli::InterruptGuard interrupt;
  cli::InterruptGuard::generating = true;
  const auto result = session.generate(
      req,
      [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      },
      &cli::InterruptGuard::cancel);
  cli::InterruptGuard::generating = false;
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (o.verbose) fmt::print(stderr, "lumen: {}\n", cli::stats_line(result));
  if (result.finish == runtime::FinishReason::DeadEnd)
    fmt::print(stderr, "lumen: the grammar allows no token of the vocabulary here: the answer ends (grammar_dead_end)\n");
  return result.finish == runtime::FinishReason::Cancelled ? 130 : 0;
}

LUMEN_COMMAND(10, [](CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt (or greedy ids from --tokens)");
  cmd->add_option("-m,--model", o->model, "Model directory, .gguf or packed file (default: the installed Gemma 3 270M)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (chat template applied unless --raw)");
  cmd->add_option("--tokens", o->tokens, "Comma-separated prompt token ids: print the greedy ids");
  cmd->add_option("-n,--n-predict", o->n, "Tokens to generate (default: 256 with -p, 32 with --tokens)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--system", o->system, "System message");
  cmd->add_flag("--raw", o->raw, "Plain completion: no chat template");
  cmd->add_option("--stop", o->stops, "Stop when this text appears (repeatable; \\n and \\t understood); it is not printed");
  cmd->add_flag("--think", o->think, "Let the model think first (Gemma 4 thinking mode)");
  cmd->add_option("--json-schema", o->json_schema_file, "Answer with JSON that validates against this JSON Schema file");
  cmd->add_option("--grammar", o->grammar_file, "Answer in the language of this GBNF grammar file (llama.cpp syntax)")
      ->excludes("--json-schema");
  cmd->add_flag("-v,--verbose", o->verbose, "Print speed figures to stderr");
  cmd->add_flag("--allow-unverified", o->allow_unverified,
                "Run a model whose manifest marks it unsupported (known not to run correctly)");
  lumen::cli::add_sampling_flags(cmd, o->sampling);
  lumen::cli::add_model_flags(cmd, o->model_flags, false);
  return std::pair{cmd, lumen::cli::Runner([o, cmd] {
    if (o->prompt && cmd->count("--tokens") > 0) throw lumen::Error("-p and --tokens: give one or the other");
    if (o->prompt) return run_prompt(*o);
    if (o->tokens.empty()) throw lumen::Error("run: give a prompt (-p TEXT) or token ids (--tokens 2,105,9)");
    // --tokens is the exact greedy reference of the parity tests: text options make no sense.
    for (const char* flag : {"--system", "--raw", "--stop", "--think", "--json-schema", "--grammar", "--temp", "--top-k", "--top-p", "--min-p",
                             "--seed", "--repeat-penalty", "--presence-penalty", "--frequency-penalty"})
      if (cmd->count(flag) > 0) throw lumen::Error(std::string(flag) + ": only with -p (--tokens decodes greedily)");
    return run_tokens(*o);
  })};
});

}  // namespace
