// Fuzz harness: what `lattice serve` does with the bytes of a request. Input that starts like
// an HTTP request goes through Boost.Beast's request parser with the server's limits
// (HttpOptions' defaults), the head is taken as http_server.cc takes it (method, target
// without its query, Authorization), and a complete POST to /v1/chat/completions or
// /v1/completions goes to parse_request (openai.cc), then to generation_request against a
// small context, as server.cc does. Other input is a request body: its first byte picks the
// endpoint. Errors are answers (400, 413, 431); nothing may crash, hang or leak.
#include <boost/beast/http.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "lattice/serve/http_server.h"
#include "lattice/serve/openai.h"

namespace http = boost::beast::http;
using namespace lattice::serve;

namespace {

void complete(Endpoint endpoint, std::string_view body) {
  auto req = parse_request(endpoint, body);
  if (!req.ok()) {
    (void)error_body(400, req.status().message());
    return;
  }
  // As server.cc: the prompt rendered with the model's chat template and encoded by its
  // tokenizer (a real one: llama-quantize's test file), then the context check.
  static const lattice::engine::Tokenizer* tokenizer = [] {
    auto file = lattice::engine::GgufFile::open(LATTICE_SOURCE_DIR "/tests/data/llama-q2_k.gguf");
    if (!file.ok()) std::abort();
    auto tok = lattice::engine::tokenizer_from_gguf(**file);
    if (!tok.ok()) std::abort();
    return new lattice::engine::Tokenizer(std::move(*tok));
  }();
  (void)generation_request(*req, prompt_tokens(*tokenizer, *req), 512);
}

bool looks_like_http(std::string_view s) {
  for (std::string_view m : {"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS "})
    if (s.substr(0, m.size()) == m) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (!looks_like_http(in)) {
    if (size == 0) return 0;
    complete((data[0] & 1) ? Endpoint::kCompletion : Endpoint::kChat, in.substr(1));
    return 0;
  }
  const HttpOptions options;
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(options.max_header_bytes));
  parser.body_limit(options.max_body_bytes);
  parser.eager(true);
  boost::beast::error_code ec;
  boost::asio::const_buffer buf(data, size);
  while (buf.size() > 0 && !parser.is_done()) {
    size_t n = parser.put(buf, ec);
    if (ec == http::error::need_more) break;
    if (ec) return 0;  // 400 / 413 / 431
    if (n == 0) break;
    buf += n;
  }
  if (!parser.is_header_done()) return 0;
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
  }
  auto& req = parser.get();
  HttpRequest head;
  head.method = std::string(req.method_string());
  std::string_view target = req.target();
  head.target = std::string(target.substr(0, target.find('?')));
  head.authorization = std::string(req[http::field::authorization]);
  if (head.method != "POST") return 0;
  if (head.target == "/v1/chat/completions") complete(Endpoint::kChat, req.body());
  else if (head.target == "/v1/completions") complete(Endpoint::kCompletion, req.body());
  return 0;
}
