// `lattice serve`: an OpenAI-compatible HTTP server for a GGUF model on this node
// (serve/server.h). Flags only; the server lives in lattice_serve.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "command.h"
#include "lattice/serve/server.h"

namespace lattice::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", api_key, api_key_file;
  int port = 8080, slots = 4, threads = 0, ctx = 0, queue = 256;
  int64_t max_body_mib = 8;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "lattice serve: %s\n", msg.c_str());
  return 2;
}

int serve(const ServeArgs& a) {
  if (a.model.empty()) return fail("-m is required");
  if (a.port < 0 || a.port > 65535) return fail("--port must be in 0..65535 (0: any free port)");
  if (a.slots < 1 || a.slots > 256) return fail("--slots must be in 1..256");
  if (a.threads < 0 || a.threads > 1024) return fail("-t must be in 1..1024 (0: all cores)");
  if (a.ctx < 0) return fail("--ctx must be >= 0");
  if (a.queue < 1 || a.queue > 1 << 16) return fail("--queue must be in 1..65536");
  if (a.max_body_mib < 1 || a.max_body_mib > 1024) return fail("--max-body-mib must be in 1..1024");
  if (!a.api_key.empty() && !a.api_key_file.empty()) return fail("give --api-key or --api-key-file, not both");
  serve::ServeOptions o;
  o.host = a.host;
  o.port = static_cast<uint16_t>(a.port);
  o.slots = static_cast<uint32_t>(a.slots);
  o.threads = static_cast<uint32_t>(a.threads);
  o.n_ctx = static_cast<uint32_t>(a.ctx);
  o.max_queue = static_cast<uint32_t>(a.queue);
  o.max_body_bytes = static_cast<size_t>(a.max_body_mib) << 20;
  o.api_key = a.api_key;
  if (!a.api_key_file.empty()) {
    std::ifstream f(a.api_key_file);
    if (!f) return fail("cannot read --api-key-file " + a.api_key_file);
    std::getline(f, o.api_key);
    while (!o.api_key.empty() && (o.api_key.back() == '\r' || o.api_key.back() == ' ')) o.api_key.pop_back();
    if (o.api_key.empty()) return fail("--api-key-file " + a.api_key_file + " holds no key on its first line");
  }
  if (auto st = serve::serve_until_signal(a.model, o); !st.ok()) return fail(st.to_string());
  return 0;
}

Registrar serve_cmd{{"serve", "an OpenAI-compatible HTTP server for a GGUF model on this node", [](CLI::App& app) {
                       auto a = std::make_shared<ServeArgs>();
                       app.add_option("-m,--model", a->model, "GGUF file (the first file of a split set)");
                       app.add_option("--host", a->host, "address to listen on (default loopback only)")->capture_default_str();
                       app.add_option("--port", a->port, "port (0: any free port, printed)")->capture_default_str();
                       app.add_option("--slots", a->slots, "requests decoded together")->capture_default_str();
                       app.add_option("-t,--threads", a->threads, "threads (0: all cores)")->capture_default_str();
                       app.add_option("--ctx", a->ctx, "positions per request, prompt + output (0: the model's, at most 4096)")
                           ->capture_default_str();
                       app.add_option("--queue", a->queue, "requests waiting behind the slots; past it 503")->capture_default_str();
                       app.add_option("--max-body-mib", a->max_body_mib, "largest request body (413 past it)")->capture_default_str();
                       app.add_option("--api-key", a->api_key, "require Authorization: Bearer KEY");
                       app.add_option("--api-key-file", a->api_key_file, "the key from the first line of a file");
                       return [a] { return serve(*a); };
                     }}};

}  // namespace
}  // namespace lattice::cli
