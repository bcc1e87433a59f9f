// The expert-parallel all-to-all step (EpPrefill::kAllToAll in forward.h): a part of the
// forward pass that only expert-parallel steps over several ranks take.
//
// The step's rows are split over the ranks in contiguous slices (rank q: slice q, the first
// R % W slices one row longer). Each rank keeps the residual stream of its slice only. Per layer:
//   1. attention: every rank norms its slice; an all-gather gives every rank every normed row;
//      attention runs tensor-parallel over all rows exactly as in the reduce path (this rank's
//      heads, its part of the KV caches, which therefore stay what decode reads); a
//      reduce-scatter sums the output projections' partials back to the slices;
//   2. mixture of experts: each rank routes its own slice (the router is whole on every
//      rank), and sends each row, once, to every rank that runs one of its chosen experts
//      (with shared experts, whose columns every rank holds a part of: to every rank that
//      holds some), carrying the row's expert ids and weights (dispatch: a count exchange and
//      an all_to_allv); each rank runs its experts over the rows it received and sends the
//      weighted sums back (combine: the reverse all_to_allv); the home rank adds them up in
//      rank order;
//   3. a dense layer (deepseek2's leading ones) as attention: all-gather, tensor-parallel FFN,
//      reduce-scatter.
// At the end the rows the head needs (each item's last, or every row) reach every rank, and
// the head runs as in the reduce path; the expert load of the step is summed over the ranks
// (one all-reduce a step) so that every rank holds the same figures.
//
// What moves per layer and rank, W ranks, R rows of n_embd floats: the reduce path's two
// all-reduces; here an all-gather and a reduce-scatter (one all-reduce's worth) plus dispatch
// and combine, each about R/W rows times the ranks a row reaches other than its own. The
// per-row work every rank repeats in the reduce path (norms, router, residuals) runs once.
#include <algorithm>
#include <cmath>
#include <vector>
#include <cstring>

#include "lattice/engine/ops/ops.h"
#include "lattice/engine/runtime/forward.h"

namespace lattice::engine {
namespace {

// Whether rank r holds expert e of the layer: owns it, or keeps a replica (Shard::expert_spare).
bool holds(const Model& m, uint32_t layer, uint32_t e, int r) {
  return m.expert_owner(layer, e) == r || (r >= 0 && r < 64 && (m.expert_holders(layer, e) >> r & 1));
}

}  // namespace

std::string_view to_string(EpPrefill p) {
  switch (p) {
    case EpPrefill::kAuto: return "auto";
    case EpPrefill::kReduce: return "reduce";
    case EpPrefill::kAllToAll: return "all-to-all";
  }
  return "?";
}

std::string describe(EpPrefill p, uint32_t a2a_min_rows) {
  if (p != EpPrefill::kAuto) return std::string(to_string(p)) + " (forced)";
  if (a2a_min_rows == 0)
    return "auto: reduce at every step size (all-to-all would move as many bytes here, with more calls)";
  return "auto: all-to-all from " + std::to_string(a2a_min_rows) + " rows a step, reduce below";
}

EpPrefillCost ep_prefill_cost(const Hparams& hp, int W, const std::function<int(uint32_t, uint32_t)>& owner,
                              const std::function<bool(int)>& holds_shared) {
  EpPrefillCost c;
  if (!hp.moe() || W < 2) return c;
  const double E = hp.n_embd, K = hp.n_expert_used, X = hp.n_expert, ring = 2.0 * (W - 1) / W;
  // The chance that none of a row's K experts (of X, drawn uniformly) is among n of them.
  auto none_among = [&](double n) {
    double p = 1;
    for (int k = 0; k < int(K); ++k) p *= std::max(0.0, (X - n - k) / (X - k));
    return p;
  };
  std::vector<double> owned(W);
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    c.reduce_floats_per_row += 2 * ring * E;
    c.a2a_floats_per_row += ring * E;  // attention: all-gather + reduce-scatter
    if (!hp.moe_layer(l)) {
      c.a2a_floats_per_row += ring * E;
      continue;
    }
    std::fill(owned.begin(), owned.end(), 0.0);
    for (uint32_t e = 0; e < hp.n_expert; ++e) owned[owner(l, e)] += 1;
    // Per row of the step: its home is each rank 1/W of the time, and it goes to each other
    // rank q that runs one of its experts (or holds shared-expert columns) and back.
    double reach = 0;
    for (int h = 0; h < W; ++h)
      for (int q = 0; q < W; ++q)
        if (q != h) reach += hp.n_expert_shared > 0 && holds_shared(q) ? 1.0 : 1.0 - none_among(owned[q]);
    c.a2a_floats_per_row += reach / W / W * (2 * E + 2 * K);
    c.extra_calls += 3;  // counts, dispatch, combine instead of nothing
  }
  c.extra_calls += 2;  // the step's load sum and the head's rows
  const double saved = c.reduce_floats_per_row - c.a2a_floats_per_row;
  // Under 5% is no saving worth a second path: the two measured within more than that of each
  // other on equal bytes (docs/BENCHMARKS.md, bench/ep_prefill.sh).
  if (saved <= 0.05 * c.reduce_floats_per_row) return c;
  c.min_rows = static_cast<uint32_t>(std::min(1e9, std::ceil(c.extra_calls * EpPrefillCost::kCallFloats / saved)));
  c.min_rows = std::max<uint32_t>(c.min_rows, W);
  return c;
}

