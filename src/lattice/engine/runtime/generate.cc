#include "lattice/engine/runtime/generate.h"

#include <chrono>
#include <string>

#include "lattice/engine/tokenizer/chat_template.h"

namespace lattice::engine {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

std::vector<int32_t> prompt_tokens(const Tokenizer& tokenizer, const GenerateOptions& options) {
  if (!options.chat) return tokenizer.encode(options.prompt);
  const std::string text = apply_chat_template(tokenizer.chat_template().empty() ? "chatml" : tokenizer.chat_template(),
                                               {{"user", options.prompt}}, /*add_generation_prompt=*/true);
  return tokenizer.encode(text, {.add_special = true, .parse_special = true});
}

Result<GenerateResult> generate(Session& session, const Tokenizer& tokenizer, const GenerateOptions& options,
                                const std::function<void(std::string_view)>& on_text) {
  LATTICE_RETURN_IF_ERROR(options.sampler.validate());
  GenerateResult r;
  r.prompt_tokens = prompt_tokens(tokenizer, options);
  if (r.prompt_tokens.empty()) return InvalidArgument("the prompt is empty (no tokens)");
  if (r.prompt_tokens.size() + options.n_predict > session.n_ctx())
    return InvalidArgument("prompt (" + std::to_string(r.prompt_tokens.size()) + " tokens) + " +
                           std::to_string(options.n_predict) + " generated tokens exceed the context of " +
                           std::to_string(session.n_ctx()));
  session.reset();
  Sampler sampler(options.sampler);
  for (int32_t t : r.prompt_tokens) sampler.accept(t);
  r.tokens.reserve(options.n_predict);

  auto t0 = Clock::now();
  LATTICE_RETURN_IF_ERROR(session.prefill(r.prompt_tokens));
  r.prefill_seconds = seconds_since(t0);

  StreamDecoder stream(tokenizer);
  r.stop_reason = "length";
  double decode_s = 0;
  for (uint32_t i = 0; i < options.n_predict; ++i) {
    LATTICE_ASSIGN_OR_RETURN(const int32_t tok, sampler.sample(session.logits()));
    sampler.accept(tok);
    if (options.stop_at_eog && tokenizer.is_eog(tok)) {
      r.stop_reason = "eog";
      break;
    }
    r.tokens.push_back(tok);
    std::string piece = stream.push(tok);
    if (!piece.empty()) {
      r.text += piece;
      if (on_text) on_text(piece);
    }
    if (i + 1 == options.n_predict) break;  // nothing more to predict: skip the last forward pass
    t0 = Clock::now();
    LATTICE_RETURN_IF_ERROR(session.decode(tok));
    decode_s += seconds_since(t0);
    ++r.n_decode_steps;
  }
  std::string rest = stream.flush();
  if (!rest.empty()) {
    r.text += rest;
    if (on_text) on_text(rest);
  }
  r.decode_seconds = decode_s;
  return r;
}

}  // namespace lattice::engine
