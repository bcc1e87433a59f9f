#include "lattice/engine/runtime/session.h"

#include <algorithm>
#include <string>

namespace lattice::engine {

Session::~Session() = default;

Result<std::unique_ptr<Session>> Session::create(const Model& model, const SessionOptions& options) {
  auto solo = std::make_unique<SoloGroup>();
  Group& g = *solo;
  LATTICE_ASSIGN_OR_RETURN(auto s, create(model, g, options));
  s->own_group_ = std::move(solo);
  return s;
}

Result<std::unique_ptr<Session>> Session::create(const Model& model, Group& group, const SessionOptions& options) {
  if (options.n_threads == 0) return InvalidArgument("session: threads must be >= 1");
  if (options.n_batch == 0) return InvalidArgument("session: batch must be >= 1");
  ForwardOptions fo;
  fo.n_threads = options.n_threads;
  fo.n_batch = options.n_batch;
  fo.n_ctx = options.n_ctx;
  fo.max_items = 1;
  std::unique_ptr<Session> s(new Session());
  s->group_ = &group;
  auto f = Forward::create(model, group, fo);
  if (!f.ok()) return f.status().with_context("session");
  s->forward_ = std::move(f).value();
  LATTICE_ASSIGN_OR_RETURN(s->seq_, s->forward_->new_sequence());
  s->n_batch_ = s->forward_->options().n_batch;
  return s;
}

Status Session::prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  if (tokens.empty()) return InvalidArgument("prefill: no tokens");
  if (tokens.size() > seq_->n_free())
    return InvalidArgument("prefill: " + std::to_string(tokens.size()) + " tokens do not fit the context (" +
                           std::to_string(seq_->n_past()) + " of " + std::to_string(seq_->n_ctx()) + " used)");
  const uint32_t V = forward_->model().hparams().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || static_cast<uint32_t>(t) >= V)
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) +
                             ")");
  const size_t VL = forward_->model().vocab().size();
  if (all_logits) all_logits->resize(tokens.size() * VL);
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min<size_t>(n_batch_, tokens.size() - done);
    StepItem it;
    it.seq = seq_.get();
    it.tokens = tokens.subspan(done, n);
    if (all_logits) it.all_logits = all_logits->data() + done * VL;
    LATTICE_RETURN_IF_ERROR(forward_->step(std::span<const StepItem>(&it, 1)));
    done += n;
  }
  return Status::Ok();
}

Status Session::decode(int32_t token) { return prefill(std::span<const int32_t>(&token, 1)); }

Status Session::forward_stage(const int32_t* tokens, const float* x_in, uint32_t n, float* x_out) {
  if (n == 0 || n > n_batch_) return InvalidArgument("forward: 1.." + std::to_string(n_batch_) + " tokens a step");
  StepItem it;
  it.seq = seq_.get();
  if (x_in) {
    it.x_in = x_in;
    it.n_in = n;
  } else {
    it.tokens = std::span<const int32_t>(tokens, n);
  }
  it.x_out = x_out;
  return forward_->step(std::span<const StepItem>(&it, 1));
}

}  // namespace lattice::engine
