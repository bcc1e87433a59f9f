// The forward pass: one implementation for one node and for N ranks, for one sequence and for
// a batch of them.
//
// A Forward runs the layers a Model shard holds (model/model.h) over a Group (group.h): on a
// group of one its collectives are no-ops; over N ranks it sums the attention and FFN partial
// products (two all_reduces of n_embd floats per token per layer) and agrees on next tokens
// through one all_gather. Expert parallel (Model::expert_parallel), attention is split as in
// tensor parallel and each rank runs only the chosen experts it owns, over their rows; the
// FFN's all_reduce then sums the experts' outputs: still two collectives a layer. A pipeline stage is a shard over a layer range; its items take
// hidden states in and give hidden states out.
//
// A step carries several items, each a Sequence (its own KV cache and position) with one or
// more tokens: B decoding sequences of one token each, plus, say, a chunk of a new prompt.
// All rows of a step go through every matrix product together, so each weight is read once
// per step, as a prefill of the same number of tokens reads it. Attention runs per item over
// that item's own cache.
//
// Thread safety: a Forward and its Sequences are used by one thread (the rank's). It owns its
// ThreadPool. The Model and the Group must outlive it; a Sequence must not outlive its
// Forward. Calls block until the CPU work and the collectives are done; collectives are
// bounded by the Group's deadlines. Every rank of the group must make the same calls with
// the same items (same sequences, same token counts) in the same order.
#pragma once

#include <cstdint>
#include <climits>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/ops/float_buffer.h"
#include "lattice/engine/ops/thread_pool.h"
#include "lattice/engine/runtime/group.h"
#include "lattice/engine/runtime/kv_cache.h"
#include "lattice/engine/sampler/sampler.h"

namespace lattice::engine {

class Forward;
class Sequence;
struct StepItem;

// What a generation loop needs from the model: sequences, a step over several of them, and
// the agreed next tokens. Forward implements it on one node and tensor-parallel ranks;
// parallel::PpSession over pipeline stages.
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual Result<std::unique_ptr<Sequence>> new_sequence(uint32_t n_ctx) const = 0;
  virtual Status step(std::span<const StepItem> items) = 0;
  // The next token of each item of the last step, the same on every rank (null: greedy).
  virtual Result<std::vector<int32_t>> choose(std::span<Sampler* const> samplers) = 0;
  virtual uint32_t max_items() const = 0;
  virtual uint32_t max_rows() const = 0;  // rows (tokens over all items) per step
  virtual const Model& model() const = 0;
};

// One sequence on this rank: the keys and values of its local layers and KV heads, and how
// many positions it holds.
class Sequence {
 public:
  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return cache_.n_ctx(); }
  uint32_t n_free() const { return cache_.n_ctx() - n_past_; }
  // Forgets the positions from n on (n <= n_past): a new prompt, or a shared prefix kept.
  void truncate(uint32_t n) { n_past_ = n < n_past_ ? n : n_past_; }
  void reset() { n_past_ = 0; }
  size_t kv_bytes() const { return cache_.n_bytes(); }

 private:
  friend class Forward;
  Sequence() = default;
  const Forward* owner_ = nullptr;
  KvCache cache_;
  uint32_t n_past_ = 0;
};

// One item of a step.
struct StepItem {
  Sequence* seq = nullptr;
  std::span<const int32_t> tokens;  // the input tokens (first stage), or empty with x_in
  const float* x_in = nullptr;      // or n_in x n_embd hidden states (a later pipeline stage)
  uint32_t n_in = 0;                // rows of x_in
  float* x_out = nullptr;           // a shard without the head: the rows' hidden states out
  // The head shard: every row's logits (rows x local vocabulary), not only the last one's.
  float* all_logits = nullptr;
  uint32_t rows() const { return x_in ? n_in : static_cast<uint32_t>(tokens.size()); }
};

