// Tensor parallelism: one decoder model split across the ranks of a coll::Communicator.
//
// Layout (every rank keeps the full residual stream x, n_embd floats per token):
//   attention  split by KV heads: rank r owns KV heads [kv0, kv1) and their query heads, so
//              it computes q/k/v for those heads only (row ranges of wq/wk/wv), keeps their
//              KV cache, attends locally, and multiplies by its columns of wo; the partial
//              products are summed with one all_reduce.
//   FFN        gate/up rows [f0, f1) and the same columns of w_down; one all_reduce.
//   output     vocabulary rows [v0, v1) of the output matrix; the next token is agreed on
//              through an all_gather of each rank's best candidates (greedy: the maximum,
//              lowest id on ties; sampling: the top-k candidates of every rank merged, then
//              the same seeded Sampler on every rank).
// So the decode path does two all_reduces of n_embd floats per layer plus one small
// all_gather per token. Splits may be uneven (3, 5 ranks; weights for slower nodes); a rank
// may own no KV heads (it then contributes zeros to the attention sum).
//
// Memory: each rank maps the GGUF file (read-only, MAP_PRIVATE) and touches only its own
// row/column ranges: row ranges are views at an offset; the column ranges of wo and w_down
// are strided views (row stride = the full row), and when packing is on only the shard is
// copied into the kernels' layout. A rank never reads the whole model.
//
// Thread safety: a TpSession is used by one thread (the rank's), like its Communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lattice/coll/comm.h"
#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/runtime/kv_cache.h"
#include "lattice/engine/runtime/thread_pool.h"
#include "lattice/engine/sampler/sampler.h"

namespace lattice::engine::parallel {

struct Range {
  uint32_t begin = 0, end = 0;
  uint32_t size() const { return end - begin; }
};

// Splits n_units into world contiguous ranges proportional to `weights` (empty: equal),
// largest remainders first, earlier ranks winning ties. Ranges may be empty.
std::vector<Range> split_units(uint32_t n_units, int world, std::span<const double> weights = {});

struct TpLayout {
  std::vector<Range> kv_heads;  // per rank, in KV heads
  std::vector<Range> ff;        // per rank, in n_ff columns (multiples of the granularity)
  std::vector<Range> vocab;     // per rank, in tokens
  uint32_t ff_granularity = 1;
};

// The layout for `world` ranks: kInvalidArgument for world < 1, kUnavailable when the
// weight types' block sizes cannot be split on head / FFN boundaries.
Result<TpLayout> make_tp_layout(const Hparams& hp, uint32_t ff_block_elems, uint32_t wo_block_elems, int world,
                                std::span<const double> weights = {});

struct TpLoadOptions {
  OpenOptions open;
  bool pack = true;              // repack this rank's shard for the fast kernels
  std::vector<double> weights;   // relative share per rank (empty: equal)
  // Pipeline stages: bind only layers [layer_begin, layer_end) (layer_end 0: to the last);
  // the output norm and matrix are bound only by the stage holding the last layer.
  uint32_t layer_begin = 0, layer_end = 0;
};

// The shard of one rank: hyper-parameters of the whole model, weights of this rank only.
class TpModel {
 public:
  static Result<std::unique_ptr<TpModel>> load(const std::string& path, int rank, int world,
                                                const TpLoadOptions& options = {});
  static Result<std::unique_ptr<TpModel>> bind(std::unique_ptr<GgufFile> file, int rank, int world,
                                                const TpLoadOptions& options = {});

  struct Layer {
    const float* attn_norm = nullptr;
    Weight wq, wk, wv, wo;           // wq/wk/wv: local rows; wo: [n_embd x local attn cols]
    const float* bq = nullptr;       // local slices
    const float* bk = nullptr;
    const float* bv = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    const float* ffn_norm = nullptr;
    Weight w_gate, w_up, w_down;     // gate/up: local rows; down: [n_embd x local ff cols]
  };

