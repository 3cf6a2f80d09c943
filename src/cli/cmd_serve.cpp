// lumen serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [--api-key KEY]:
// an OpenAI-compatible HTTP server with continuous batching and a chat page at /.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include <pthread.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "server/http_server.h"

namespace {

struct ServeOptions {
  std::string model, host = "127.0.0.1", api_key, name;
  int port = 8080, parallel = 4, queue = 32, ctx = 4096, http_threads = 0;
  bool parallel_given = false;
  size_t max_body = 1 << 20;
  lumen::cli::ModelFlags model_flags;  // --manifest, --weights, session settings (--prefill-chunk)
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int serve(const ServeOptions& o) {
  namespace fs = std::filesystem;
  // SIGPIPE would kill the server when a client disconnects mid-write; a failed write is
  // handled where it happens. SIGINT/SIGTERM are taken by one thread (below) that stops the
  // server cleanly, so every thread started from here on blocks them.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::string model_path = lumen::cli::model_path_of(o.model, o.model_flags);
  auto engine = lumen::cli::load_engine(o.model, o.model_flags, {}, true);
  const auto& tokenizer = engine->require_tokenizer();

  const auto& spec = engine->spec();
  lumen::server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  so.model_name = o.name;
  if (so.model_name.empty()) {  // the directory or file name, without a trailing slash or extension
    fs::path p = fs::path(model_path).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    so.model_name = fs::is_directory(p) ? p.filename().string() : p.stem().string();
  }
  so.context_length = spec.max_positions > 0 ? std::min(o.ctx, spec.max_positions) : o.ctx;
  so.max_body_bytes = o.max_body;
  so.sampling_defaults = lumen::runtime::default_sampling(model_path);
  // Each streaming client holds a connection thread; leave room for the queue and for
  // /health and /metrics next to them.
  so.http_threads = o.http_threads > 0 ? o.http_threads : o.parallel + o.queue + 8;

  lumen::runtime::SchedulerOptions sched;
  // --parallel, else the manifest's decode batch, else 4.
  const auto& run = engine->run_config();
  sched.max_active = o.parallel_given || !run.decode_batch ? o.parallel : *run.decode_batch;
  sched.max_queued = o.queue;
  // A newcomer's prompt rows per step: --prefill-chunk, else 64 (small, so running streams keep flowing).
  sched.prefill_chunk = o.model_flags.run.prefill_chunk ? run.prefill_chunk : 64;
  sched.kv_config = run.kv;
  lumen::runtime::Scheduler scheduler(engine->model(), tokenizer, sched);
  lumen::server::Server server(so, spec, tokenizer, scheduler);
  const int port = server.bind();

  if (!is_loopback(o.host))
    std::cerr << "lumen: warning: listening on " << o.host << ", reachable from other machines"
              << (o.api_key.empty() ? " and without --api-key: anyone who can connect can use it" : "") << '\n';
  std::cout << "lumen: serving " << so.model_name << " on http://" << (o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host)
            << ':' << port << " (parallel " << sched.max_active << ", queue " << sched.max_queued << ", context "
            << so.context_length << ")" << std::endl;

  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop();
  });
  server.listen();
  // listen() also returns when stop() came from elsewhere: wake the waiter so it can end.
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  std::cout << "lumen: server stopped" << std::endl;
  return 0;
}

LUMEN_COMMAND(40, [](CLI::App& app) {
  auto opts = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching and a chat page");
  cmd->add_option("-m,--model", opts->model, "Model directory or .gguf file (default: the installed Gemma 3 270M)");
  cmd->add_option("--host", opts->host, "Address to listen on (loopback unless told otherwise)")->capture_default_str();
  cmd->add_option("--port", opts->port, "Port (0 = any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--parallel", opts->parallel, "Sequences decoded together")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--queue", opts->queue, "Requests that may wait for a slot; more get a 429")
      ->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_option("--api-key", opts->api_key, "Require 'Authorization: Bearer KEY' on /v1/* and /metrics")
      ->envname("LUMEN_API_KEY");
  cmd->add_option("--ctx-size", opts->ctx, "Positions per sequence (prompt + completion)")
      ->check(CLI::Range(2, 1 << 20))->capture_default_str();
  cmd->add_option("--max-body-bytes", opts->max_body, "Largest request body accepted")
      ->check(CLI::Range(size_t(1024), size_t(1) << 30))->capture_default_str();
  cmd->add_option("--http-threads", opts->http_threads, "Connections served at once (default: parallel + queue + 8)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--name", opts->name, "Model id reported by /v1/models (default: the directory name)");
  lumen::cli::add_model_flags(cmd, opts->model_flags, true);
  return std::pair{cmd, lumen::cli::Runner([opts, cmd] {
    opts->parallel_given = cmd->count("--parallel") > 0;
    return serve(*opts);
  })};
});

}  // namespace
