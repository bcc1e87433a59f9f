#include "lattice/engine/parallel/pp.h"

#include <chrono>
#include <cstring>
#include <string>

#include "lattice/coll/coll.h"

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

Result<std::unique_ptr<PpSession>> PpSession::create(const TpModel& stage, coll::Communicator& comm,
                                                     const PpSessionOptions& options) {
  if (stage.world() != 1) return InvalidArgument("pipeline: a stage must have a tensor-parallel world of 1");
  const int w = comm.world_size();
  std::vector<int> order = options.stage_order;
  if (order.empty())
    for (int r = 0; r < w; ++r) order.push_back(r);
  std::vector<char> seen(size_t(w), 0);
  int index = -1;
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const int r = order[size_t(i)];
    if (r < 0 || r >= w || seen[size_t(r)]) return InvalidArgument("pipeline: stage_order is not a permutation of the ranks");
    seen[size_t(r)] = 1;
    if (r == comm.rank()) index = i;
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
  s->comm_ = &comm;
  LATTICE_ASSIGN_OR_RETURN(s->session_, TpSession::create(stage, nullptr, options.session));
  s->micro_ = std::max<uint32_t>(1, std::min(options.session.n_batch, options.session.n_ctx ? options.session.n_ctx : 4096));
  const size_t E = stage.hparams().n_embd;
  s->in_.assign(s->micro_ * E, 0.0f);
  s->out_.assign(s->micro_ * E, 0.0f);
  return s;
}

Status PpSession::step(const int32_t* tokens, uint32_t n) {
  const size_t E = stage_->hparams().n_embd;
  coll::CollOptions co;
  co.timeout = std::chrono::milliseconds(30000);
  auto timed = [&](auto&& fn, size_t sent) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = fn();
    stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_.calls++;
    stats_.bytes += sent;
    return st;
  };
  if (stage_index_ == 0) {
    LATTICE_RETURN_IF_ERROR(session_->forward_stage(tokens, nullptr, n, out_.data()));
  } else {
    LATTICE_RETURN_IF_ERROR(timed([&] { return coll::recv(*comm_, in_.data(), n * E, coll::DType::kF32, prev_, co); }, 0));
    LATTICE_RETURN_IF_ERROR(session_->forward_stage(nullptr, in_.data(), n, out_.data()));
  }
  if (!last())
    LATTICE_RETURN_IF_ERROR(timed([&] { return coll::send(*comm_, out_.data(), n * E, coll::DType::kF32, next_, co); },
                                  n * E * sizeof(float)));
  return Status::Ok();
}

Status PpSession::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) return InvalidArgument("prefill: no tokens");
  // Micro-batches flow down the pipeline one after another: while stage 1 runs batch m,
  // stage 0 already runs m+1.
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(micro_, tokens.size() - done));
    LATTICE_RETURN_IF_ERROR(step(tokens.data() + done, n));
    done += n;
  }
  return Status::Ok();
}

Status PpSession::decode(int32_t token) { return step(&token, 1); }

Result<int32_t> PpSession::argmax() {
  int32_t t = -1;
  if (last()) {
    LATTICE_ASSIGN_OR_RETURN(t, session_->argmax());
  }
  coll::CollOptions co;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = coll::broadcast(*comm_, &t, &t, 1, coll::DType::kI32, last_rank_, co);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.calls++;
  if (last()) stats_.bytes += sizeof(int32_t) * (comm_->world_size() - 1);
  LATTICE_RETURN_IF_ERROR(st);
  return t;
}

Result<int32_t> PpSession::sample(Sampler& sampler) {
  // The token and how many random draws choosing it took: every stage's sampler advances by
  // the same draws, so any rank can take over the last stage after a failure (recovery).
  int32_t msg[2] = {-1, 0};
  if (last()) {
    const uint64_t before = sampler.draws();
    LATTICE_ASSIGN_OR_RETURN(msg[0], sampler.sample(session_->local_logits()));
    msg[1] = static_cast<int32_t>(sampler.draws() - before);
  }
  coll::CollOptions co;
  LATTICE_RETURN_IF_ERROR(coll::broadcast(*comm_, msg, msg, 2, coll::DType::kI32, last_rank_, co));
  if (!last()) {
    if (msg[1] < 0 || msg[1] > 1) return Corrupt("pp: the last stage sent a bad draw count");
    sampler.skip_draws(static_cast<uint64_t>(msg[1]));
  }
  return msg[0];
}

Status PpSession::gather_logits(std::vector<float>* out) {
  const uint32_t V = stage_->hparams().n_vocab;
  out->assign(V, 0.0f);
  if (last()) std::memcpy(out->data(), session_->local_logits().data(), V * sizeof(float));
  coll::CollOptions co;
  return coll::broadcast(*comm_, out->data(), out->data(), V, coll::DType::kF32, last_rank_, co);
}

}  // namespace lattice::engine::parallel
