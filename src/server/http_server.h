// The HTTP front of `lumen serve`: OpenAI-compatible endpoints over a continuous-batching
// Scheduler, plus /health, /metrics (Prometheus text) and the chat page at /.
//
//   POST /v1/chat/completions   messages -> chat format -> tokens; stream via SSE
//   POST /v1/completions        prompt text or token ids
//   GET  /v1/models             the one model served
//   GET  /health                liveness (no key needed)
//   GET  /metrics               counters and gauges
//   GET  /                      the chat page (static, embedded)
//
// With an API key, /v1/* and /metrics need `Authorization: Bearer KEY`. Every bad request is
// a 4xx with an OpenAI-style error object; the server keeps serving.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/sampler.h"

namespace lumen::spec {
struct ModelSpec;
}
namespace lumen::tokenizer {
class Tokenizer;
}
namespace lumen::runtime {
class Scheduler;
}

namespace lumen::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0 = any free port (see Server::bind)
  std::string api_key;               // empty = no authentication
  std::string model_name = "lumen";  // the id /v1/models reports
  int context_length = 4096;         // positions per sequence: prompt + generated
  size_t max_body_bytes = 1 << 20;   // larger bodies get a 413
  int http_threads = 16;             // connections served at once
  // Longest a generation request may take from arrival to its last token; 0 = no limit. At
  // the limit the sequence is cancelled and the answer so far is the answer (finish_reason
  // "length"); one still waiting for a slot gets a 503.
  double request_timeout_seconds = 0;
  // Sampling for fields a request leaves out (the model's generation_config.json).
  runtime::SamplingParams sampling_defaults = runtime::default_sampling();
};

class Server {
 public:
  Server(ServerOptions options, const spec::ModelSpec& spec, const tokenizer::Tokenizer& tokenizer,
         runtime::Scheduler& scheduler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (the chosen one when options.port is 0).
  // Throws lumen::Error when the address cannot be bound.
  int bind();
  // Serves until stop() (from another thread or a signal handler thread); returns once every
  // request handler has finished.
  void listen();
  // Stops accepting connections; requests already in keep running to their answers, streams
  // included (the scheduler's cancel_all() cuts them short), and generation requests arriving
  // on connections still open get a 503. listen() returns when the last connection is done:
  // close_connections() ends the idle ones.
  void stop();
  // True while listen() accepts connections.
  bool running() const;
  // Generation requests being answered now.
  int in_flight() const;
  // Shuts down every connection still open (after stop(): idle keep-alive connections, and
  // requests a drain has given up on), so that listen() returns at once.
  void close_connections();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lumen::server