// Mixture of experts: how the steps so far used the experts. Every rank routes every row the
// same way, so every rank holds the same figures, for every rank.
struct ExpertLoad {
  std::vector<uint64_t> tokens;     // rows routed to each expert, [local layer * n_expert + e]
  std::vector<uint64_t> rank_rows;  // expert parallel: rows each rank's experts ran, per rank
  uint64_t busiest_rows = 0;        // expert parallel: the busiest rank's rows, summed per (layer, step)
  // Expert parallel: the mean rank's rows over the busiest's, per (layer, step) summed; 1 is a
  // perfect split, and a step takes about 1/balance of a perfect split's expert time.
  double balance() const {
    uint64_t sum = 0;
    for (uint64_t r : rank_rows) sum += r;
    return busiest_rows && !rank_rows.empty() ? double(sum) / rank_rows.size() / double(busiest_rows) : 1.0;
  }
};

// Expert parallel, how a step's rows reach the experts (forward_a2a.cc):
//   kReduce    every rank holds every row: attention tensor-parallel, each rank runs its
//              experts over every row that chose them, two all-reduces a layer sum the
//              partial outputs (the decode path, and prefill by default);
//   kAllToAll  the rows split over the ranks in contiguous slices: attention still
//              tensor-parallel over all rows (an all-gather of the normed slices before it, a
//              reduce-scatter back to the slices after it), then each rank routes its own
//              rows and sends each to the ranks that run its experts (an all-to-all), they run
//              them and send the weighted outputs back (a second one);
//   kAuto      kAllToAll for steps of at least ForwardOptions::a2a_min_rows rows, else kReduce.
// Both give the same tokens; they differ in what moves and in what every rank repeats.
enum class EpPrefill : uint8_t { kAuto, kReduce, kAllToAll };
std::string_view to_string(EpPrefill p);
// The rule in words, for logs and plans: "reduce", "all-to-all", or with kAuto the threshold
// (or that the measurement never chose all-to-all).
std::string describe(EpPrefill p, uint32_t a2a_min_rows);

// Expert parallel: how many steps (and rows) took each path.
struct EpPathStats {
  uint64_t reduce_steps = 0, reduce_rows = 0, a2a_steps = 0, a2a_rows = 0;
};

struct ForwardOptions {
  uint32_t n_threads = 1;  // threads of the pool (counting the caller)
  uint32_t n_batch = 256;  // rows (tokens, over all items) per step: bounds the scratch buffers
  uint32_t max_items = 1;  // sequences per step
  uint32_t n_ctx = 0;      // the largest context of a sequence; 0: the model's, at most 4096
  EpPrefill ep_prefill = EpPrefill::kAuto;
  // kAuto: the all-to-all path from steps of this many rows (0: never); kEpA2aMinRows: the
  // cost model's threshold for this model and world (ep_prefill_cost), which
  // bench/ep_prefill.sh checks against measurements (docs/BENCHMARKS.md).
  uint32_t a2a_min_rows = kEpA2aMinRows;
  static constexpr uint32_t kEpA2aMinRows = UINT32_MAX;
};

// The cost model of the two expert-parallel paths for a shard (its world, placement, experts a
// token, shared experts): floats a rank sends per row of a step, each path (all-reduce,
// all-gather and reduce-scatter at their bandwidth-optimal 2(W-1)/W of the buffer; a routed
// row reaches rank q with the chance that one of its K experts, drawn uniformly, is there),
// the collectives a step makes beyond the reduce path's, and from that the rows from which
// all-to-all moves less in total, taking one collective call as worth kCallFloats floats (0:
// never, when all-to-all does not save bytes per row).
struct EpPrefillCost {
  double reduce_floats_per_row = 0, a2a_floats_per_row = 0;
  uint32_t extra_calls = 0;
  uint32_t min_rows = 0;
  static constexpr double kCallFloats = 16384;  // ~30 us at ~2 GB/s: a call's latency in bytes
};
EpPrefillCost ep_prefill_cost(const Model& model);
// The same for a whole model over `world` ranks, owner(layer, e) the rank of each expert and
// holds_shared(rank) whether it holds shared-expert columns (plan, before any shard is bound).
EpPrefillCost ep_prefill_cost(const Hparams& hp, int world, const std::function<int(uint32_t, uint32_t)>& owner,
                              const std::function<bool(int)>& holds_shared);

