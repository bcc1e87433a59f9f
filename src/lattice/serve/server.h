// Server: `lattice serve` on one node. It owns the model's forward pass, the engine thread
// (EngineLoop, which owns the Generator) and the HTTP server, and answers OpenAI's API:
//
//   POST /v1/chat/completions   messages through the model's chat template; stream or not
//   POST /v1/completions        a text prompt (or token ids)
//   GET  /v1/models             the one model served
//   GET  /health                {"status": "ok", slots, active, queued, counters} (no key needed)
//   GET  /metrics               Prometheus text (metrics.h); needs the key when one is set
//
// Errors come in OpenAI's shape: 400 bad JSON or fields, 401 missing or wrong key, 404 unknown
// path, 405 wrong method, 413 body over the limit, 503 when the queue is full. A client that
// disconnects cancels its request (its slot is free at the next step).
//
// Thread safety: start() and the destructor from one thread; the rest is internal. The
// destructor stops the engine (running requests end), then the HTTP server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";  // loopback unless another address is asked for
  uint16_t port = 8080;            // 0: any free port
  uint32_t slots = 4;              // requests decoded together
  uint32_t threads = 0;            // 0: all cores
  uint32_t n_ctx = 0;              // positions per request (prompt + output); 0: the model's, at most 4096
  uint32_t max_queue = 256;        // requests waiting behind the slots; past it: 503
  bool prefix_cache = true;        // reuse a free slot's keys and values for a shared prompt prefix
  std::string api_key;             // empty: no key asked for
  std::string model_name;          // the id in /v1/models and responses
  size_t max_body_bytes = 8 << 20;
  std::chrono::seconds header_timeout{60};
  // Over ranks (serve_rank): tp, pp, ep or auto (plan's rule, parallel/plan.h auto_mode: expert
  // parallel for a mixture of experts, else tensor parallel while every rank owns a head, else
  // pipeline). Ignored on one process.
  std::string parallel = "auto";
};

class ClusterEngine;

class Server {
 public:
  // The model and tokenizer must outlive the Server. kInvalidArgument for bad options,
  // kIoError when the address cannot be bound, kResourceExhausted when the KV caches do not fit.
  static Result<std::unique_ptr<Server>> start(const engine::Model& model, const engine::Tokenizer& tokenizer,
                                               const ServeOptions& options);
  // Rank 0 of N (lockstep.h): the engine loop runs Generators over the cluster's placement
  // and hands every step to the followers. The ClusterEngine must outlive the Server.
  static Result<std::unique_ptr<Server>> start(ClusterEngine& engine, const engine::Tokenizer& tokenizer,
                                               const ServeOptions& options);
  ~Server();

  uint16_t port() const;
  const ServeOptions& options() const;

  struct Impl;

 private:
  Server() = default;
  std::unique_ptr<Impl> impl_;
};

// `lattice serve`: loads the model, starts a Server, prints "listening on http://HOST:PORT"
// to stdout once it accepts connections, and runs until SIGINT or SIGTERM. Returns the
// error that kept it from starting.
Status serve_until_signal(const std::string& model_path, ServeOptions options);

// One rank of `lattice serve --nodes N` (or under `lattice launch`): joins the cluster from the
// environment (cluster/rank_env.h); rank 0 serves as serve_until_signal() does, the others
// follow it (lockstep.h) until it stops.
Status serve_rank(const std::string& model_path, ServeOptions options);

}  // namespace lattice::serve
