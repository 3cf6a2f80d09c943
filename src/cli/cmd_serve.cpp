// lumen serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [--api-key KEY]:
// an OpenAI-compatible HTTP server with continuous batching and a chat page at /.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
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
  double shutdown_timeout = 10, request_timeout = 0;
  int64_t kv_memory_mib = -1;  // -1: half the memory available at start
  lumen::cli::ModelFlags model_flags;  // --manifest, --weights, session settings (--prefill-chunk)
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
int64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

// Waits up to `timeout` for one of `signals`; true when one came.
bool wait_signal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  timespec ts{time_t(timeout.count() / 1000), long(timeout.count() % 1000) * 1000000L};
  return sigtimedwait(&signals, nullptr, &ts) > 0;
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

  so.request_timeout_seconds = o.request_timeout;

  lumen::runtime::SchedulerOptions sched;
  // --parallel, else the manifest's decode batch, else 4.
  const auto& run = engine->run_config();
  sched.max_active = o.parallel_given || !run.decode_batch ? o.parallel : *run.decode_batch;
  sched.max_queued = o.queue;
  // A newcomer's prompt rows per step: --prefill-chunk, else 64 (small, so running streams keep flowing).
  sched.prefill_chunk = o.model_flags.run.prefill_chunk ? run.prefill_chunk : 64;
  sched.kv_config = run.kv;
  // KV memory of all slots together: --kv-memory-mib, else half of what the machine has
  // available now that the model is loaded. Requests wait for it (or get a 503) rather than
  // the process growing until the kernel kills it.
  const int64_t mib = int64_t(1) << 20;
  sched.kv_budget_bytes = o.kv_memory_mib >= 0 ? o.kv_memory_mib * mib : std::max<int64_t>(available_memory() / 2, 64 * mib);
  // The model is checked before each step: weights truncated or rewritten on disk under the
  // mapping would otherwise be a SIGBUS or garbage at the next read.
  sched.model_check = [&engine] { return engine->weights_changed_on_disk(); };
  lumen::runtime::Scheduler scheduler(engine->model(), tokenizer, sched);
  // A sequence never holds more positions than one alone can reserve in the budget.
  const int64_t within_budget = scheduler.positions_within_budget();
  if (within_budget < 2)
    throw lumen::Error("--kv-memory-mib " + std::to_string(sched.kv_budget_bytes / mib) +
                " MiB cannot hold the KV cache of even one position of this model");
  so.context_length = int(std::min<int64_t>(so.context_length, within_budget));
  lumen::server::Server server(so, spec, tokenizer, scheduler);
  const int port = server.bind();

  if (!is_loopback(o.host))
    std::cerr << "lumen: warning: listening on " << o.host << ", reachable from other machines"
              << (o.api_key.empty() ? " and without --api-key: anyone who can connect can use it" : "") << '\n';
  std::cout << "lumen: serving " << so.model_name << " on http://" << (o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host)
            << ':' << port << " (parallel " << sched.max_active << ", queue " << sched.max_queued << ", context "
            << so.context_length << ", KV memory " << sched.kv_budget_bytes / mib << " MiB)" << std::endl;

  // SIGTERM/SIGINT: stop accepting, let the answers in flight finish within --shutdown-timeout
  // (a second signal cuts it short), cancel what is left, close the connections; then
  // listen() returns and the server exits 0.
  std::atomic<bool> listening{true};
  std::thread signal_waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!listening) return;  // woken by the main thread: listen() ended on its own
    // A signal that came while the model loaded waited for this thread; stop() before the
    // server runs would be lost, so let listen() start first.
    for (int i = 0; i < 500 && listening && !server.running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::cerr << "lumen: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": not accepting new connections; "
              << server.in_flight() << " answer(s) in flight, waiting up to " << o.shutdown_timeout << " s" << std::endl;
    server.stop();
    using namespace std::chrono;
    const auto deadline = steady_clock::now() + duration_cast<steady_clock::duration>(duration<double>(o.shutdown_timeout));
    bool again = false;
    while (server.in_flight() > 0 && steady_clock::now() < deadline && !again)
      again = wait_signal(stop_signals, milliseconds(50));
    if (server.in_flight() > 0) {
      std::cerr << "lumen: cancelling " << server.in_flight() << " answer(s)" << std::endl;
      scheduler.cancel_all();
      // Cancelled sequences leave at the worker's next step; their answers then end at once.
      const auto grace = steady_clock::now() + seconds(10);
      while (server.in_flight() > 0 && steady_clock::now() < grace) wait_signal(stop_signals, milliseconds(20));
    }
    server.close_connections();
  });
  server.listen();
  listening = false;
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
  cmd->add_option("--shutdown-timeout", opts->shutdown_timeout,
                  "Seconds SIGTERM/SIGINT lets answers in flight finish before cancelling them")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->add_option("--request-timeout", opts->request_timeout,
                  "Seconds a generation request may take, queue included (0 = no limit); then its answer ends "
                  "with finish_reason 'length'")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  cmd->add_option("--kv-memory-mib", opts->kv_memory_mib,
                  "KV cache memory of all sequences together (default: half the available memory); requests "
                  "beyond it wait, or get a 503 when the queue is full")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  lumen::cli::add_model_flags(cmd, opts->model_flags, true);
  return std::pair{cmd, lumen::cli::Runner([opts, cmd] {
    opts->parallel_given = cmd->count("--parallel") > 0;
    return serve(*opts);
  })};
});

}  // namespace
