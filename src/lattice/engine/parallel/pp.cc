#include "lattice/engine/parallel/pp.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace lattice::engine::parallel {

Result<std::vector<Range>> pp_layers(uint32_t n_layer, int world, std::span<const double> weights) {
  if (world < 1 || static_cast<uint32_t>(world) > n_layer)
    return InvalidArgument("pipeline: " + std::to_string(world) + " stages for " + std::to_string(n_layer) + " layers");
  // Give every stage one layer, then split the rest by weight.
  auto rest = split_units(n_layer - world, world, weights);
  std::vector<Range> out(world);
  uint32_t at = 0;
  for (int r = 0; r < world; ++r) {
    out[r] = {at, at + 1 + rest[r].size()};
    at = out[r].end;
  }
  return out;
}

Result<std::unique_ptr<PpSession>> PpSession::create(const Model& stage, Group& group, const PpSessionOptions& options) {
  if (stage.world() != 1) return InvalidArgument("pipeline: a stage must have a tensor-parallel world of 1");
  const int w = group.size();
  std::vector<int> order = options.stage_order;
  if (order.empty())
    for (int r = 0; r < w; ++r) order.push_back(r);
  std::vector<char> seen(size_t(w), 0);
  int index = -1;
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const int r = order[size_t(i)];
    if (r < 0 || r >= w || seen[size_t(r)]) return InvalidArgument("pipeline: stage_order is not a permutation of the ranks");
    seen[size_t(r)] = 1;
    if (r == group.rank()) index = i;
  }
  if (static_cast<int>(order.size()) != w || index < 0)
    return InvalidArgument("pipeline: stage_order must name every rank once");
  const bool is_last = index == w - 1;
  if (stage.has_head() != is_last)
    return InvalidArgument("pipeline: only the last stage (rank " + std::to_string(order.back()) +
                           ") may hold the last layer");
  if (index == 0 && stage.layer_begin() != 0) return InvalidArgument("pipeline: stage 0 must start at layer 0");
  std::unique_ptr<PpSession> s(new PpSession());
  s->stage_index_ = index;
  s->prev_ = index > 0 ? order[size_t(index - 1)] : -1;
  s->next_ = index + 1 < w ? order[size_t(index + 1)] : -1;
  s->last_rank_ = order.back();
  s->stage_ = &stage;
  s->group_ = &group;
  ForwardOptions fo;
  fo.n_threads = options.session.n_threads;
  fo.n_ctx = options.session.n_ctx;
  fo.n_batch = options.session.n_batch;  // a micro-batch
  fo.max_items = 1;                      // items run one after another through the stages
  LATTICE_ASSIGN_OR_RETURN(s->forward_, Forward::create(stage, s->own_, fo));
  s->n_max_items_ = std::max<uint32_t>(options.max_items, 1);
  LATTICE_ASSIGN_OR_RETURN(s->seq_, s->forward_->new_sequence());
  s->micro_ = s->forward_->options().n_batch;
  const size_t E = stage.hparams().n_embd;
  s->in_.assign(s->micro_ * E, 0.0f);
  s->out_.assign(s->micro_ * E, 0.0f);
  s->logits_.assign(s->n_max_items_ * (stage.has_head() ? stage.hparams().n_vocab : 0), 0.0f);
  return s;
}

Status PpSession::run_rows(Sequence& seq, const int32_t* tokens, uint32_t n) {
  const size_t E = stage_->hparams().n_embd;
  StepItem it;
  it.seq = &seq;
  if (stage_index_ == 0) {
    it.tokens = std::span<const int32_t>(tokens, n);
  } else {
    LATTICE_RETURN_IF_ERROR(group_->recv(in_.data(), n * E, prev_));
    it.x_in = in_.data();
    it.n_in = n;
  }
  it.x_out = out_.data();
  LATTICE_RETURN_IF_ERROR(forward_->step(std::span<const StepItem>(&it, 1)));
  if (!last()) LATTICE_RETURN_IF_ERROR(group_->send(out_.data(), n * E, next_));
  return Status::Ok();
}