  int rank() const { return rank_; }
  int world() const { return world_; }
  const Hparams& hparams() const { return hp_; }
  const ArchInfo& arch() const { return *arch_; }
  const GgufFile& file() const { return *file_; }
  const TpLayout& layout() const { return layout_; }
  Range kv_heads() const { return layout_.kv_heads[rank_]; }
  Range ff() const { return layout_.ff[rank_]; }
  Range vocab() const { return layout_.vocab[rank_]; }
  const TensorInfo& tok_embd() const { return *tok_embd_; }
  const float* output_norm() const { return output_norm_; }
  const Weight& output() const { return output_; }  // local vocabulary rows
  const std::vector<Layer>& layers() const { return layers_; }  // layers [layer_begin, layer_end)
  uint32_t layer_begin() const { return layer_begin_; }
  uint32_t layer_end() const { return layer_end_; }
  bool has_head() const { return layer_end_ == hp_.n_layer; }  // output norm + matrix bound
  const float* rope_freq_factors() const { return rope_freqs_; }
  // Bytes of weights this rank streams per token (its shard), and of the whole model.
  uint64_t shard_bytes() const;
  uint64_t model_bytes() const { return file_->total_tensor_bytes(); }

 private:
  TpModel() = default;
  Status bind_all(const TpLoadOptions& options);
  Result<const TensorInfo*> matrix_info(const std::string& name, uint64_t n_in, uint64_t n_out);
  Result<Weight> rows(const TensorInfo& t, Range r, bool pack);
  Result<Weight> cols(const TensorInfo& t, Range c, bool pack);
  Result<const float*> vec(const std::string& name, uint64_t n, bool required);

  std::unique_ptr<GgufFile> file_;
  const ArchInfo* arch_ = nullptr;
  Hparams hp_;
  int rank_ = 0, world_ = 1;
  uint32_t layer_begin_ = 0, layer_end_ = 0;
  TpLayout layout_;
  const TensorInfo* tok_embd_ = nullptr;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  Weight output_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<float[]>> owned_;
};

// What the collectives cost this rank so far.
struct CollStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;     // payload bytes this rank handed to collectives (its contribution)
  double seconds = 0;     // wall time inside collective calls (waiting for peers included)
};

struct TpSessionOptions {
  uint32_t n_ctx = 0;      // 0: the model's training context, at most 4096
  uint32_t n_threads = 1;
  uint32_t n_batch = 64;   // tokens per prefill step
  std::chrono::milliseconds coll_timeout{30000};
};

class TpSession {
 public:
  // `comm` may be null when the model's TP world is 1 (a pipeline stage of one rank).
  static Result<std::unique_ptr<TpSession>> create(const TpModel& model, coll::Communicator* comm,
                                                    const TpSessionOptions& options = {});
  ~TpSession();

  // Same contract as Session: every rank calls these with the same tokens, in the same order.
  Status prefill(std::span<const int32_t> tokens);
  Status decode(int32_t token);
  // One step of a pipeline stage over the model's layer range, n <= n_batch tokens: the input
  // is the tokens (first stage) or x_in (n x n_embd hidden states); a stage with the head
  // leaves the last token's logits, any other writes its hidden states to x_out.
  Status forward_stage(const int32_t* tokens, const float* x_in, uint32_t n, float* x_out);

  // This rank's slice of the last token's logits (vocab().size() floats).
  std::span<const float> local_logits() const { return {logits_.data(), logits_.size()}; }
  // The full logits, assembled on every rank (an all_gather: for tests and --json dumps).
  Status gather_logits(std::vector<float>* out);
  // The greedy next token, identical on every rank (highest logit, lowest id on ties).
  Result<int32_t> argmax();
  // Samples the next token with `sampler` over the union of every rank's top_k candidates
  // (top_k <= 0: 64); every rank gets the same token if its sampler has the same state.
  Result<int32_t> sample(Sampler& sampler);

  uint32_t n_past() const { return n_past_; }
  void reset() { n_past_ = 0; }
  const CollStats& coll_stats() const { return stats_; }
  const TpModel& model() const { return *model_; }

 private:
  struct Impl;
  TpSession() = default;
  Status forward(const int32_t* tokens, uint32_t n) { return forward_stage(tokens, nullptr, n, nullptr); }
  Status all_reduce_sum(float* buf, size_t count);
  Status all_gather_f32(const float* in, float* out, size_t count);

  const TpModel* model_ = nullptr;
  coll::Communicator* comm_ = nullptr;
  TpSessionOptions opt_;
  std::unique_ptr<ThreadPool> pool_;
  KvCache cache_;
  uint32_t n_past_ = 0;
  std::vector<float> logits_;
  std::unique_ptr<Impl> impl_;
  CollStats stats_;
};

}  // namespace lattice::engine::parallel
