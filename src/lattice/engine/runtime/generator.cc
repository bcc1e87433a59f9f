#include "lattice/engine/runtime/generator.h"

#include <algorithm>
#include <string>

#include "lattice/engine/tokenizer/chat_template.h"

namespace lattice::engine {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

struct Generator::Request {
  int id = 0;
  GenerationRequest req;
  OnPiece on_piece;
  std::unique_ptr<Sequence> seq;
  std::optional<Sampler> sampler;
  std::optional<StreamDecoder> stream;
  std::vector<int32_t> feed;  // prompt + resumed tokens, to prefill
  size_t fed = 0;             // of feed, in the cache
  int32_t pending = -1;       // the last chosen token, to feed at the next step
  GenerateResult result;
  size_t emitted = 0;         // bytes of result.text handed out
  bool cancelled = false, done = false;
  Clock::time_point submitted;
};

Generator::~Generator() = default;

Result<std::unique_ptr<Generator>> Generator::create(Stepper& stepper, const Tokenizer& tokenizer,
                                                     const GeneratorOptions& options) {
  GeneratorOptions o = options;
  if (o.max_seqs == 0) return InvalidArgument("generator: at least one sequence slot");
  if (o.max_seqs > stepper.max_items())
    return InvalidArgument("generator: " + std::to_string(o.max_seqs) + " slots, but a step takes " +
                           std::to_string(stepper.max_items()) + " sequences");
  if (o.prefill_chunk == 0) o.prefill_chunk = 1;
  std::unique_ptr<Generator> g(new Generator());
  g->stepper_ = &stepper;
  g->tokenizer_ = &tokenizer;
  for (uint32_t i = 0; i < o.max_seqs; ++i) {
    LATTICE_ASSIGN_OR_RETURN(auto s, stepper.new_sequence(o.n_ctx));
    g->free_seqs_.push_back({std::move(s), {}});
  }
  o.n_ctx = g->free_seqs_.front().seq->n_ctx();
  g->opt_ = o;
  return g;
}

Result<int> Generator::submit(GenerationRequest request, OnPiece on_piece) {
  LATTICE_RETURN_IF_ERROR(request.sampler.validate());
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty (no tokens)");
  const uint32_t V = stepper_->model().hparams().n_vocab;
  for (const auto* list : {&request.prompt, &request.resume_tokens})
    for (int32_t t : *list)
      if (t < 0 || static_cast<uint32_t>(t) >= V)
        return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) +
                               ")");
  if (request.prompt.size() + request.n_predict > opt_.n_ctx)
    return InvalidArgument("prompt (" + std::to_string(request.prompt.size()) + " tokens) + " +
                           std::to_string(request.n_predict) + " generated tokens exceed the context of " +
                           std::to_string(opt_.n_ctx));
  for (const std::string& s : request.stop)
    if (s.empty()) return InvalidArgument("a stop string is empty");
  if (queue_.size() >= opt_.max_queue)
    return ResourceExhausted("generator: " + std::to_string(queue_.size()) + " requests already wait");
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->req = std::move(request);
  r->on_piece = std::move(on_piece);
  r->submitted = Clock::now();
  const int id = r->id;
  queue_.push_back(std::move(r));
  admit();
  return id;
}

void Generator::admit() {
  while (!queue_.empty() && !free_seqs_.empty()) {
    std::unique_ptr<Request> r = std::move(queue_.front());
    queue_.pop_front();
    if (r->cancelled) {
      finish(*r, "cancelled");
      done_.push_back(std::move(r));
      continue;
    }
    const GenerationRequest& q = r->req;
    r->feed = q.prompt;
    r->feed.insert(r->feed.end(), q.resume_tokens.begin(), q.resume_tokens.end());
    // The free slot whose cached tokens share the longest prefix with the feed; at least the
    // last token is fed again, for the logits of the next one. None: the one freed first.
    size_t best = 0, best_len = 0;
    if (opt_.prefix_cache)
      for (size_t i = 0; i < free_seqs_.size(); ++i) {
        const std::vector<int32_t>& held = free_seqs_[i].tokens;
        const size_t limit = std::min(held.size(), r->feed.size() - 1);
        size_t n = 0;
        while (n < limit && held[n] == r->feed[n]) ++n;
        if (n > best_len) best = i, best_len = n;
      }
    r->seq = std::move(free_seqs_[best].seq);
    free_seqs_.erase(free_seqs_.begin() + static_cast<std::ptrdiff_t>(best));
    r->seq->truncate(static_cast<uint32_t>(best_len));
    r->fed = best_len;
    r->result.cached_tokens = static_cast<uint32_t>(best_len);
    r->sampler.emplace(q.sampler);
    for (int32_t t : q.prompt) r->sampler->accept(t);
    for (int32_t t : q.resume_tokens) r->sampler->accept(t);
    r->sampler->skip_draws(q.resume_draws);
    r->stream.emplace(*tokenizer_);
    r->result.prompt_tokens = q.prompt;
    r->result.tokens = q.resume_tokens;
    // Resumed tokens were handed out before: their text is not emitted again.
    for (int32_t t : q.resume_tokens) r->result.text += r->stream->push(t);
    r->emitted = r->result.text.size();
    r->pending = -1;
    r->result.queue_seconds = seconds_between(r->submitted, Clock::now());
    active_.push_back(std::move(r));
  }
}