class Forward final : public Stepper {
 public:
  // kInvalidArgument for zero threads/batch/items, a context far beyond the model's or a
  // group that does not match the shard (size, rank); kUnavailable for a value head size that
  // differs from the key head size; kResourceExhausted if the buffers cannot be allocated.
  static Result<std::unique_ptr<Forward>> create(const Model& model, Group& group, const ForwardOptions& options);
  ~Forward();

  // A new, empty sequence holding up to n_ctx positions (0: options.n_ctx).
  Result<std::unique_ptr<Sequence>> new_sequence(uint32_t n_ctx = 0) const override;

  // Runs the items through this shard's layers and appends their rows to their sequences.
  // kInvalidArgument (nothing appended) for no items, more than max_items or n_batch rows,
  // an item without rows, a sequence twice, a sequence of another Forward, a token outside
  // the vocabulary, or rows that do not fit a sequence's context. Errors of the collectives
  // (kPeerLost, kTimeout) leave the sequences in an undefined state: reset them.
  Status step(std::span<const StepItem> items) override;

  // After a step on the head shard: item i's last-row logits over this rank's vocabulary
  // slice (model().vocab()).
  std::span<const float> logits(size_t item) const;

  // Collective (every rank calls with the same arguments): the next token of each item of
  // the last step, the same on every rank. samplers[i] null means greedy (highest logit,
  // lowest id on ties). A Sampler sees the whole vocabulary on one rank; over N ranks it sees
  // the union of every rank's top_k candidates (top_k <= 0: 64), which is exact for top-k
  // sampling and greedy. Does not call accept().
  Result<std::vector<int32_t>> choose(std::span<Sampler* const> samplers) override;
  Result<int32_t> argmax(size_t item = 0);
  Result<int32_t> sample(Sampler& sampler, size_t item = 0);
  // Item i's full last-row logits on every rank (an all_gather: for tests and dumps).
  Status gather_logits(size_t item, std::vector<float>* out);

  // Called after every layer with the hidden states of the step's rows (rows x n_embd), for
  // layer-by-layer tests. Empty by default (no cost).
  using LayerObserver = std::function<void(uint32_t layer, std::span<const float> hidden)>;
  void set_layer_observer(LayerObserver fn) { observer_ = std::move(fn); }

  uint32_t max_items() const override { return opt_.max_items; }
  uint32_t max_rows() const override { return opt_.n_batch; }
  const Model& model() const override { return *model_; }
  Group& group() { return *group_; }
  const ForwardOptions& options() const { return opt_; }
  ThreadPool& pool() { return *pool_; }
  size_t scratch_bytes() const { return scratch_floats_ * sizeof(float); }
  // Weight bytes the steps so far streamed: every matrix once a step (each chosen expert once),
  // plus the embedding rows looked up. Per decoded token on one sequence: what decode costs.
  uint64_t weight_bytes_read() const { return bytes_read_; }
  const ExpertLoad& expert_load() const { return load_; }
  const EpPathStats& ep_paths() const { return paths_; }
  // The path a step of these items takes (the same on every rank: a function of the items'
  // row count, the options, the shard and the group); kReduce wherever kAllToAll does not
  // apply (not expert parallel, one rank, a pipeline stage, a partial mesh, fewer rows than
  // ranks).
  EpPrefill ep_prefill_path(std::span<const StepItem> items, uint32_t rows) const;

