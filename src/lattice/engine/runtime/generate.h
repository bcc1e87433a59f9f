// Text generation on one Session: tokenize the prompt (optionally through the model's chat
// template), prefill it, then sample and decode token by token, streaming the text as whole
// UTF-8 characters, and time both phases.
//
// Blocks until done; not thread-safe (uses the Session). on_text is called on the calling
// thread, between tokens, with text that never splits a character.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/sampler/sampler.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::engine {

struct GenerateOptions {
  std::string prompt;
  uint32_t n_predict = 128;  // tokens to generate at most
  bool chat = false;         // wrap the prompt as one user turn of the model's chat template
  bool stop_at_eog = true;   // stop at EOS / end-of-turn tokens (they are not emitted)
  SamplerParams sampler;
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated ids (an end-of-generation token excluded)
  std::string text;             // their text
  std::string stop_reason;      // "length" or "eog"
  double prefill_seconds = 0, decode_seconds = 0;
  uint32_t n_decode_steps = 0;  // single-token forward passes timed in decode_seconds
  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_tokens.size() / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? n_decode_steps / decode_seconds : 0; }
};

// The prompt's token ids as generate() would feed them (BOS, chat template).
std::vector<int32_t> prompt_tokens(const Tokenizer& tokenizer, const GenerateOptions& options);

// Runs from an empty sequence (the session is reset first). kInvalidArgument if the prompt
// is empty or prompt + n_predict exceed the session's context.
Result<GenerateResult> generate(Session& session, const Tokenizer& tokenizer, const GenerateOptions& options,
                                const std::function<void(std::string_view)>& on_text = {});

}  // namespace lattice::engine
