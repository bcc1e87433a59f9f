// OpenAI's HTTP API as plain data: request bodies of /v1/chat/completions and
// /v1/completions parsed and validated into what the engine takes, and results written
// back as OpenAI's JSON (whole responses, Server-Sent-Event chunks, errors). No I/O and no
// threads here: every function is pure and safe to call from any thread.
//
// What is read (everything else in a body is ignored, as OpenAI's clients send extra fields):
//   chat:        messages [{role, content: string | [{type: "text", text}] | null}]
//   completions: prompt (a string, an array of one string, or an array of token ids)
//   both:        max_tokens / max_completion_tokens (>= 1), temperature [0, 2], top_p (0, 1],
//                seed (integer), stop (string or array of up to 16 strings), stream,
//                stream_options.include_usage, frequency_penalty / presence_penalty [-2, 2],
//                n (1 only), and llama-server's top_k, min_p, ignore_eos.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/chat_template.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::serve {

enum class Endpoint { kChat, kCompletion };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::vector<engine::ChatMessage> messages;  // chat
  std::string prompt;                         // completions, as text
  std::vector<int32_t> prompt_ids;            // completions, as token ids (then prompt is empty)
  std::optional<uint32_t> max_tokens;         // none: up to the context
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  engine::SamplerParams sampler;  // the engine's defaults where the body says nothing
  bool seed_set = false;
};

// kInvalidArgument with a message naming the field for malformed JSON, invalid UTF-8,
// wrong types or values out of range.
Result<CompletionRequest> parse_request(Endpoint endpoint, std::string_view body);

// The prompt's token ids: chat messages rendered with the model's chat template (ChatML
// when it has none) and encoded with its special tokens; a text prompt encoded with BOS.
std::vector<int32_t> prompt_tokens(const engine::Tokenizer& tokenizer, const CompletionRequest& request);

// The engine's request for a prompt in a context of n_ctx positions per sequence:
// kInvalidArgument when the prompt leaves no room for one token or max_tokens does not fit.
Result<engine::GenerationRequest> generation_request(const CompletionRequest& request, std::vector<int32_t> prompt,
                                                     uint32_t n_ctx);

// "stop" for an end-of-generation token or a stop string, "length" for max_tokens (or the
// context) reached.
std::string_view finish_reason(std::string_view stop_reason);

// What every response and chunk of one request repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool include_usage = false;  // stream: "usage": null on every chunk, then a usage chunk
};

// A whole (non-streamed) response. n_cached: prompt tokens the prefix cache held (usage's
// prompt_tokens_details.cached_tokens).
std::string completion_body(const ResponseMeta& meta, std::string_view text, std::string_view finish_reason,
                            size_t n_prompt, size_t n_completion, size_t n_cached = 0);
// One SSE event ("data: {...}\n\n"): the opening chunk (chat: the assistant role), a piece
// of text, the final chunk with the finish reason, the usage chunk, and the end marker.
std::string sse_open(const ResponseMeta& meta);
std::string sse_piece(const ResponseMeta& meta, std::string_view text);
std::string sse_finish(const ResponseMeta& meta, std::string_view finish_reason);
std::string sse_usage(const ResponseMeta& meta, size_t n_prompt, size_t n_completion, size_t n_cached = 0);
std::string sse_error(std::string_view message);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models
std::string models_body(std::string_view model, int64_t created);

// OpenAI's error shape: {"error": {"message", "type", "param", "code"}}. The type follows
// from the status (400/404/405/413 invalid_request_error, 401 authentication_error,
// 429/503 server overloaded, 5xx server_error).
std::string error_body(int status, std::string_view message, std::string_view code = {});

}  // namespace lattice::serve