 private:
  Forward() = default;
  Status check(std::span<const StepItem> items, uint32_t* total_rows) const;
  void attention(uint32_t layer, std::span<const StepItem> items);
  // The mixture-of-experts FFN of one layer over the step's R rows: xb in, xb out (this rank's
  // partial sum over its columns of the chosen experts).
  void moe_ffn(uint32_t layer, const LayerWeights& L, uint32_t R);
  // The router over R normed rows at xn: fn(row, ids, weights) for each row's chosen experts.
  void route(const LayerWeights& L, const float* xn, uint32_t R,
             const std::function<void(uint32_t row, const uint32_t* ids, const float* w)>& fn);
  // The experts this rank runs (runner_) over expert_rows_ of the R rows in xb, and the shared
  // experts' columns over all of them, summed into acc (R x n_embd).
  void run_experts(const LayerWeights& L, uint32_t R);
  Status embed(std::span<const StepItem> items);                       // x and the RoPE angles
  void attention_block(uint32_t l, std::span<const StepItem> items, uint32_t R);  // xb normed in, partial out
  void dense_ffn(const LayerWeights& L, uint32_t R);                   // xb normed in, partial out
  void head(std::span<const StepItem> items);                          // logits or x_out; n_past moves
  // The all-to-all path (forward_a2a.cc).
  Status step_a2a(std::span<const StepItem> items, uint32_t R);
  Status gather_rows(uint32_t R);      // every slice's rows of a2a_xs_ -> xb (R rows)
  Status scatter_sum_rows(uint32_t R); // xb's partial rows, summed -> this slice's rows of a2a_xs_
  Status moe_a2a(uint32_t layer, const LayerWeights& L, uint32_t n);  // a2a_xs_ normed in, out
  Status head_rows_a2a(std::span<const StepItem> items, uint32_t R);  // the head's rows on every rank
  Status count_load_a2a();
  void count_expert_load(uint32_t layer);
  // Multi-head latent attention of one layer (attention_mla.cc): xb (normed rows) in, xb out
  // (the attention output projected back to n_embd); appends the rows' latents to the caches.
  void mla_attention(uint32_t layer, std::span<const StepItem> items, uint32_t R);
  // The shared experts of a layer over xb, added to acc (attention_mla.cc).
  void shared_experts(const LayerWeights& L, uint32_t R, float* acc);

  const Model* model_ = nullptr;
  Group* group_ = nullptr;
  ForwardOptions opt_;
  std::unique_ptr<ThreadPool> pool_;
  // Activations, n_batch rows each.
  FloatBuffer x_, xb_, q_, k_, v_, att_, gate_, up_, scores_, cos_sin_, inv_freq_;
  FloatBuffer router_, xe_, ye_, acc_;  // mixture of experts: router logits, gathered rows, sums
  std::vector<std::vector<std::pair<uint32_t, float>>> expert_rows_;  // per expert: (row, weight)
  std::vector<uint32_t> order_;
  FloatBuffer route_sel_;                           // router selection scores and group scores
  FloatBuffer mla_qa_, mla_kv_, mla_scratch_;       // MLA: q_a rows, latent rows, per-thread scratch
  size_t mla_scratch_stride_ = 0;                   // floats of mla_scratch_ per thread
  std::vector<std::unique_ptr<ThreadPool>> serial_;  // one single-thread pool per pool thread
  size_t scratch_floats_ = 0;
  uint64_t bytes_read_ = 0;
  ExpertLoad load_;
  std::vector<uint64_t> rank_rows_now_;
  std::vector<int> runner_;  // expert parallel: the rank that runs each expert this layer step
  EpPathStats paths_;
  // All-to-all path: slices, this slice's rows, padded blocks, dispatch and combine buffers,
  // the slice's routes, and its experts' rows per (local layer, expert) until the step's end.
  std::vector<Range> a2a_slices_;
  std::vector<float> a2a_xs_, a2a_pad_, a2a_send_, a2a_recv_, a2a_back_, a2a_w_, a2a_tokens_;
  std::vector<uint32_t> a2a_ids_;
  std::vector<std::vector<uint32_t>> a2a_rows_to_;
  std::vector<int> a2a_runner_;  // per routed (row, k) of this slice: the rank that runs it
  std::vector<float> logits_;        // max_items x local vocabulary
  size_t n_logit_items_ = 0;         // items of the last step with logits
  std::vector<uint32_t> item_row0_;  // first row of each item in the last step
  std::vector<float> gather_in_, gather_out_, full_;
  LayerObserver observer_;
};

}  // namespace lattice::engine