void Generator::emit(Request& r, bool final) {
  std::string& text = r.result.text;
  size_t safe = text.size();
  if (!final && !r.req.stop.empty()) {
    size_t longest = 0;
    for (const std::string& s : r.req.stop) longest = std::max(longest, s.size());
    const size_t from = r.emitted >= longest ? r.emitted - longest + 1 : 0;
    size_t hit = std::string::npos;
    for (const std::string& s : r.req.stop) hit = std::min(hit, text.find(s, from));
    if (hit != std::string::npos) {
      text.resize(hit);
      if (r.on_piece && hit > r.emitted) r.on_piece(r.id, std::string_view(text).substr(r.emitted));
      r.emitted = std::max(r.emitted, hit);
      r.done = true;
      r.result.stop_reason = "stop";
      return;
    }
    // Hold back a tail that may be the start of a stop string.
    size_t hold = 0;
    for (const std::string& s : r.req.stop)
      for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
        if (text.compare(text.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
    safe = text.size() - hold;
  }
  if (safe > r.emitted) {
    if (r.on_piece) r.on_piece(r.id, std::string_view(text).substr(r.emitted, safe - r.emitted));
    r.emitted = safe;
  }
}

void Generator::finish(Request& r, const char* reason) {
  if (r.result.stop_reason != "stop") {
    if (r.stream) r.result.text += r.stream->flush();
    r.result.stop_reason = reason;
    emit(r, /*final=*/true);
  }
  if (r.sampler) r.result.draws = r.sampler->draws();
  r.done = true;
  release(r);
}

void Generator::release(Request& r) {
  if (!r.seq) return;
  // Its positions hold the feed, then the generated tokens fed back (the last one chosen, an
  // end-of-generation token or one past a stop string never was).
  Slot slot{std::move(r.seq), {}};
  const size_t n = slot.seq->n_past();
  if (opt_.prefix_cache && n > 0) {
    slot.tokens.assign(r.feed.begin(), r.feed.begin() + static_cast<std::ptrdiff_t>(std::min(n, r.feed.size())));
    const size_t resumed = r.req.resume_tokens.size();
    for (size_t i = resumed; i < r.result.tokens.size() && slot.tokens.size() < n; ++i)
      slot.tokens.push_back(r.result.tokens[i]);
    slot.seq->truncate(static_cast<uint32_t>(slot.tokens.size()));
  } else {
    slot.seq->reset();
  }
  free_seqs_.push_back(std::move(slot));
}

Status Generator::step() {
  // Cancelled requests leave first.
  for (auto& r : active_)
    if (r->cancelled && !r->done) finish(*r, "cancelled");
  auto retire = [&] {
    for (auto it = active_.begin(); it != active_.end();) {
      if ((*it)->done) {
        release(**it);
        done_.push_back(std::move(*it));
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
  };
  retire();
  admit();
  if (active_.empty()) return Status::Ok();

  // Decoding sequences first (one row each), then chunks of prompts with the rows left.
  std::vector<StepItem> items;
  std::vector<Request*> owners;
  std::vector<uint32_t> chunk;
  uint32_t rows = 0;
  const uint32_t max_rows = stepper_->max_rows(), max_items = stepper_->max_items();
  for (auto& r : active_)
    if (r->pending >= 0 && items.size() < max_items && rows < max_rows) {
      StepItem it;
      it.seq = r->seq.get();
      it.tokens = std::span<const int32_t>(&r->pending, 1);
      items.push_back(it);
      owners.push_back(r.get());
      chunk.push_back(0);
      ++rows;
    }
  for (auto& r : active_)
    if (r->pending < 0 && r->fed < r->feed.size() && items.size() < max_items && rows < max_rows) {
      const uint32_t n = static_cast<uint32_t>(
          std::min<size_t>({r->feed.size() - r->fed, size_t{opt_.prefill_chunk}, size_t{max_rows - rows}}));
      StepItem it;
      it.seq = r->seq.get();
      it.tokens = std::span<const int32_t>(r->feed.data() + r->fed, n);
      items.push_back(it);
      owners.push_back(r.get());
      chunk.push_back(n);
      rows += n;
    }
  if (items.empty()) return Internal("generator: active requests but nothing to step");

  const auto t0 = Clock::now();
  LATTICE_RETURN_IF_ERROR(stepper_->step(items));
  // Which items end with a token to choose: decodes, and prompts fed to their end.
  std::vector<Sampler*> samplers(items.size(), nullptr);
  std::vector<char> wants(items.size(), 0);
  bool any = false;
  for (size_t i = 0; i < items.size(); ++i) {
    Request& r = *owners[i];
    const bool prompt_done = chunk[i] > 0 && r.fed + chunk[i] == r.feed.size();
    const bool room = r.result.tokens.size() < r.req.n_predict;
    if ((chunk[i] == 0 || prompt_done) && room) {
      wants[i] = 1;
      samplers[i] = &*r.sampler;
      any = true;
    }
  }
  std::vector<int32_t> toks;
  if (any) {
    // Slots that want no token are greedy (cheap) and ignored.
    LATTICE_ASSIGN_OR_RETURN(toks, stepper_->choose(samplers));
  }
  const double dt = seconds_between(t0, Clock::now());

  for (size_t i = 0; i < items.size(); ++i) {
    Request& r = *owners[i];
    if (chunk[i] > 0) {
      r.fed += chunk[i];
      r.result.prefill_seconds += dt;
    } else {
      r.pending = -1;
      r.result.decode_seconds += dt;
      r.result.n_decode_steps++;
    }
    if (!wants[i]) {
      if (r.fed == r.feed.size() && r.pending < 0 && r.result.tokens.size() >= r.req.n_predict) finish(r, "length");
      continue;
    }
    const int32_t tok = toks[i];
    r.sampler->accept(tok);
    if (r.req.stop_at_eog && tokenizer_->is_eog(tok)) {
      finish(r, "eog");
      continue;
    }
    r.result.tokens.push_back(tok);
    r.result.text += r.stream->push(tok);
    emit(r, /*final=*/false);
    if (r.done) {  // a stop string
      finish(r, "stop");
      continue;
    }
    // Nothing more to predict: the last token needs no forward pass.
    if (r.result.tokens.size() >= r.req.n_predict) {
      finish(r, "length");
      continue;
    }
    r.pending = tok;
  }
  retire();
  admit();
  return Status::Ok();
}

void Generator::cancel(int id) {
  for (auto& r : queue_)
    if (r->id == id) r->cancelled = true;
  for (auto& r : active_)
    if (r->id == id) r->cancelled = true;
}

bool Generator::finished(int id) const {
  for (const auto& r : done_)
    if (r->id == id) return true;
  return false;
}

Result<GenerateResult> Generator::take(int id) {
  for (auto it = done_.begin(); it != done_.end(); ++it)
    if ((*it)->id == id) {
      GenerateResult out = std::move((*it)->result);
      done_.erase(it);
      return out;
    }
  return NotFound("generator: request " + std::to_string(id) + " is not finished");
}

const Generator::Request* Generator::find(int id) const {
  for (const auto* list : {&active_, &done_})
    for (const auto& r : *list)
      if (r->id == id) return r.get();
  for (const auto& r : queue_)
    if (r->id == id) return r.get();
  return nullptr;
}

Result<Generator::Progress> Generator::progress(int id) const {
  const Request* r = find(id);
  if (!r) return NotFound("generator: no request " + std::to_string(id));
  if (!r->sampler) return Progress{r->req.resume_tokens, r->req.resume_draws};  // still queued
  return Progress{r->result.tokens, r->sampler->draws()};
}

Result<size_t> Generator::n_generated(int id) const {
  const Request* r = find(id);
  if (!r) return NotFound("generator: no request " + std::to_string(id));
  return r->sampler ? r->result.tokens.size() : r->req.resume_tokens.size();
}

Result<GenerateResult> Generator::generate(GenerationRequest request,
                                           const std::function<void(std::string_view)>& on_text) {
  OnPiece piece;
  if (on_text) piece = [&on_text](int, std::string_view p) { on_text(p); };
  LATTICE_ASSIGN_OR_RETURN(const int id, submit(std::move(request), std::move(piece)));
  while (!finished(id)) LATTICE_RETURN_IF_ERROR(step());
  return take(id);
}

std::vector<int32_t> prompt_tokens(const Tokenizer& tokenizer, const GenerateOptions& options) {
  if (!options.chat) return tokenizer.encode(options.prompt);
  const std::string text = apply_chat_template(tokenizer.chat_template().empty() ? "chatml" : tokenizer.chat_template(),
                                               {{"user", options.prompt}}, /*add_generation_prompt=*/true);
  return tokenizer.encode(text, {.add_special = true, .parse_special = true});
}

Result<GenerateResult> generate(Session& session, const Tokenizer& tokenizer, const GenerateOptions& options,
                                const std::function<void(std::string_view)>& on_text) {
  LATTICE_RETURN_IF_ERROR(options.sampler.validate());
  GenerationRequest q;
  q.prompt = prompt_tokens(tokenizer, options);
  q.n_predict = options.n_predict;
  q.stop_at_eog = options.stop_at_eog;
  q.stop = options.stop;
  q.sampler = options.sampler;
  GeneratorOptions go;
  go.n_ctx = session.n_ctx();
  go.prefill_chunk = session.forward().options().n_batch;
  LATTICE_ASSIGN_OR_RETURN(auto g, Generator::create(session.forward(), tokenizer, go));
  return g->generate(std::move(q), on_text);
}

}  // namespace lattice::engine