EpPrefillCost ep_prefill_cost(const Model& m) {
  if (!m.expert_parallel()) return {};
  return ep_prefill_cost(
      m.hparams(), m.world(), [&](uint32_t l, uint32_t e) { return m.expert_owner(l, e); },
      [&](int q) { return m.layout().ff_shared[q].size() > 0; });
}

EpPrefill Forward::ep_prefill_path(std::span<const StepItem> items, uint32_t R) const {
  const Model& m = *model_;
  if (!m.expert_parallel() || !m.hparams().moe() || group_->size() < 2 || R < uint32_t(group_->size()))
    return EpPrefill::kReduce;
  if (!m.has_head() || m.layer_begin() != 0 || !group_->direct_all_to_all()) return EpPrefill::kReduce;
  for (const StepItem& it : items)
    if (it.x_in || it.x_out) return EpPrefill::kReduce;
  switch (opt_.ep_prefill) {
    case EpPrefill::kAllToAll: return EpPrefill::kAllToAll;
    case EpPrefill::kAuto:
      return opt_.a2a_min_rows > 0 && R >= opt_.a2a_min_rows ? EpPrefill::kAllToAll : EpPrefill::kReduce;
    default: return EpPrefill::kReduce;
  }
}

Status Forward::gather_rows(uint32_t R) {
  const size_t E = model_->hparams().n_embd, W = a2a_slices_.size(), P = a2a_slices_[0].size();
  if (R % W == 0) return group_->all_gather(a2a_xs_.data(), xb_.get(), P * E);
  LATTICE_RETURN_IF_ERROR(group_->all_gather(a2a_xs_.data(), a2a_pad_.data(), P * E));
  for (size_t q = 0; q < W; ++q)
    std::memcpy(xb_.get() + a2a_slices_[q].begin * E, a2a_pad_.data() + q * P * E,
                a2a_slices_[q].size() * E * sizeof(float));
  return Status::Ok();
}

Status Forward::scatter_sum_rows(uint32_t R) {
  const size_t E = model_->hparams().n_embd, W = a2a_slices_.size(), P = a2a_slices_[0].size();
  if (R % W == 0) return group_->reduce_scatter_sum(xb_.get(), a2a_xs_.data(), P * E);
  for (size_t q = 0; q < W; ++q)
    std::memcpy(a2a_pad_.data() + q * P * E, xb_.get() + a2a_slices_[q].begin * E,
                a2a_slices_[q].size() * E * sizeof(float));
  return group_->reduce_scatter_sum(a2a_pad_.data(), a2a_xs_.data(), P * E);
}

