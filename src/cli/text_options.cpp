#include "cli/text_options.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <random>

#include <fmt/format.h>
#include <unistd.h>

#include "base/error.h"

namespace lumen::cli {

namespace {

float parse_float(const std::string& flag, const std::string& text) {
  size_t used = 0;
  float v = 0;
  try {
    v = std::stof(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) throw Error(flag + ": " + in_quotes(text) + " is not a number");
  return v;
}

long long parse_integer(const std::string& flag, const std::string& text, long long lo, long long hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) throw Error(flag + ": " + in_quotes(text) + " is not an integer");
  if (v < lo || v > hi) throw Error(flag + ": " + text + " is out of range (" + std::to_string(lo) + " .. " + std::to_string(hi) + ")");
  return v;
}

}  // namespace

void add_sampling_flags(CLI::App* cmd, SamplingFlags& f) {
  cmd->add_option("--temp", f.temperature, "Temperature (0 = greedy); default: the model's");
  cmd->add_option("--top-k", f.top_k, "Keep the k most likely tokens (0 = off)");
  cmd->add_option("--top-p", f.top_p, "Keep the smallest set of tokens whose probability reaches p (1 = off)");
  cmd->add_option("--min-p", f.min_p, "Drop tokens less likely than min-p times the best (0 = off)");
  cmd->add_option("--seed", f.seed, "Random seed (default: random)");
  cmd->add_option("--repeat-penalty", f.repeat_penalty, "Repetition penalty over generated tokens (1 = off)");
  cmd->add_option("--presence-penalty", f.presence_penalty, "Presence penalty (-2 .. 2)");
  cmd->add_option("--frequency-penalty", f.frequency_penalty, "Frequency penalty (-2 .. 2)");
}

runtime::SamplingParams sampling_from_flags(const SamplingFlags& f, const std::string& model_path) {
  runtime::SamplingParams p = runtime::default_sampling(model_path);
  if (f.temperature) p.temperature = parse_float("--temp", *f.temperature);
  if (f.top_k) p.top_k = int(parse_integer("--top-k", *f.top_k, 0, INT32_MAX));
  if (f.top_p) p.top_p = parse_float("--top-p", *f.top_p);
  if (f.min_p) p.min_p = parse_float("--min-p", *f.min_p);
  if (f.repeat_penalty) p.repetition_penalty = parse_float("--repeat-penalty", *f.repeat_penalty);
  if (f.presence_penalty) p.presence_penalty = parse_float("--presence-penalty", *f.presence_penalty);
  if (f.frequency_penalty) p.frequency_penalty = parse_float("--frequency-penalty", *f.frequency_penalty);
  if (f.seed) p.seed = uint64_t(parse_integer("--seed", *f.seed, 0, INT64_MAX));
  else p.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  // No flag sets a logit bias, so the vocabulary size does not matter here.
  runtime::validate(p, INT32_MAX);
  return p;
}

std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      const char c = text[i + 1];
      if (c == 'n' || c == 't' || c == '\\') {
        out += c == 'n' ? '\n' : c == 't' ? '\t' : '\\';
        ++i;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

std::vector<int32_t> completion_stop_tokens(const runtime::Engine& engine) {
  std::vector<int32_t> stops;
  const auto& tok = engine.require_tokenizer();
  if (tok.eos_id() >= 0) stops.push_back(tok.eos_id());
  for (int id : engine.spec().tokens.stop)
    if (id >= 0 && id < engine.spec().vocab_size && std::find(stops.begin(), stops.end(), id) == stops.end())
      stops.push_back(id);
  return stops;
}

std::vector<int32_t> chat_prompt(const runtime::Engine& engine, tokenizer::ChatFormat format,
                                 const std::vector<tokenizer::ChatMessage>& messages, bool thinking) {
  tokenizer::ChatOptions options;
  options.add_generation_prompt = true;
  options.thinking = thinking;
  return engine.require_tokenizer().encode(tokenizer::render_chat(format, messages, options), true);
}

std::string strip_thoughts(const std::string& answer) {
  static const std::string open = "<|channel>", close = "<channel|>";
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t a = answer.find(open, at);
    if (a == std::string::npos) break;
    out.append(answer, at, a - at);
    const size_t b = answer.find(close, a);
    if (b == std::string::npos) return out;  // an unfinished thought carries nothing
    at = b + close.size();
  }
  out.append(answer, at, std::string::npos);
  return out;
}

std::atomic<bool> InterruptGuard::cancel{false};
std::atomic<bool> InterruptGuard::generating{false};

namespace {
struct sigaction previous_action;

extern "C" void on_sigint(int) {
  if (InterruptGuard::generating.load()) {
    InterruptGuard::cancel.store(true);
    return;
  }
  const char nl = '\n';
  [[maybe_unused]] auto n = ::write(STDOUT_FILENO, &nl, 1);
  ::_exit(130);
}
}  // namespace

InterruptGuard::InterruptGuard() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &previous_action);
}

InterruptGuard::~InterruptGuard() { sigaction(SIGINT, &previous_action, nullptr); }

std::string stats_line(const runtime::GenerationResult& r) {
  const size_t n = r.tokens.size();
  const double rate = r.decode_seconds > 0 ? double(r.decode_steps) / r.decode_seconds : 0.0;
  return fmt::format("{} tokens in {:.2f} s ({:.1f} tokens/s); prompt {} tokens ({} reused) in {:.2f} s; {}", n,
                     r.decode_seconds, rate, r.prompt_tokens, r.reused_tokens, r.prefill_seconds,
                     runtime::finish_reason_name(r.finish));
}

}  // namespace lumen::cli
