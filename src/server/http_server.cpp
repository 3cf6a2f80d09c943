#include "server/http_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <httplib.h>

#include "base/error.h"
#include "runtime/json_schema.h"
#include "runtime/scheduler.h"
#include "runtime/tool_grammar.h"
#include "server/chat_page.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "spec/model_spec.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace lumen::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A stream with nothing to say (queued, long prefill) still writes an SSE comment this often,
// so a client that went away is noticed and its sequence freed.
constexpr auto kKeepAliveInterval = std::chrono::milliseconds(1000);

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) { reply_json(res, e.status, error_body(e)); }

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Compares without an early exit so the key cannot be guessed byte by byte from timings.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(1, b.size())]);
  return diff == 0;
}

const char* finish_name(runtime::FinishReason reason) {
  if (reason == runtime::FinishReason::Length) return "length";
  if (reason == runtime::FinishReason::DeadEnd) return "grammar_dead_end";
  return "stop";
}

// "127.0.0.1" / "::1" and the port, formatted as httplib formats a Request's addresses.
bool socket_address(int fd, bool peer, std::string& host, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if ((peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
            : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len)) != 0)
    return false;
  char name[NI_MAXHOST];
  char service[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, name, sizeof name, service, sizeof service,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = name;
  port = std::atoi(service);
  return true;
}

// The socket of the connection a request came on. httplib 0.11 gives a handler no socket,
// but a TCP connection is named by its two ends, and httplib records both in the Request;
// while the handler runs, the connection is open and its descriptor is one of ours. -1 when
// it cannot be found (then a disconnect is noticed only when writing).
int connection_socket(const httplib::Request& req) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    std::string host;
    int port = -1;
    if (!socket_address(int(fd), true, host, port) || port != req.remote_port || host != req.remote_addr) continue;
    if (!socket_address(int(fd), false, host, port) || port != req.local_port || host != req.local_addr) continue;
    found = int(fd);
    break;
  }
  ::closedir(dir);
  return found;
}

// True once the client has closed (or reset) its side of the connection. Pipelined bytes of
// a next request are not a close.
bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char byte;
    return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

// httplib's server with its listening socket within reach. Shutting that socket down ends
// accept() and so listen()'s loop, while connections keep being served; httplib's own stop()
// would also end every stream at once (its chunked writer stops when the server stops).
class HttpServer : public httplib::Server {
 public:
  void stop_accepting() {
    const auto sock = svr_sock_.load();
    if (sock != INVALID_SOCKET) ::shutdown(sock, SHUT_RDWR);
  }
};

}  // namespace

