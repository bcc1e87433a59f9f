// Generator: text generation as a library API, for one or many sequences, on one node or as
// one rank of N. It schedules requests onto a Stepper (a Forward, or a pipeline): every step
// advances each decoding sequence by one token and feeds a chunk of a waiting prompt into the
// same step (so a new prompt never holds the running streams for long), samples, applies the
// stop conditions (length, end-of-generation tokens, stop strings) and hands out text pieces
// that never split a UTF-8 character.
//
//   auto g = Generator::create(forward, tokenizer, {.max_seqs = 8});
//   auto id = g->submit(request, on_piece);     // queued; takes a slot when one is free
//   while (g->busy()) g->step();                // or generate(request, on_text) for one
//   auto result = g->take(*id);                 // text, tokens, stop reason, timings
//
// On N ranks every rank runs its own Generator over its shard and makes the same calls
// (submit, step, cancel) in the same order; they then choose the same tokens. Callbacks run on
// the calling thread, inside step().
//
// Thread safety: one thread (the rank's), like the Stepper under it. The Stepper and the
// Tokenizer must outlive the Generator. step() blocks for one forward pass (plus, over N
// ranks, its collectives, which are bounded by the group's deadlines).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/sampler/sampler.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::engine {

struct GenerationRequest {
  std::vector<int32_t> prompt;     // token ids (prompt_tokens() makes them from text)
  uint32_t n_predict = 128;        // tokens to generate at most
  bool stop_at_eog = true;         // stop at EOS / end-of-turn tokens (they are not emitted)
  std::vector<std::string> stop;   // stop strings: the text ends before the first one found
  SamplerParams sampler;
  // Resuming after a recovery: tokens already generated (their text was handed out before)
  // and the random draws their sampler had made. They are prefilled with the prompt.
  std::vector<int32_t> resume_tokens;
  uint64_t resume_draws = 0;
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated ids (an end-of-generation token excluded)
  std::string text;             // their text (up to a stop string)
  std::string stop_reason;      // "length", "eog", "stop" or "cancelled"
  double prefill_seconds = 0, decode_seconds = 0;
  double queue_seconds = 0;     // submitted until its first step
  uint32_t cached_tokens = 0;   // leading prompt tokens whose keys and values a slot still held (not prefilled)
  uint32_t n_decode_steps = 0;  // forward passes after the first token, timed in decode_seconds
  uint64_t draws = 0;           // the sampler's random draws (for recovery)
  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_tokens.size() / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? n_decode_steps / decode_seconds : 0; }
};

struct GeneratorOptions {
  uint32_t max_seqs = 1;         // sequences decoded together (slots); at most the Stepper's max_items
  uint32_t n_ctx = 0;            // positions per sequence (0: the Stepper's)
  uint32_t prefill_chunk = 256;  // prompt tokens fed into one step at most
  uint32_t max_queue = 256;      // requests waiting for a slot; submit() refuses past that
  // A free slot keeps the keys and values of the tokens its last request ran through; a new
  // request takes the free slot sharing the longest leading run of tokens with its prompt and
  // prefills only the rest (a fixed system prompt, the next turn of a chat). Without a match
  // it takes the slot freed longest ago. The cached positions hold what a prefill from an
  // empty slot computes (the kernels do not depend on how rows are batched), so the tokens
  // are the same with the cache or without it. Every rank of N makes the same choice.
  bool prefix_cache = true;
};

class Generator {
 public:
  using OnPiece = std::function<void(int id, std::string_view piece)>;

  // kInvalidArgument for zero slots or more than the Stepper takes in a step;
  // kResourceExhausted when the KV caches cannot be allocated.
  static Result<std::unique_ptr<Generator>> create(Stepper& stepper, const Tokenizer& tokenizer,
                                                   const GeneratorOptions& options = {});
  ~Generator();

  // Queues a request; returns its id. kInvalidArgument for an empty prompt, a token outside
  // the vocabulary, bad sampler parameters or a prompt + n_predict beyond the context;
  // kResourceExhausted when the queue is full. on_piece gets the text as it is generated.
  Result<int> submit(GenerationRequest request, OnPiece on_piece = {});
  // One step (collective over N ranks). A failure of the forward pass (kPeerLost, kTimeout)
  // is returned; the requests then stay as they were before the step began, except that their
  // KV caches are stale: call restart() (recovery) or drop the Generator.
  Status step();
  bool busy() const { return !active_.empty() || !queue_.empty(); }
  size_t n_active() const { return active_.size(); }
  size_t n_queued() const { return queue_.size(); }
  // Ends a request at the next step ("cancelled"), queued or running.
  void cancel(int id);
  bool finished(int id) const;
  // A finished request's result (once); kNotFound for an unknown or unfinished id.
  Result<GenerateResult> take(int id);
  // Progress of a running or finished request: tokens so far and the sampler's draws.
  struct Progress {
    std::vector<int32_t> tokens;
    uint64_t draws = 0;
  };
  Result<Progress> progress(int id) const;
  // How many tokens a request has so far (progress() without the copy).
  Result<size_t> n_generated(int id) const;

  // One request, run to the end (the single-sequence API): submit + step until it finishes.
  Result<GenerateResult> generate(GenerationRequest request, const std::function<void(std::string_view)>& on_text = {});

  Stepper& stepper() { return *stepper_; }
  const GeneratorOptions& options() const { return opt_; }

 private:
  struct Request;
  Generator() = default;
  void admit();
  void finish(Request& r, const char* reason);
  void release(Request& r);  // its sequence back to the free slots, with the tokens it holds
  void emit(Request& r, bool final);
  const Request* find(int id) const;  // queued, active or finished; null if unknown

  Stepper* stepper_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
  GeneratorOptions opt_;
  struct Slot {
    std::unique_ptr<Sequence> seq;
    std::vector<int32_t> tokens;  // what its first n_past positions hold
  };
  std::vector<Slot> free_seqs_;  // the longest free at the front
  std::deque<std::unique_ptr<Request>> queue_;
  std::vector<std::unique_ptr<Request>> active_;
  std::vector<std::unique_ptr<Request>> done_;
  int next_id_ = 1;
};

// ---- The simple text API on one Session ----

struct GenerateOptions {
  std::string prompt;
  uint32_t n_predict = 128;  // tokens to generate at most
  bool chat = false;         // wrap the prompt as one user turn of the model's chat template
  bool stop_at_eog = true;   // stop at EOS / end-of-turn tokens (they are not emitted)
  std::vector<std::string> stop;
  SamplerParams sampler;
};

// The prompt's token ids as generate() would feed them (BOS, chat template).
std::vector<int32_t> prompt_tokens(const Tokenizer& tokenizer, const GenerateOptions& options);

// Runs from an empty sequence on the session's forward pass. kInvalidArgument if the prompt
// is empty or prompt + n_predict exceed the session's context.
Result<GenerateResult> generate(Session& session, const Tokenizer& tokenizer, const GenerateOptions& options,
                                const std::function<void(std::string_view)>& on_text = {});

}  // namespace lattice::engine
