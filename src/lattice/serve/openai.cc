#include "lattice/serve/openai.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace lattice::serve {
namespace {

using nlohmann::json;

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxMessages = 4096;

// Model output may hold bytes that are not UTF-8 (a random model, a byte token cut short):
// they are replaced, never thrown on.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

Status bad(const std::string& field, const std::string& what) { return InvalidArgument("'" + field + "' " + what); }

// A number field within [lo, hi]; absent or null leaves *out as it was.
Status read_number(const json& body, const char* field, double lo, double hi, float* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return bad(field, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad(field, "must be in [" + std::to_string(lo).substr(0, 4) + ", " + std::to_string(hi).substr(0, 4) + "]");
  *out = static_cast<float>(v);
  return Status::Ok();
}

Status read_bool(const json& body, const char* field, bool* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return bad(field, "must be true or false");
  *out = it->get<bool>();
  return Status::Ok();
}

Result<std::string> message_content(const json& content, size_t i) {
  const std::string field = "messages[" + std::to_string(i) + "].content";
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return bad(field, "must be a string or an array of text parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      return bad(field, "parts must be {\"type\": \"text\", \"text\": string} (only text is supported)");
    text += part["text"].get<std::string>();
  }
  return text;
}

Status read_messages(const json& body, CompletionRequest* r) {
  auto it = body.find("messages");
  if (it == body.end()) return bad("messages", "is required");
  if (!it->is_array() || it->empty()) return bad("messages", "must be a non-empty array");
  if (it->size() > kMaxMessages) return bad("messages", "has more than " + std::to_string(kMaxMessages) + " entries");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(field, "must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get<std::string>().empty())
      return bad(field + ".role", "must be a non-empty string");
    auto content = m.find("content");
    if (content == m.end()) return bad(field + ".content", "is required");
    auto text = message_content(*content, i);
    if (!text.ok()) return text.status();
    r->messages.push_back({role->get<std::string>(), *text});
  }
  return Status::Ok();
}

Status read_prompt(const json& body, CompletionRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end()) return bad("prompt", "is required");
  if (it->is_string()) {
    r->prompt = it->get<std::string>();
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    r->prompt = (*it)[0].get<std::string>();
  } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    for (const json& t : *it) {
      if (!t.is_number_integer()) return bad("prompt", "token ids must all be integers");
      const int64_t v = t.get<int64_t>();
      if (v < 0 || v > std::numeric_limits<int32_t>::max()) return bad("prompt", "holds a negative or huge token id");
      r->prompt_ids.push_back(static_cast<int32_t>(v));
    }
  } else {
    return bad("prompt", "must be a string, an array of one string or an array of token ids");
  }
  if (r->prompt.empty() && r->prompt_ids.empty()) return bad("prompt", "is empty");
  return Status::Ok();
}

Status read_stop(const json& body, CompletionRequest* r) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) r->stop.push_back(it->get<std::string>());
    return Status::Ok();
  }
  if (!it->is_array()) return bad("stop", "must be a string or an array of strings");
  if (it->size() > kMaxStops) return bad("stop", "has more than " + std::to_string(kMaxStops) + " strings");
  for (const json& s : *it) {
    if (!s.is_string()) return bad("stop", "must hold strings only");
    if (!s.get<std::string>().empty()) r->stop.push_back(s.get<std::string>());
  }
  return Status::Ok();
}

Status read_max_tokens(const json& body, CompletionRequest* r) {
  for (const char* field : {"max_completion_tokens", "max_tokens"}) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number_integer()) return bad(field, "must be an integer");
    const int64_t v = it->get<int64_t>();
    if (v < 1 || v > (1 << 24)) return bad(field, "must be in [1, 16777216]");
    r->max_tokens = static_cast<uint32_t>(v);
    return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace

Result<CompletionRequest> parse_request(Endpoint endpoint, std::string_view text) {
  // The lexer rejects malformed JSON and invalid UTF-8 inside strings alike.
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return InvalidArgument("the body is not valid JSON (or not valid UTF-8)");
  if (!body.is_object()) return InvalidArgument("the body must be a JSON object");
  CompletionRequest r;
  r.endpoint = endpoint;
  LATTICE_RETURN_IF_ERROR(endpoint == Endpoint::kChat ? read_messages(body, &r) : read_prompt(body, &r));
  if (auto it = body.find("model"); it != body.end() && !it->is_null() && !it->is_string())
    return bad("model", "must be a string");
  if (auto it = body.find("n"); it != body.end() && !it->is_null() && (!it->is_number_integer() || it->get<int64_t>() != 1))
    return bad("n", "must be 1 (one choice per request)");
  LATTICE_RETURN_IF_ERROR(read_max_tokens(body, &r));
  LATTICE_RETURN_IF_ERROR(read_stop(body, &r));
  LATTICE_RETURN_IF_ERROR(read_bool(body, "stream", &r.stream));
  LATTICE_RETURN_IF_ERROR(read_bool(body, "ignore_eos", &r.ignore_eos));
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return bad("stream_options", "must be an object");
    LATTICE_RETURN_IF_ERROR(read_bool(*it, "include_usage", &r.include_usage));
  }
  engine::SamplerParams& sp = r.sampler;
  LATTICE_RETURN_IF_ERROR(read_number(body, "temperature", 0, 2, &sp.temperature));
  LATTICE_RETURN_IF_ERROR(read_number(body, "top_p", 0, 1, &sp.top_p));
  if (sp.top_p <= 0) return bad("top_p", "must be greater than 0");
  LATTICE_RETURN_IF_ERROR(read_number(body, "min_p", 0, 1, &sp.min_p));
  LATTICE_RETURN_IF_ERROR(read_number(body, "frequency_penalty", -2, 2, &sp.frequency_penalty));
  LATTICE_RETURN_IF_ERROR(read_number(body, "presence_penalty", -2, 2, &sp.presence_penalty));
  if (auto it = body.find("top_k"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("top_k", "must be an integer");
    const int64_t v = it->get<int64_t>();
    sp.top_k = v < 0 ? 0 : static_cast<int32_t>(std::min<int64_t>(v, 1 << 20));
  }
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("seed", "must be an integer");
    sp.seed = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
    r.seed_set = true;
  }
  if (auto st = sp.validate(); !st.ok()) return InvalidArgument("sampling: " + st.message());
  return r;
}

