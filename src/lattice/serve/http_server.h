// HttpServer: HTTP/1.1 on Boost.Beast over one Asio thread. It parses requests (Beast's
// parser, with limits on header and body sizes), asks a handler to screen them before their
// body is read (so a refused request costs no upload), hands complete ones to the handler,
// and writes back either a whole response or a chunked stream (Server-Sent Events) fed from
// any thread. While a request is being answered it keeps a read posted on the socket, so a
// client that goes away is noticed at once and its handler told (on_abort).
//
// Every wait has a deadline: the headers of a request (which covers idle keep-alive
// connections and slow clients), its body, and each write. One thread holds thousands of
// idle connections (README: why Beast); connections past max_connections are closed on
// accept.
//
// Thread safety: start() and the destructor from one thread. A Responder's methods may be
// called from any thread; they are carried out on the server's thread in call order.
// handler.screen / handler.handle / on_abort run on the server's thread and must not block.
// Everything holding a Responder must drop it before the HttpServer is destroyed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "lattice/core/status.h"

namespace lattice::serve {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // the path, query string stripped
  std::string authorization;  // the Authorization header, or empty
  std::string body;           // empty when screening
};

struct HttpReply {
  HttpReply() = default;
  HttpReply(int s, std::string ct, std::string b, std::string retry = {})
      : status(s), content_type(std::move(ct)), body(std::move(b)), retry_after(std::move(retry)) {}
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string retry_after;  // a Retry-After header (seconds) when not empty: 429, 503
};

// One request's answer: reply() once, or stream_begin() + stream_write()* + stream_end().
// Calls after the answer ended, or after the client left, are ignored. A Responder dropped
// without an answer answers 500.
//
// Calls from different threads are not ordered among themselves (Asio runs what the server's
// own thread posts before what other threads posted): stream_write() and stream_end() made
// before stream_begin() is carried out are held and follow its header, and `first` (the
// opening event, say) goes before everything written.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void reply(HttpReply reply) = 0;
  virtual void stream_begin(int status, std::string content_type, std::string first = {}) = 0;
  virtual void stream_write(std::string data) = 0;
  virtual void stream_end() = 0;
  // fn runs once, on the server's thread, if the client goes away before the answer ends.
  virtual void on_abort(std::function<void()> fn) = 0;
};

struct HttpHandler {
  // The request line and headers (body empty): a reply refuses the request there (401,
  // 404, 405). Null: every request goes on.
  std::function<std::optional<HttpReply>(const HttpRequest& head)> screen;
  std::function<void(HttpRequest request, std::shared_ptr<Responder> responder)> handle;
  // The body of an error the server meets itself (400 malformed HTTP, 413, 431).
  std::function<HttpReply(int status, const std::string& message)> error;
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (see port())
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 8 << 20;
  std::chrono::seconds header_timeout{60};  // from the end of the last answer (or accept) to a request's headers
  std::chrono::seconds body_timeout{60};
  std::chrono::seconds write_timeout{60};   // each write to the client
  size_t max_connections = 16384;
};

class HttpServer {
 public:
  // Binds and listens, then starts the server's thread. kInvalidArgument for a bad host,
  // kIoError when the address cannot be bound.
  static Result<std::unique_ptr<HttpServer>> start(const HttpOptions& options, HttpHandler handler);
  // Closes the listener and every connection, then joins the thread.
  ~HttpServer();

  uint16_t port() const { return port_; }
  size_t n_connections() const;

  struct Impl;

 private:
  HttpServer() = default;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace lattice::serve