struct Server::Impl {
  ServerOptions options;
  const spec::ModelSpec& spec;
  const tokenizer::Tokenizer& tokenizer;
  runtime::Scheduler& scheduler;
  tokenizer::ChatFormat chat_format;
  std::vector<int32_t> chat_stop_tokens;
  std::vector<int32_t> text_stop_tokens;
  runtime::SamplingParams defaults;
  Metrics metrics;
  HttpServer http;
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};
  std::mutex rng_mutex;
  std::mt19937_64 rng{std::random_device{}()};
  // Constrained decoding: the vocabulary trie (built on first use) and recently compiled
  // grammars by their source, so a schema sent again costs nothing.
  std::mutex grammar_mutex;
  std::shared_ptr<const runtime::TokenTrie> trie;
  std::map<std::string, std::shared_ptr<runtime::CompiledGrammar>> grammars;
  std::deque<std::string> grammar_order;

  Impl(ServerOptions o, const spec::ModelSpec& s, const tokenizer::Tokenizer& t, runtime::Scheduler& sch)
      : options(std::move(o)), spec(s), tokenizer(t), scheduler(sch) {
    chat_format = tokenizer::detect_chat_format(spec, tokenizer);
    chat_stop_tokens = tokenizer::chat_stop_tokens(chat_format, spec, tokenizer);
    text_stop_tokens.assign(spec.tokens.stop.begin(), spec.tokens.stop.end());
    if (tokenizer.eos_id() >= 0) text_stop_tokens.push_back(tokenizer.eos_id());
    defaults = options.sampling_defaults;
    routes();
  }

  uint64_t random() {
    std::lock_guard lock(rng_mutex);
    return rng();
  }

  std::string new_id(const char* prefix) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id = prefix;
    uint64_t a = random(), b = random();
    for (int i = 0; i < 16; ++i) id += kHex[(a >> (4 * i)) & 15];
    for (int i = 0; i < 8; ++i) id += kHex[(b >> (4 * i)) & 15];
    return id;
  }

  bool needs_key(const std::string& path) const {
    return !options.api_key.empty() && (path.rfind("/v1/", 0) == 0 || path == "/metrics");
  }

  void routes() {
    const int threads = std::max(4, options.http_threads);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_read_timeout(30, 0);
    http.set_write_timeout(30, 0);
    http.set_keep_alive_timeout(5);

    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!needs_key(req.path)) return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), options.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      reply_error(res, ApiError(401,
                                auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                             : "invalid API key",
                                "", "invalid_api_key", "authentication_error"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Whatever httplib answers by itself (404, 413, 400 on a broken request line) gets a
    // JSON error object too.
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Handled;
      std::string message, code;
      switch (res.status) {
        case 404: message = "no such endpoint: " + printable(req.method) + " " + printable(req.path); code = "not_found"; break;
        case 413: message = "request body too large"; code = "request_too_large"; break;
        default: message = "bad request"; code = "bad_request"; break;
      }
      reply_json(res, res.status, error_body(message, "invalid_request_error", "", code));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string message = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        message = printable(e.what());
      } catch (...) {
      }
      reply_json(res, 500, error_body(message, "server_error", "", "internal_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.count_request(req.path, res.status);
    });

    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = chat_page_html();
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining) return reply_json(res, 503, {{"status", "shutting_down"}, {"model", options.model_name}});
      if (const std::string problem = scheduler.unavailable(); !problem.empty())
        return reply_json(res, 503, {{"status", "unavailable"}, {"model", options.model_name}, {"reason", problem}});
      reply_json(res, 200, {{"status", "ok"}, {"model", options.model_name}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const auto& o = scheduler.options();
      res.set_content(metrics.render(scheduler.stats(), o.max_active, o.max_queued), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200, {{"object", "list"}, {"data", json::array({model_object()})}});
    });
    http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] == options.model_name) return reply_json(res, 200, model_object());
      reply_error(res, ApiError(404, "no model '" + printable(req.matches[1].str()) + "' (this server has '" +
                                         options.model_name + "')", "model", "model_not_found"));
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, true);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, false);
    });
  }

  json model_object() const {
    return {{"id", options.model_name},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "lumen"},
            {"context_length", options.context_length}};
  }

  // Request -> prompt tokens and a GenerationRequest; ApiError for anything wrong with it.
  runtime::GenerationRequest prepare(const ApiRequest& api) {
    std::vector<int32_t> prompt;
    try {
      if (api.chat) {
        tokenizer::ChatOptions chat_options;
        for (const auto& t : api.tools) chat_options.tools.push_back(nlohmann::json::parse(t.dump()));
        const std::string text = tokenizer::render_chat(chat_format, api.messages, chat_options);
        prompt = tokenizer.encode(text, /*parse_special=*/true);
      } else if (api.prompt_is_ids) {
        for (int32_t id : api.prompt_ids)
          if (id >= tokenizer.vocab_size() || id >= spec.vocab_size)
            throw ApiError(400, "'prompt' token id " + std::to_string(id) + " is outside the vocabulary (" +
                                    std::to_string(spec.vocab_size) + ")", "prompt", "invalid_value");
        prompt = api.prompt_ids;
      } else {
        prompt = tokenizer.encode(api.prompt_text, /*parse_special=*/true);
        const int32_t bos = tokenizer.bos_id();
        if (bos >= 0 && (prompt.empty() || prompt.front() != bos)) prompt.insert(prompt.begin(), bos);
      }
    } catch (const Error& e) {  // unknown role, message order the format cannot express, bad UTF-8
      throw ApiError(400, printable(e.what()), api.chat ? "messages" : "prompt", "invalid_value");
    }
    if (prompt.empty()) throw ApiError(400, "the prompt is empty", api.chat ? "messages" : "prompt", "invalid_value");
    const int n = int(prompt.size());
    if (n >= options.context_length)
      throw ApiError(400, "the prompt is " + std::to_string(n) + " tokens; this server's context holds " +
                              std::to_string(options.context_length) + " (prompt and completion together)",
                     api.chat ? "messages" : "prompt", "context_length_exceeded");
    try {
      runtime::validate(api.sampling, spec.vocab_size);
    } catch (const Error& e) {
      throw ApiError(400, printable(e.what()), "", "invalid_value");
    }

    runtime::GenerationRequest g;
    g.prompt = std::move(prompt);
    g.sampling = api.sampling;
    if (!api.seed_given) g.sampling.seed = random();
    const int room = options.context_length - n;
    g.max_tokens = std::min(api.max_tokens.value_or(room), room);
    g.stop_tokens = api.chat ? chat_stop_tokens : text_stop_tokens;
    g.stop_strings = api.stop;
    g.top_logprobs = api.top_logprobs;
    constrain(api, g);
    return g;
  }

  bool tools_on(const ApiRequest& api) const { return api.chat && !api.tools.empty() && api.tool_choice != "none"; }

  // The grammar of the request, if any (tools, response_format, GBNF); 400 naming the
  // schema path or grammar line for what cannot be compiled.
  void constrain(const ApiRequest& api, runtime::GenerationRequest& g) {
    runtime::GrammarSource source;
    std::string key, param;
    try {
      if (tools_on(api)) {
        param = "tools";
        for (int32_t id : tokenizer::tool_stop_tokens(chat_format, tokenizer)) g.stop_tokens.push_back(id);
        // The parser needs the format's special tokens in the text.
        if (chat_format == tokenizer::ChatFormat::Gemma4) g.skip_special = false;
        const bool required = api.tool_choice == "required" || api.tool_choice == "function";
        auto tg = runtime::tool_call_grammar(chat_format, api.tools, api.tool_choice_name, api.parallel_tool_calls,
                                             required, tokenizer);
        if (tg.source.rules.empty()) return;
        g.grammar_trigger = tg.trigger;
        source = std::move(tg.source);
        nlohmann::ordered_json k = {{"tools", api.tools}, {"name", api.tool_choice_name},
                                    {"parallel", api.parallel_tool_calls}, {"required", required}};
        key = "tools " + k.dump();
      } else if (api.json_schema) {
        param = "response_format";
        key = "schema " + api.json_schema->dump();
        source = runtime::json_schema_grammar(*api.json_schema);
      } else if (api.json_object) {
        param = "response_format";
        key = "json_object";
        source = runtime::json_object_grammar();
      } else if (!api.grammar.empty()) {
        param = "grammar";
        key = "gbnf " + api.grammar;
        source = runtime::parse_gbnf(api.grammar);
      } else {
        return;
      }
      g.grammar = compiled(key, source);
    } catch (const runtime::SchemaError& e) {
      throw ApiError(400, printable(e.what()), param, "invalid_schema");
    } catch (const Error& e) {
      throw ApiError(400, printable(e.what()), param, param == "grammar" ? "invalid_grammar" : "invalid_schema");
    }
  }

  std::shared_ptr<runtime::CompiledGrammar> compiled(const std::string& key, const runtime::GrammarSource& source) {
    std::lock_guard lock(grammar_mutex);
    if (auto it = grammars.find(key); it != grammars.end()) return it->second;
    if (!trie) trie = std::make_shared<runtime::TokenTrie>(tokenizer);
    auto grammar = std::make_shared<runtime::CompiledGrammar>(runtime::lower(source), trie);
    grammars[key] = grammar;
    grammar_order.push_back(key);
    if (grammar_order.size() > 64) {
      grammars.erase(grammar_order.front());
      grammar_order.pop_front();
    }
    return grammar;
  }

  // Log-probabilities as (token text, logprob) and alternatives, for the response shapes.
  void logprob_lists(const std::vector<runtime::TokenLogprob>& lps, std::vector<std::pair<std::string, float>>& tokens,
                     std::vector<std::vector<std::pair<std::string, float>>>& top) const {
    for (const auto& lp : lps) {
      tokens.push_back({tokenizer.token_bytes(lp.id), lp.logprob});
      std::vector<std::pair<std::string, float>> alts;
      for (const auto& [id, v] : lp.top) alts.push_back({tokenizer.token_bytes(id), v});
      top.push_back(std::move(alts));
    }
  }

  nlohmann::json logprobs_json(bool chat, const std::vector<runtime::TokenLogprob>& lps, size_t offset) const {
    std::vector<std::pair<std::string, float>> tokens;
    std::vector<std::vector<std::pair<std::string, float>>> top;
    logprob_lists(lps, tokens, top);
    return chat ? chat_logprobs(tokens, top) : completion_logprobs(tokens, top, offset);
  }

  nlohmann::json call_json(const tokenizer::ToolCall& call, int index, bool with_index) {
    json j = {{"id", new_id("call_")}, {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", call.arguments.dump(-1, ' ', false, json::error_handler_t::replace)}}}};
    if (with_index) j["index"] = index;
    return j;
  }

  // Refused by the scheduler: why, as an HTTP answer.
  [[noreturn]] void refuse(runtime::Scheduler::Refusal why, httplib::Response& res) {
    using R = runtime::Scheduler::Refusal;
    switch (why) {
      case R::MemoryFull:
        res.set_header("Retry-After", "1");
        throw ApiError(503, "the server's KV memory budget (" + std::to_string(scheduler.options().kv_budget_bytes >> 20) +
                                " MiB) is held by running requests and the queue is full; retry later",
                       "", "kv_memory_exhausted", "server_error");
      case R::TooLarge:
        throw ApiError(400, "the prompt and max_tokens need more KV memory than this server's whole budget (" +
                                std::to_string(scheduler.options().kv_budget_bytes >> 20) + " MiB)",
                       "max_tokens", "context_length_exceeded");
      case R::Unavailable:
        throw ApiError(503, "the model is unavailable: " + printable(scheduler.unavailable()), "", "model_unavailable",
                       "server_error");
      default:
        res.set_header("Retry-After", "1");
        throw ApiError(429, "the server is busy: " + std::to_string(scheduler.options().max_queued) +
                                " requests are already waiting; retry later",
                       "", "queue_full", "rate_limit_error");
    }
  }

  // Counts a generation request in flight while it lives.
  struct InFlight {
    std::atomic<int>& count;
    explicit InFlight(std::atomic<int>& c) : count(c) { ++count; }
    ~InFlight() { --count; }
  };

  Clock::time_point deadline_from(Clock::time_point arrival) const {
    if (options.request_timeout_seconds <= 0) return Clock::time_point::max();
    return arrival + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.request_timeout_seconds));
  }

  // A ticket that ended with an error: the model was taken away (503) or a step failed (500).
  void reply_failure(httplib::Response& res, const runtime::Ticket& ticket) {
    if (!scheduler.unavailable().empty())
      return reply_json(res, 503, error_body("the model is unavailable: " + printable(ticket.error()), "server_error", "",
                                             "model_unavailable"));
    reply_json(res, 500, error_body("generation failed: " + printable(ticket.error()), "server_error", "",
                                    "generation_failed"));
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    metrics.generation_received();
    const Clock::time_point deadline = deadline_from(Clock::now());
    ApiRequest api;
    std::vector<std::shared_ptr<runtime::Ticket>> tickets;
    int prompt_tokens = 0;
    try {
      if (draining)
        throw ApiError(503, "the server is shutting down", "", "server_shutting_down", "server_error");
      api = chat ? parse_chat_request(req.body, defaults) : parse_completion_request(req.body, defaults);
      runtime::GenerationRequest g = prepare(api);
      prompt_tokens = int(g.prompt.size());
      // n choices: one prompt (prefilled once), seeds seed, seed+1, ... so that the choices
      // differ and each is reproducible.
      std::vector<runtime::GenerationRequest> choices(size_t(api.n), g);
      for (int i = 0; i < api.n; ++i) choices[size_t(i)].sampling.seed = g.sampling.seed + uint64_t(i);
      runtime::Scheduler::Refusal refusal = runtime::Scheduler::Refusal::None;
      try {
        tickets = scheduler.submit_choices(std::move(choices), &refusal);
      } catch (const Error& e) {  // a sampling parameter the sampler refuses
        throw ApiError(400, printable(e.what()), "", "invalid_value");
      }
      if (tickets.empty()) refuse(refusal, res);
    } catch (const ApiError& e) {
      metrics.generation_finished(Metrics::Outcome::Refused);
      return reply_error(res, e);
    }

    const std::string id = new_id(chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = unix_time();
    const bool parse_tools = tools_on(api);
    if (api.stream)
      return stream(res, std::move(tickets), chat, api.include_usage, id, created, prompt_tokens, parse_tools,
                    api.top_logprobs >= 0, deadline);

    InFlight counted(in_flight);
    // Watched while waiting: a client that goes away cancels its sequences, streamed or not.
    const int socket = connection_socket(req);
    bool client_gone = false, timed_out = false;
    auto cancel_all_choices = [&] {
      for (auto& t : tickets) t->cancel();
    };
    std::vector<std::string> texts(tickets.size());
    std::vector<std::vector<runtime::TokenLogprob>> lps(tickets.size());
    for (size_t i = 0; i < tickets.size(); ++i) {
      while (!tickets[i]->wait(kPollInterval, texts[i], lps[i])) {
        if (tickets[i]->cancel_requested()) continue;
        if (socket >= 0 && peer_closed(socket)) {
          client_gone = true;
          cancel_all_choices();
        } else if (Clock::now() >= deadline) {
          timed_out = true;
          cancel_all_choices();
        }
      }
    }
    for (auto& ticket : tickets)
      if (!ticket->error().empty()) {
        cancel_all_choices();
        metrics.generation_finished(Metrics::Outcome::Failed);
        return reply_failure(res, *ticket);
      }
    const bool any_cancelled = std::any_of(tickets.begin(), tickets.end(), [](const auto& t) {
      return t->finish_reason() == runtime::FinishReason::Cancelled;
    });
    if (any_cancelled) {
      if (client_gone) {
        // Nobody reads this; nginx's 499 names the case in the request log and metrics.
        metrics.generation_finished(Metrics::Outcome::Cancelled);
        return reply_json(res, 499, error_body("the client closed the connection", "invalid_request_error", "",
                                               "client_closed_request"));
      }
      const bool all_started = std::all_of(tickets.begin(), tickets.end(), [](const auto& t) { return t->started(); });
      if (timed_out && !all_started) {
        metrics.generation_finished(Metrics::Outcome::Refused);
        res.set_header("Retry-After", "1");
        return reply_error(res, ApiError(503, "the request's time limit (" + std::to_string(options.request_timeout_seconds) +
                                                  " s) ran out while it waited for a slot; retry later",
                                         "", "timeout", "server_error"));
      }
      if (!timed_out) {  // cut by the shutdown
        metrics.generation_finished(Metrics::Outcome::Cancelled);
        return reply_error(res, ApiError(503, "the server shut down before the answer was complete", "",
                                         "server_shutting_down", "server_error"));
      }
      metrics.count_time_limited();
    }

    json choices = json::array();
    Usage usage{prompt_tokens, 0};
    for (size_t i = 0; i < tickets.size(); ++i) {
      const auto& ticket = tickets[i];
      const std::string& text = texts[i];
      usage.completion_tokens += ticket->completion_tokens();
      // A time limit ends the answer where it stands: finish_reason "length", like max_tokens.
      std::string reason = timed_out && ticket->finish_reason() == runtime::FinishReason::Cancelled
                               ? "length"
                               : finish_name(ticket->finish_reason());
      const json logprobs = api.top_logprobs >= 0 ? logprobs_json(chat, lps[i], 0) : json(nullptr);
      if (!chat) {
        choices.push_back({{"index", i}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", reason}});
        continue;
      }
      json message = {{"role", "assistant"}, {"content", text}};
      if (parse_tools) {
        tokenizer::ToolCallParser parser(chat_format);
        std::string content;
        json calls = json::array();
        auto take = [&](std::vector<tokenizer::ToolCallParser::Event> events) {
          for (auto& e : events) {
            content += e.content;
            if (e.call) calls.push_back(call_json(*e.call, int(calls.size()), false));
          }
        };
        take(parser.feed(text));
        take(parser.finish());
        message["content"] = calls.empty() || !content.empty() ? json(content) : json(nullptr);
        if (!calls.empty()) {
          message["tool_calls"] = calls;
          if (reason == "stop") reason = "tool_calls";
        }
      }
      choices.push_back(chat_choice(int(i), message, logprobs, reason));
    }
    metrics.add_usage(usage.prompt_tokens, usage.completion_tokens);
    metrics.generation_finished(Metrics::Outcome::Completed);
    json body = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                 {"model", options.model_name}, {"choices", choices}, {"usage", usage_json(usage)}};
    reply_json(res, 200, body);
  }

  struct StreamChoice {
    std::shared_ptr<runtime::Ticket> ticket;
    std::optional<tokenizer::ToolCallParser> parser;
    int calls = 0;
    bool done = false;
    size_t text_offset = 0;
  };

  struct StreamState {
    std::vector<StreamChoice> choices;
    bool chat = true, include_usage = false, started = false, over = false, logprobs = false, timed_out = false;
    std::string id;
    int64_t created = 0;
    int prompt_tokens = 0;
    Clock::time_point last_write = Clock::now();
    Clock::time_point deadline = Clock::time_point::max();
    Metrics::Outcome outcome = Metrics::Outcome::Cancelled;  // until the stream ends as it should
    std::unique_ptr<InFlight> counted;
  };

  json stream_chunk(const StreamState& st, int index, const json& delta, const json& logprobs, const std::string& reason) {
    json choice = {{"index", index}, {"logprobs", logprobs}, {"finish_reason", reason.empty() ? json(nullptr) : json(reason)}};
    if (st.chat) choice["delta"] = delta;
    else choice["text"] = delta.is_string() ? delta : json("");
    return {{"id", st.id}, {"object", st.chat ? "chat.completion.chunk" : "text_completion"}, {"created", st.created},
            {"model", options.model_name}, {"choices", json::array({choice})}};
  }

  void stream(httplib::Response& res, std::vector<std::shared_ptr<runtime::Ticket>> tickets, bool chat,
              bool include_usage, const std::string& id, int64_t created, int prompt_tokens, bool parse_tools,
              bool logprobs, Clock::time_point deadline) {
    auto st = std::make_shared<StreamState>();
    for (auto& t : tickets) {
      StreamChoice c;
      c.ticket = std::move(t);
      if (parse_tools) c.parser.emplace(chat_format);
      st->choices.push_back(std::move(c));
    }
    st->chat = chat;
    st->include_usage = include_usage;
    st->logprobs = logprobs;
    st->id = id;
    st->created = created;
    st->prompt_tokens = prompt_tokens;
    st->deadline = deadline;
    st->counted = std::make_unique<InFlight>(in_flight);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& data) {
            st->last_write = Clock::now();
            return sink.write(data.data(), data.size());
          };
          if (!st->started) {
            st->started = true;
            if (st->chat)
              for (size_t i = 0; i < st->choices.size(); ++i)
                if (!send(sse_event(stream_chunk(*st, int(i), {{"role", "assistant"}, {"content", ""}}, nullptr, ""))))
                  return false;
          }
          bool all_done = true, wrote = false;
          const auto wait = st->choices.size() > 1 ? std::chrono::milliseconds(20) : kPollInterval;
          for (size_t i = 0; i < st->choices.size(); ++i) {
            StreamChoice& c = st->choices[i];
            if (c.done) continue;
            std::string text;
            std::vector<runtime::TokenLogprob> lps;
            const bool done = c.ticket->wait(wait, text, lps);
            if (!done && !c.ticket->cancel_requested() && Clock::now() >= st->deadline) {
              st->timed_out = true;
              for (auto& other : st->choices) other.ticket->cancel();
            }
            const json lp = st->logprobs && !lps.empty() ? logprobs_json(st->chat, lps, c.text_offset) : json(nullptr);
            c.text_offset += text.size();
            std::vector<tokenizer::ToolCallParser::Event> events;
            if (c.parser) {
              events = c.parser->feed(text);
              if (done) {
                auto rest = c.parser->finish();
                events.insert(events.end(), rest.begin(), rest.end());
              }
            } else if (!text.empty()) {
              events.push_back({text, std::nullopt});
            }
            bool lp_sent = false;
            for (auto& e : events) {
              json delta;
              if (e.call) {
                delta = {{"tool_calls", json::array({call_json(*e.call, c.calls++, true)})}};
              } else if (!e.content.empty()) {
                delta = st->chat ? json{{"content", e.content}} : json(e.content);
              } else {
                continue;
              }
              // A failed write: the client went away, and the releaser cancels.
              if (!send(sse_event(stream_chunk(*st, int(i), delta, lp_sent ? json(nullptr) : lp, "")))) return false;
              lp_sent = wrote = true;
            }
            if (!lp_sent && !lp.is_null()) {  // tokens whose text is held back still report their logprobs
              if (!send(sse_event(stream_chunk(*st, int(i), st->chat ? json{{"content", ""}} : json(""), lp, ""))))
                return false;
              wrote = true;
            }
            if (!done) {
              all_done = false;
              continue;
            }
            c.done = true;
            if (!c.ticket->error().empty()) continue;
            const bool cancelled = c.ticket->finish_reason() == runtime::FinishReason::Cancelled;
            if (cancelled && !st->timed_out) continue;  // the shutdown: said once, at the end
            std::string reason = cancelled ? "length" : finish_name(c.ticket->finish_reason());
            if (c.calls > 0 && reason == "stop") reason = "tool_calls";
            if (!send(sse_event(stream_chunk(*st, int(i), st->chat ? json::object() : json(""), nullptr, reason))))
              return false;
          }
          if (!wrote && !all_done && Clock::now() - st->last_write >= kKeepAliveInterval)
            if (!send(": keep-alive\n\n")) return false;
          if (!all_done) return true;

          st->over = true;
          Usage usage{st->prompt_tokens, 0};
          std::string error;
          bool shut_down = false;
          for (auto& c : st->choices) {
            usage.completion_tokens += c.ticket->completion_tokens();
            if (!c.ticket->error().empty()) error = c.ticket->error();
            if (c.ticket->finish_reason() == runtime::FinishReason::Cancelled && !st->timed_out) shut_down = true;
          }
          if (!error.empty()) {
            st->outcome = Metrics::Outcome::Failed;
            const bool unavailable = !scheduler.unavailable().empty();
            send(sse_event(error_body((unavailable ? "the model is unavailable: " : "generation failed: ") + printable(error),
                                      "server_error", "", unavailable ? "model_unavailable" : "generation_failed")));
          } else if (shut_down) {
            send(sse_event(error_body("the server shut down before the answer was complete", "server_error", "",
                                      "server_shutting_down")));
          } else {
            metrics.add_usage(usage.prompt_tokens, usage.completion_tokens);
            if (st->timed_out) metrics.count_time_limited();
            st->outcome = Metrics::Outcome::Completed;
            if (st->include_usage &&
                !send(sse_event(usage_chunk(st->id, st->created, options.model_name, st->chat, usage))))
              return false;
          }
          send(kSseDone);
          sink.done();
          return true;
        },
        [this, st](bool) {
          // Runs when the response ends for any reason; a stream cut short frees its sequences.
          if (!st->over)
            for (auto& c : st->choices) c.ticket->cancel();
          metrics.generation_finished(st->outcome);
          st->counted.reset();
        });
  }
};