Status Forward::moe_a2a(uint32_t layer, const LayerWeights& L, uint32_t n) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const size_t E = hp.n_embd, X = hp.n_expert, K = hp.n_expert_used, S = E + 2 * K;
  const int W = group_->size();
  // Route this slice; the ranks each row goes to.
  a2a_ids_.resize(size_t{n} * K);
  a2a_w_.resize(size_t{n} * K);
  route(L, a2a_xs_.data(), n, [&](uint32_t r, const uint32_t* ids, const float* w) {
    std::copy_n(ids, K, a2a_ids_.data() + size_t{r} * K);
    std::copy_n(w, K, a2a_w_.data() + size_t{r} * K);
  });
  // Who runs each chosen expert: this rank when it holds the expert (its own, or a replica of
  // another rank's: Shard::expert_spare), so the row need not travel; otherwise the owner.
  const int me = m.rank();
  a2a_runner_.resize(size_t{n} * K);
  for (size_t i = 0; i < size_t{n} * K; ++i) {
    const uint32_t e = a2a_ids_[i];
    a2a_runner_[i] = holds(m, layer, e, me) ? me : m.expert_owner(layer, e);
  }
  const bool shared = hp.n_expert_shared > 0;
  a2a_rows_to_.resize(W);
  std::vector<uint32_t> send_rows(W), recv_rows(W);
  for (int q = 0; q < W; ++q) {
    auto& rows = a2a_rows_to_[q];
    rows.clear();
    const bool holds_shared = shared && m.layout().ff_shared[q].size() > 0;
    for (uint32_t r = 0; r < n; ++r) {
      bool go = holds_shared;
      for (size_t k = 0; k < K && !go; ++k) go = a2a_runner_[r * K + k] == q;
      if (go) rows.push_back(r);
    }
    send_rows[q] = static_cast<uint32_t>(rows.size());
  }
  // Dispatch: per row its hidden state, then K expert ids (-1: another rank's) and K weights.
  a2a_send_.resize(size_t{n} * W * S);
  std::vector<size_t> sc(W), so(W), rc(W), ro(W);
  size_t off = 0;
  for (int q = 0; q < W; ++q) {
    so[q] = off;
    for (uint32_t r : a2a_rows_to_[q]) {
      float* p = a2a_send_.data() + off;
      std::memcpy(p, a2a_xs_.data() + size_t{r} * E, E * sizeof(float));
      for (size_t k = 0; k < K; ++k) {
        const uint32_t e = a2a_ids_[r * K + k];
        p[E + k] = a2a_runner_[r * K + k] == q ? static_cast<float>(e) : -1.0f;
        p[E + K + k] = a2a_w_[r * K + k];
      }
      off += S;
    }
    sc[q] = off - so[q];
  }
  LATTICE_RETURN_IF_ERROR(group_->all_to_all32(send_rows.data(), recv_rows.data(), 1));
  size_t M = 0;
  for (int q = 0; q < W; ++q) {
    ro[q] = M * S, rc[q] = size_t{recv_rows[q]} * S, M += recv_rows[q];
    if (M > opt_.n_batch) return Internal("expert parallel: more rows dispatched to this rank than the step holds");
  }
  a2a_recv_.resize(M * S);
  LATTICE_RETURN_IF_ERROR(group_->all_to_allv(a2a_send_.data(), sc, so, a2a_recv_.data(), rc, ro));

  // This rank's experts over the rows it received (into xb, the rows run_experts reads).
  for (auto& rows : expert_rows_) rows.clear();
  const size_t l = layer - m.layer_begin();
  float* tokens = a2a_tokens_.data() + l * X;
  float& ran = a2a_tokens_[size_t{m.n_local_layers()} * X + l * W + me];  // this rank's rows
  for (size_t j = 0; j < M; ++j) {
    const float* p = a2a_recv_.data() + j * S;
    std::memcpy(xb_.get() + j * E, p, E * sizeof(float));
    for (size_t k = 0; k < K; ++k) {
      if (p[E + k] < 0) continue;
      const auto e = static_cast<uint32_t>(p[E + k]);
      if (e >= X || !holds(m, layer, e, me))
        return Internal("expert parallel: a row dispatched for expert " + std::to_string(e) +
                        ", which this rank does not hold");
      expert_rows_[e].emplace_back(static_cast<uint32_t>(j), p[E + K + k]);
      tokens[e] += 1, ran += 1;
    }
  }
  runner_.assign(X, -1);
  for (uint32_t e = 0; e < X; ++e)
    if (holds(m, layer, e, me)) runner_[e] = me;
  run_experts(L, static_cast<uint32_t>(M));

  // Combine: the weighted sums back to the rows' home ranks, added up there in rank order.
  std::vector<size_t> sc2(W), so2(W), rc2(W), ro2(W);
  for (int q = 0, a = 0, b = 0; q < W; ++q) {
    so2[q] = size_t(a) * E, sc2[q] = size_t{recv_rows[q]} * E, a += int(recv_rows[q]);
    ro2[q] = size_t(b) * E, rc2[q] = size_t{send_rows[q]} * E, b += int(send_rows[q]);
  }
  a2a_back_.resize(off / S * E);
  LATTICE_RETURN_IF_ERROR(group_->all_to_allv(acc_.get(), sc2, so2, a2a_back_.data(), rc2, ro2));
  std::memset(a2a_xs_.data(), 0, size_t{n} * E * sizeof(float));
  for (int q = 0; q < W; ++q)
    for (size_t t = 0; t < a2a_rows_to_[q].size(); ++t)
      ops::add(a2a_xs_.data() + size_t{a2a_rows_to_[q][t]} * E, a2a_back_.data() + ro2[q] + t * E, E);
  return Status::Ok();
}