Status PpSession::step(std::span<const StepItem> items) {
  if (items.empty() || items.size() > n_max_items_)
    return InvalidArgument("pipeline: 1.." + std::to_string(n_max_items_) + " sequences a step");
  // Every stage knows the token counts (the same calls on every rank); only the first reads
  // the tokens. Micro-batches flow down the pipeline one after another: while stage 1 runs
  // batch m, stage 0 already runs m+1.
  n_items_ = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& item = items[i];
    if (!item.seq || item.x_in) return InvalidArgument("pipeline: an item needs a sequence and tokens");
    const size_t n = item.tokens.size();
    if (n == 0) return InvalidArgument("prefill: no tokens");
    for (size_t done = 0; done < n;) {
      const uint32_t m = static_cast<uint32_t>(std::min<size_t>(micro_, n - done));
      LATTICE_RETURN_IF_ERROR(run_rows(*item.seq, item.tokens.data() + done, m));
      done += m;
    }
    if (last()) {
      const auto lg = forward_->logits(0);
      std::copy(lg.begin(), lg.end(), logits_.begin() + i * lg.size());
    }
  }
  n_items_ = items.size();
  return Status::Ok();
}

Result<std::vector<int32_t>> PpSession::choose(std::span<Sampler* const> samplers) {
  if (samplers.size() != n_items_ || n_items_ == 0)
    return InvalidArgument("pipeline: choose() wants one sampler slot per item of the last step");
  // Per item: the token and how many random draws choosing it took, so every stage's sampler
  // advances by the same draws and any rank can take over the last stage after a failure.
  const size_t B = samplers.size();
  std::vector<int32_t> msg(2 * B, 0);
  if (last()) {
    const size_t V = stage_->hparams().n_vocab;
    for (size_t i = 0; i < B; ++i) {
      const std::span<const float> lg(logits_.data() + i * V, V);
      if (samplers[i]) {
        const uint64_t before = samplers[i]->draws();
        LATTICE_ASSIGN_OR_RETURN(msg[2 * i], samplers[i]->sample(lg));
        msg[2 * i + 1] = static_cast<int32_t>(samplers[i]->draws() - before);
      } else {
        msg[2 * i] = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      }
    }
  }
  LATTICE_RETURN_IF_ERROR(group_->broadcast32(msg.data(), msg.size(), last_rank_));
  std::vector<int32_t> out(B);
  for (size_t i = 0; i < B; ++i) {
    out[i] = msg[2 * i];
    if (!last() && samplers[i]) {
      if (msg[2 * i + 1] < 0 || msg[2 * i + 1] > 1) return Corrupt("pp: the last stage sent a bad draw count");
      samplers[i]->skip_draws(static_cast<uint64_t>(msg[2 * i + 1]));
    }
  }
  return out;
}

Status PpSession::prefill(std::span<const int32_t> tokens) {
  StepItem it;
  it.seq = seq_.get();
  it.tokens = tokens;
  return step(std::span<const StepItem>(&it, 1));
}

Status PpSession::decode(int32_t token) { return prefill(std::span<const int32_t>(&token, 1)); }

Result<int32_t> PpSession::argmax() {
  Sampler* none = nullptr;
  LATTICE_ASSIGN_OR_RETURN(auto t, choose(std::span<Sampler* const>(&none, 1)));
  return t[0];
}

Result<int32_t> PpSession::sample(Sampler& sampler) {
  Sampler* s = &sampler;
  LATTICE_ASSIGN_OR_RETURN(auto t, choose(std::span<Sampler* const>(&s, 1)));
  return t[0];
}

Status PpSession::gather_logits(std::vector<float>* out) {
  const uint32_t V = stage_->hparams().n_vocab;
  out->assign(V, 0.0f);
  if (last()) std::memcpy(out->data(), logits_.data(), V * sizeof(float));
  return group_->broadcast32(out->data(), V, last_rank_);
}

}  // namespace lattice::engine::parallel
