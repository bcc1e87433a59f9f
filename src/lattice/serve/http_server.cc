#include "lattice/serve/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <deque>

#include "lattice/core/log.h"

namespace lattice::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  // Declared before io: sessions destroyed with the io_context still count themselves out.
  HttpOptions opt;
  HttpHandler handler;
  std::atomic<size_t> n_connections{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  void accept();
};

namespace {

// Bytes a request may leave in the read buffer (pipelined requests) while it is answered.
constexpr size_t kMaxPipelinedBytes = 64 << 10;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {
    server_->n_connections.fetch_add(1);
  }
  ~Session() { server_->n_connections.fetch_sub(1); }

  void read_header() {
    state_ = State::kReading;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->opt.max_header_bytes));
    parser_->body_limit(server_->opt.max_body_bytes);
    stream_.expires_after(server_->opt.header_timeout);
    http::async_read_header(stream_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  // ---- the answer, on the server's thread (Responder posts here) ----
  void reply(HttpReply r) {
    if (state_ != State::kHandling) return;
    state_ = State::kReplying;
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), 11);
    res->set(http::field::server, "lattice");
    res->set(http::field::content_type, r.content_type);
    if (!r.retry_after.empty()) res->set(http::field::retry_after, r.retry_after);
    res->keep_alive(keep_alive_);
    res->body() = std::move(r.body);
    res->prepare_payload();
    stream_.expires_after(server_->opt.write_timeout);
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->peer_gone();
      self->answer_done();
    });
  }

  void stream_begin(int status, std::string content_type, std::string first) {
    if (state_ != State::kHandling) return;
    state_ = State::kStreaming;
    pending_.insert(0, first);
    stream_res_.emplace(static_cast<http::status>(status), 11);
    stream_res_->set(http::field::server, "lattice");
    stream_res_->set(http::field::content_type, content_type);
    stream_res_->set(http::field::cache_control, "no-cache");
    stream_res_->keep_alive(keep_alive_);
    stream_res_->chunked(true);
    serializer_.emplace(*stream_res_);
    pump();
  }

  // Before stream_begin (the engine may produce a piece before the handler's begin is
  // carried out) data is held; it goes out after the header.
  void stream_write(std::string data) {
    if ((state_ != State::kStreaming && state_ != State::kHandling) || stream_ended_) return;
    pending_ += data;
    pump();
  }

  void stream_end() {
    if (state_ != State::kStreaming && state_ != State::kHandling) return;
    stream_ended_ = true;
    pump();
  }

  void on_abort(std::function<void()> fn) {
    if (state_ == State::kClosed) {
      if (fn) fn();
      return;
    }
    on_abort_ = std::move(fn);
  }

  asio::any_io_executor executor() { return stream_.get_executor(); }

 private:
  enum class State { kReading, kHandling, kReplying, kStreaming, kClosed };

  void on_header(beast::error_code ec) {
    if (ec == http::error::header_limit) return fail(431, "the request's headers are too large");
    if (ec == http::error::body_limit) return fail(413, "the request body exceeds " + std::to_string(server_->opt.max_body_bytes) + " bytes");
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof)
      return close();
    if (ec) return fail(400, "malformed HTTP request: " + ec.message());
    auto& req = parser_->get();
    head_.method = std::string(req.method_string());
    std::string_view target = req.target();
    head_.target = std::string(target.substr(0, target.find('?')));
    head_.authorization = std::string(req[http::field::authorization]);
    head_.body.clear();
    keep_alive_ = req.keep_alive();
    if (server_->handler.screen) {
      if (auto refused = server_->handler.screen(head_)) {
        // The body was not read: the connection cannot carry another request.
        if (!parser_->is_done()) keep_alive_ = false;
        state_ = State::kHandling;
        return reply(std::move(*refused));
      }
    }
    if (parser_->is_done()) return dispatch();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      stream_.expires_after(server_->opt.write_timeout);
      asio::async_write(stream_, asio::buffer(kContinue), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(server_->opt.body_timeout);
    http::async_read(stream_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == http::error::body_limit)
        return self->fail(413, "the request body exceeds " + std::to_string(self->server_->opt.max_body_bytes) + " bytes");
      if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset)
        return self->close();
      if (ec) return self->fail(400, "malformed HTTP request body: " + ec.message());
      self->dispatch();
    });
  }

  void dispatch();

  // An error met while reading: answered, then the connection is closed (what follows on it
  // cannot be trusted to be a request boundary).
  void fail(int status, const std::string& message) {
    keep_alive_ = false;
    state_ = State::kHandling;
    HttpReply r;
    if (server_->handler.error) r = server_->handler.error(status, message);
    else r = {status, "text/plain", message};
    r.status = status;
    reply(std::move(r));
  }

  // While a request is answered: a read posted on the socket notices the client leaving.
  void watch() {
    if (watching_ || state_ == State::kClosed || buf_.size() >= kMaxPipelinedBytes) return;
    watching_ = true;
    stream_.socket().async_read_some(buf_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      if (!ec) self->buf_.commit(n);
      if (self->state_ == State::kReading) return self->read_header();  // the answer ended: next request
      if (self->state_ == State::kClosed) return;
      if (ec == asio::error::operation_aborted) return;
      if (ec) return self->peer_gone();
      self->watch();
    });
  }

  void pump() {
    if (writing_ || state_ != State::kStreaming) return;
    auto self = shared_from_this();
    stream_.expires_after(server_->opt.write_timeout);
    if (!header_sent_) {
      writing_ = true;
      http::async_write_header(stream_, *serializer_, [self](beast::error_code ec, size_t) {
        self->writing_ = false;
        if (ec) return self->peer_gone();
        self->header_sent_ = true;
        self->pump();
      });
      return;
    }
    if (!pending_.empty()) {
      writing_ = true;
      out_.swap(pending_);
      pending_.clear();
      asio::async_write(stream_, http::make_chunk(asio::buffer(out_)), [self](beast::error_code ec, size_t) {
        self->writing_ = false;
        self->out_.clear();
        if (ec) return self->peer_gone();
        self->pump();
      });
      return;
    }
    if (stream_ended_) {
      writing_ = true;
      asio::async_write(stream_, http::make_chunk_last(), [self](beast::error_code ec, size_t) {
        self->writing_ = false;
        if (ec) return self->peer_gone();
        self->answer_done();
      });
    }
  }

  void answer_done() {
    on_abort_ = nullptr;
    stream_res_.reset();
    serializer_.reset();
    pending_.clear();
    header_sent_ = stream_ended_ = false;
    if (!keep_alive_) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      return close();
    }
    state_ = State::kReading;
    if (watching_) {
      // The watch read completes (aborted, or with the next request's first bytes) and then
      // starts reading the next request.
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      return;
    }
    read_header();
  }

  void peer_gone() {
    if (state_ == State::kClosed) return;
    auto fn = std::move(on_abort_);
    on_abort_ = nullptr;
    close();
    if (fn) fn();
  }

  void close() {
    state_ = State::kClosed;
    beast::error_code ignored;
    stream_.socket().close(ignored);
  }

  HttpServer::Impl* server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest head_;
  State state_ = State::kReading;
  bool keep_alive_ = true;
  bool watching_ = false;
  std::function<void()> on_abort_;
  // A streamed answer.
  std::optional<http::response<http::empty_body>> stream_res_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::string pending_, out_;
  bool writing_ = false, header_sent_ = false, stream_ended_ = false;
};