Server::Server(ServerOptions options, const spec::ModelSpec& spec, const tokenizer::Tokenizer& tokenizer,
               runtime::Scheduler& scheduler)
    : impl_(std::make_unique<Impl>(std::move(options), spec, tokenizer, scheduler)) {}

Server::~Server() = default;

int Server::bind() {
  auto& o = impl_->options;
  int port = -1;
  if (o.port == 0)
    port = impl_->http.bind_to_any_port(o.host);
  else
    port = impl_->http.bind_to_port(o.host, o.port) ? o.port : -1;
  if (port <= 0) throw Error("cannot listen on " + o.host + ":" + std::to_string(o.port) + " (address in use or not local?)");
  o.port = port;
  return port;
}

void Server::listen() { impl_->http.listen_after_bind(); }

void Server::stop() {
  impl_->draining = true;
  impl_->http.stop_accepting();
}

bool Server::running() const { return impl_->http.is_running(); }

int Server::in_flight() const { return impl_->in_flight.load(); }

void Server::close_connections() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    std::string host;
    int port = -1;
    // Connected sockets on our port are the server's connections (the listener is closed).
    if (socket_address(int(fd), false, host, port) && port == impl_->options.port &&
        socket_address(int(fd), true, host, port))
      ::shutdown(int(fd), SHUT_RDWR);
  }
  ::closedir(dir);
}

}  // namespace lumen::server