Status Forward::head_rows_a2a(std::span<const StepItem> items, uint32_t R) {
  const size_t E = model_->hparams().n_embd, W = a2a_slices_.size(), P = a2a_slices_[0].size();
  const Range my = a2a_slices_[group_->rank()];
  float* x = x_.get();
  const bool all = std::any_of(items.begin(), items.end(), [](const StepItem& it) { return it.all_logits; });
  if (all) {  // every row: the slices gathered
    std::memcpy(a2a_xs_.data(), x + size_t{my.begin} * E, my.size() * E * sizeof(float));
    LATTICE_RETURN_IF_ERROR(group_->all_gather(a2a_xs_.data(), a2a_pad_.data(), P * E));
    for (size_t q = 0; q < W; ++q)
      std::memcpy(x + a2a_slices_[q].begin * E, a2a_pad_.data() + q * P * E, a2a_slices_[q].size() * E * sizeof(float));
    return Status::Ok();
  }
  // Each item's last row from the rank whose slice holds it: a sum over zeros elsewhere,
  // which is exact.
  const size_t B = items.size();
  a2a_back_.assign(B * E, 0.0f);
  for (size_t i = 0; i < B; ++i) {
    const uint32_t g = item_row0_[i] + items[i].rows() - 1;
    if (g >= my.begin && g < my.end) std::memcpy(a2a_back_.data() + i * E, x + size_t{g} * E, E * sizeof(float));
  }
  LATTICE_RETURN_IF_ERROR(group_->all_reduce_sum(a2a_back_.data(), B * E));
  for (size_t i = 0; i < B; ++i)
    std::memcpy(x + size_t{item_row0_[i] + items[i].rows() - 1} * E, a2a_back_.data() + i * E, E * sizeof(float));
  (void)R;
  return Status::Ok();
}

Status Forward::count_load_a2a() {
  // Each rank counted the rows its experts ran (per expert, and in its own slot of the
  // per-rank counts: with replicas a rank runs others' experts too); the sum is every
  // expert's and every rank's, on every rank.
  const Model& m = *model_;
  const uint32_t X = m.hparams().n_expert, W = m.world(), L = m.n_local_layers();
  LATTICE_RETURN_IF_ERROR(group_->all_reduce_sum(a2a_tokens_.data(), a2a_tokens_.size()));
  for (uint32_t l = 0; l < L; ++l) {
    if (!m.layers()[l].moe()) continue;
    for (uint32_t e = 0; e < X; ++e) load_.tokens[size_t{l} * X + e] += static_cast<uint64_t>(a2a_tokens_[size_t{l} * X + e]);
    uint64_t busiest = 0;
    for (uint32_t r = 0; r < W; ++r) {
      const auto rows = static_cast<uint64_t>(a2a_tokens_[size_t{L} * X + size_t{l} * W + r]);
      load_.rank_rows[r] += rows, busiest = std::max(busiest, rows);
    }
    load_.busiest_rows += busiest;
  }
  return Status::Ok();
}

Status Forward::step_a2a(std::span<const StepItem> items, uint32_t R) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const size_t E = hp.n_embd;
  const int W = group_->size();
  ++paths_.a2a_steps, paths_.a2a_rows += R;
  LATTICE_RETURN_IF_ERROR(embed(items));
  a2a_slices_.resize(W);
  for (int q = 0; q < W; ++q) {
    const uint32_t base = R / W, rem = R % W, b = q * base + std::min<uint32_t>(q, rem);
    a2a_slices_[q] = {b, b + base + (uint32_t(q) < rem ? 1 : 0)};
  }
  const Range my = a2a_slices_[group_->rank()];
  const uint32_t n = my.size(), P = a2a_slices_[0].size();
  a2a_xs_.assign(size_t{P} * E, 0.0f);
  a2a_pad_.assign(size_t{P} * W * E, 0.0f);
  a2a_tokens_.assign(size_t{m.n_local_layers()} * (hp.n_expert + W), 0.0f);
  float* x = x_.get() + size_t{my.begin} * E;
  float* xs = a2a_xs_.data();
  for (uint32_t l = 0; l < m.n_local_layers(); ++l) {
    const LayerWeights& L = m.layers()[l];
    for (uint32_t r = 0; r < n; ++r) ops::rmsnorm(xs + r * E, x + r * E, L.attn_norm, E, hp.rms_eps);
    LATTICE_RETURN_IF_ERROR(gather_rows(R));
    attention_block(l, items, R);
    LATTICE_RETURN_IF_ERROR(scatter_sum_rows(R));
    for (uint32_t r = 0; r < n; ++r) ops::add(x + r * E, xs + r * E, E);

    for (uint32_t r = 0; r < n; ++r) ops::rmsnorm(xs + r * E, x + r * E, L.ffn_norm, E, hp.rms_eps);
    if (L.moe()) {
      LATTICE_RETURN_IF_ERROR(moe_a2a(m.layer_begin() + l, L, n));
    } else {
      LATTICE_RETURN_IF_ERROR(gather_rows(R));
      dense_ffn(L, R);
      LATTICE_RETURN_IF_ERROR(scatter_sum_rows(R));
    }
    for (uint32_t r = 0; r < n; ++r) ops::add(x + r * E, xs + r * E, E);
  }
  LATTICE_RETURN_IF_ERROR(count_load_a2a());
  LATTICE_RETURN_IF_ERROR(head_rows_a2a(items, R));
  head(items);
  return Status::Ok();
}

}  // namespace lattice::engine