// Posts every call to the session's thread; holds the session until the answer is given.
class SessionResponder final : public Responder {
 public:
  explicit SessionResponder(std::shared_ptr<Session> s) : s_(std::move(s)), ex_(s_->executor()) {}
  ~SessionResponder() override {
    if (!answered_.exchange(true))
      asio::post(ex_, [s = s_] { s->reply({500, "application/json", R"({"error":{"message":"no answer","type":"server_error","param":null,"code":null}})"}); });
  }
  void reply(HttpReply r) override {
    answered_ = true;
    asio::post(ex_, [s = s_, r = std::move(r)]() mutable { s->reply(std::move(r)); });
  }
  void stream_begin(int status, std::string ct, std::string first) override {
    answered_ = true;
    asio::post(ex_, [s = s_, status, ct = std::move(ct), first = std::move(first)]() mutable {
      s->stream_begin(status, std::move(ct), std::move(first));
    });
  }
  void stream_write(std::string data) override {
    asio::post(ex_, [s = s_, d = std::move(data)]() mutable { s->stream_write(std::move(d)); });
  }
  void stream_end() override {
    asio::post(ex_, [s = s_] { s->stream_end(); });
  }
  void on_abort(std::function<void()> fn) override {
    asio::post(ex_, [s = s_, fn = std::move(fn)]() mutable { s->on_abort(std::move(fn)); });
  }

 private:
  std::shared_ptr<Session> s_;
  asio::any_io_executor ex_;
  std::atomic<bool> answered_{false};
};

void Session::dispatch() {
  state_ = State::kHandling;
  HttpRequest req = head_;
  req.body = parser_->release().body();
  parser_.reset();
  stream_.expires_never();  // each write sets its own deadline; the watch read has none (it is the disconnect probe)
  watch();
  if (server_->handler.handle) server_->handler.handle(std::move(req), std::make_shared<SessionResponder>(shared_from_this()));
  else reply({404, "text/plain", "no handler"});
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(io, [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // closed
    if (ec) {
      // Out of descriptors, say: try again shortly rather than spin.
      LATTICE_LOG_WARN("serve: accept failed: {}", ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    if (n_connections.load() >= opt.max_connections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE pieces are small and latency matters
      std::make_shared<Session>(this, std::move(socket))->read_header();
    }
    accept();
  });
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpOptions& options, HttpHandler handler) {
  beast::error_code ec;
  const auto addr = asio::ip::make_address(options.host, ec);
  if (ec) return InvalidArgument("serve: '" + options.host + "' is not an IP address");
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->impl_ = std::make_unique<Impl>();
  Impl& impl = *s->impl_;
  impl.opt = options;
  impl.handler = std::move(handler);
  const tcp::endpoint ep(addr, options.port);
  impl.acceptor.open(ep.protocol(), ec);
  if (!ec) impl.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(ep, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("serve: cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " + ec.message());
  s->port_ = impl.acceptor.local_endpoint().port();
  impl.accept();
  s->thread_ = std::thread([&impl] { impl.io.run(); });
  return s;
}

HttpServer::~HttpServer() {
  if (!impl_) return;
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    impl->accept_retry.cancel();
    impl->io.stop();
  });
  if (thread_.joinable()) thread_.join();
  // Sessions still parked in handlers are destroyed with the io_context, while Impl lives.
  impl_.reset();
}

size_t HttpServer::n_connections() const { return impl_ ? impl_->n_connections.load() : 0; }

}  // namespace lattice::serve