std::vector<int32_t> prompt_tokens(const engine::Tokenizer& tokenizer, const CompletionRequest& request) {
  if (request.endpoint == Endpoint::kCompletion) {
    if (!request.prompt_ids.empty()) return request.prompt_ids;
    return tokenizer.encode(request.prompt);
  }
  const std::string& tmpl = tokenizer.chat_template();
  const std::string text = engine::apply_chat_template(tmpl.empty() ? "chatml" : tmpl, request.messages,
                                                       /*add_generation_prompt=*/true);
  return tokenizer.encode(text, {.add_special = true, .parse_special = true});
}

Result<engine::GenerationRequest> generation_request(const CompletionRequest& request, std::vector<int32_t> prompt,
                                                     uint32_t n_ctx) {
  if (prompt.empty()) return InvalidArgument("the prompt is empty (no tokens)");
  if (prompt.size() >= n_ctx)
    return InvalidArgument("the prompt (" + std::to_string(prompt.size()) + " tokens) does not fit the context of " +
                           std::to_string(n_ctx) + " tokens per request (--ctx)");
  const uint32_t room = n_ctx - static_cast<uint32_t>(prompt.size());
  if (request.max_tokens && *request.max_tokens > room)
    return InvalidArgument("the prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                           std::to_string(*request.max_tokens) + ") exceed the context of " + std::to_string(n_ctx) +
                           " tokens per request (--ctx)");
  engine::GenerationRequest g;
  g.prompt = std::move(prompt);
  g.n_predict = request.max_tokens ? *request.max_tokens : room;
  g.stop_at_eog = !request.ignore_eos;
  g.stop = request.stop;
  g.sampler = request.sampler;
  return g;
}

std::string_view finish_reason(std::string_view stop_reason) {
  return stop_reason == "length" ? "length" : "stop";
}

namespace {

json head(const ResponseMeta& m, bool chunk) {
  const bool chat = m.endpoint == Endpoint::kChat;
  return json{{"id", m.id},
              {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", m.created},
              {"model", m.model},
              {"system_fingerprint", "lattice"}};
}

// OpenAI's shape, with the prompt tokens the prefix cache held under prompt_tokens_details.
json usage(size_t n_prompt, size_t n_completion, size_t n_cached) {
  return json{{"prompt_tokens", n_prompt},
              {"completion_tokens", n_completion},
              {"total_tokens", n_prompt + n_completion},
              {"prompt_tokens_details", {{"cached_tokens", n_cached}}}};
}

std::string event(const json& j) { return "data: " + dump(j) + "\n\n"; }

// A chunk with one choice: a chat delta or a completion's text, and its finish reason.
std::string chunk(const ResponseMeta& m, json delta_or_text, std::string_view reason) {
  json j = head(m, true);
  json choice{{"index", 0}, {"logprobs", nullptr}};
  choice["finish_reason"] = reason.empty() ? json(nullptr) : json(reason);
  choice[m.endpoint == Endpoint::kChat ? "delta" : "text"] = std::move(delta_or_text);
  j["choices"] = json::array({std::move(choice)});
  if (m.include_usage) j["usage"] = nullptr;
  return event(j);
}

}  // namespace

std::string completion_body(const ResponseMeta& m, std::string_view text, std::string_view reason, size_t n_prompt,
                            size_t n_completion, size_t n_cached) {
  json j = head(m, false);
  json choice{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", reason}};
  if (m.endpoint == Endpoint::kChat)
    choice["message"] = json{{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage(n_prompt, n_completion, n_cached);
  return dump(j);
}

std::string sse_open(const ResponseMeta& m) {
  if (m.endpoint == Endpoint::kChat) return chunk(m, json{{"role", "assistant"}, {"content", ""}}, {});
  return {};
}

std::string sse_piece(const ResponseMeta& m, std::string_view text) {
  if (m.endpoint == Endpoint::kChat) return chunk(m, json{{"content", text}}, {});
  return chunk(m, json(text), {});
}

std::string sse_finish(const ResponseMeta& m, std::string_view reason) {
  return chunk(m, m.endpoint == Endpoint::kChat ? json::object() : json(""), reason);
}

std::string sse_usage(const ResponseMeta& m, size_t n_prompt, size_t n_completion, size_t n_cached) {
  json j = head(m, true);
  j["choices"] = json::array();
  j["usage"] = usage(n_prompt, n_completion, n_cached);
  return event(j);
}

std::string sse_error(std::string_view message) {
  return event(json{{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
}

std::string models_body(std::string_view model, int64_t created) {
  return dump(json{{"object", "list"},
                   {"data", json::array({json{{"id", model}, {"object", "model"}, {"created", created},
                                              {"owned_by", "lattice"}}})}});
}

std::string error_body(int status, std::string_view message, std::string_view code) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 429 || status == 503 ? "server_overloaded"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  json e{{"message", message}, {"type", type}, {"param", nullptr}};
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return dump(json{{"error", std::move(e)}});
}

}  // namespace lattice::serve
