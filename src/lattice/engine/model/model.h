// A decoder model bound to one rank's shard of an open GGUF file (model/shard.h): the
// hyper-parameters of the whole model plus, for every weight this rank owns, a view of its
// bytes in the read-only mapping (or a packed copy of just that slice). One node binds the
// default Shard, rank 0 of 1 over every layer: the whole model, through the same code.
//
// Tensor-parallel layout (every rank keeps the full residual stream, n_embd floats a token):
//   attention  split by KV heads: rank r owns KV heads [kv0, kv1) and their query heads:
//              row ranges of wq/wk/wv, the matching columns of wo; multi-head latent
//              attention by query heads [h0, h1): wq_b (or wq) rows, k_b / v_b of those
//              heads, wo columns, with the latent projections and norms on every rank;
//   FFN        gate/up rows [f0, f1) and the same columns of w_down (the leading dense
//              blocks and the shared experts of a mixture of experts: their own ranges);
//   output     vocabulary rows [v0, v1) of the output matrix;
//   experts    tensor parallel: the FFN columns [f0, f1) of every expert; expert parallel
//              (Shard::expert_parallel): the experts this rank owns, whole, and nothing of
//              the others (their Weights are empty and their bytes never touched).
// Row ranges are views at an offset; column ranges are strided views (row stride = the full
// row), and when packing is on only the shard is copied into the kernels' layout. A rank
// never reads the whole model. Pipeline stages bind a layer range (Shard::layer_begin/end).
//
// Thread safety: immutable after load; any number of sequences may read it concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/model/shard.h"
#include "lattice/engine/quant/matmul.h"

namespace lattice::engine {

// The weights of one block, as this rank holds them.
struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  Weight wq, wk, wv;                 // local rows: [local q_dim x n_embd], [local kv_dim x n_embd] (x2)
  Weight wo;                         // [n_embd x local attention columns]
  const float* bq = nullptr;         // optional biases, local slices
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;     // [head_dim] (qk_norm architectures)
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;   // [n_embd]
  Weight w_gate, w_up;               // local rows [local ff x n_embd]
  Weight w_down;                     // [n_embd x local ff columns]
  // Mixture of experts (hparams().moe()): the router [n_expert x n_embd] (every rank holds all
  // of it), and per expert the same slices as the dense FFN's, of the expert's own matrices.
  Weight router;
  std::vector<Weight> gate_exps, up_exps, down_exps;
  const float* exp_probs_b = nullptr;       // [n_expert] selection bias (optional)
  Weight gate_shexp, up_shexp, down_shexp;  // shared experts: [n_ff_exp * n_shared x n_embd] (down transposed)
  // Multi-head latent attention (AttentionKind::kMla): wq_a [q_lora x n_embd] + q_a_norm +
  // wq_b [n_head * k_dim x q_lora], or wq [n_head * k_dim x n_embd] when q_lora_rank is 0;
  // wkv_a [kv_lora + rope x n_embd] + kv_a_norm [kv_lora]; per head k_b [kv_lora x nope]
  // (absorbs a query's nope part into latent space) and v_b [v_dim x kv_lora] (expands the
  // attended latent); wo [n_embd x n_head * v_dim]. Over N ranks: this rank's heads only
  // (heads()): wq_b / wq rows, k_b / v_b per local head, wo columns; wq_a, wkv_a whole.
  Weight wq_a, wq_b, wkv_a;
  const float* q_a_norm = nullptr;
  const float* kv_a_norm = nullptr;
  std::vector<Weight> k_b, v_b;
  bool moe() const { return router.n_rows() > 0; }
};

struct LoadOptions {
  OpenOptions open;
  // Repack Q4_0/Q8_0 matrices (and K-quants with AVX-512) into the interleaved layout of the
  // fast kernels (a copy of this rank's slice; the mapped pages of the originals are then
  // released). false: every matrix is used in place from the mapping.
  bool pack = true;
  Shard shard;  // default: the whole model (rank 0 of 1)
};

class Model {
 public:
  // Opens `path` and binds this rank's weights. Errors name the file, tensor or key:
  // kUnavailable for an unsupported architecture ("architecture 'gemma3' is not supported
  // (supported: llama, qwen2, qwen3, qwen3moe, deepseek2)") or weight type, kNotFound for a missing tensor,
  // kCorrupt for a wrong shape or a count the file cannot hold, kInvalidArgument for a shard
  // that is not one of the model (rank outside the world, layers outside the model).
  static Result<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& options = {});
  // Binds an already-open file (takes ownership).
  static Result<std::unique_ptr<Model>> bind(std::unique_ptr<GgufFile> file, const LoadOptions& options = {});

  const ArchInfo& arch() const { return *arch_; }
  const Hparams& hparams() const { return hp_; }
  const GgufFile& file() const { return *file_; }

  // The shard.
  int rank() const { return shard_.rank; }
  int world() const { return shard_.world; }
  const ShardLayout& layout() const { return layout_; }
  Range kv_heads() const { return layout_.kv_heads[shard_.rank]; }
  Range heads() const { return layout_.heads[shard_.rank]; }  // query heads (MLA: what is split)
  Range ff() const { return layout_.ff[shard_.rank]; }
  Range vocab() const { return layout_.vocab[shard_.rank]; }
  uint32_t layer_begin() const { return layer_begin_; }
  uint32_t layer_end() const { return layer_end_; }
  uint32_t n_local_layers() const { return layer_end_ - layer_begin_; }
  bool has_head() const { return layer_end_ == hp_.n_layer; }  // output norm + matrix bound
  bool whole() const { return shard_.world == 1 && layer_begin_ == 0 && has_head(); }
  // Expert parallel (Shard::expert_parallel): the rank owning expert e of (global) layer l;
  // this rank binds exactly the experts it owns, whole. Tensor parallel: every rank holds a
  // column slice of every expert, and expert_owner() is -1.
  bool expert_parallel() const { return shard_.expert_parallel && hp_.moe() && shard_.world > 1; }
  int expert_owner(uint32_t layer, uint32_t e) const {
    return expert_parallel() ? expert_owner_[size_t{layer} * hp_.n_expert + e] : -1;
  }
  const std::vector<int>& expert_owners() const { return expert_owner_; }  // [layer * n_expert + e]
  // Expert parallel: the ranks holding expert e of layer l (bit r: rank r), its owner and the
  // ranks with a replica (Shard::expert_spare).
  uint64_t expert_holders(uint32_t layer, uint32_t e) const {
    return expert_parallel() ? expert_holders_[size_t{layer} * hp_.n_expert + e] : 0;
  }
  uint32_t n_owned_experts() const;  // over this rank's layers (every expert of every layer when not EP)

  const TensorInfo& tok_embd() const { return *tok_embd_; }  // rows read in place for lookups
  const float* output_norm() const { return output_norm_; }
  const Weight& output() const { return output_; }  // local vocabulary rows (the embedding's bytes when tied)
  bool tied_output() const { return tied_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }  // layers [layer_begin, layer_end)
  const float* rope_freq_factors() const { return rope_freqs_; }      // [n_rot/2] or null

  uint64_t n_params() const;
  uint64_t weight_bytes() const;  // bytes of all tensors in the file(s): the whole model
  uint64_t model_bytes() const { return weight_bytes(); }
  uint64_t shard_bytes() const;   // bytes of weights this rank streams per token
  // "Q4_0", or the most common matrix type followed by " mix" when types differ.
  std::string type_name() const;

  // Reads every page of the weights used in place once, so the first tokens do not pay
  // page faults (progress(done_bytes, total_bytes) is called now and then).
  void prefault(const std::function<void(uint64_t, uint64_t)>& progress = {}) const;

 private:
  Model() = default;
  Status bind_all(const LoadOptions& options);
  Result<const TensorInfo*> matrix_info(const std::string& name, uint64_t n_in, uint64_t n_out);
  Result<Weight> rows(const TensorInfo& t, Range r, bool pack);
  Result<Weight> cols(const TensorInfo& t, Range c, bool pack);
  // Expert e of a 3-D [n_in, n_out, n_expert] tensor, as a 2-D tensor of its own.
  TensorInfo expert_slice(const TensorInfo& t, uint32_t e) const;
  Status bind_experts(LayerWeights& L, uint32_t layer, bool pack);
  Status set_expert_owners();
  Status bind_mla(LayerWeights& L, uint32_t layer, bool pack);  // model_mla.cc
  Status bind_shared_experts(LayerWeights& L, uint32_t layer, bool pack);  // model_mla.cc
  Result<const float*> vec(const std::string& name, uint64_t n, bool required);

  std::unique_ptr<GgufFile> file_;
  const ArchInfo* arch_ = nullptr;
  Hparams hp_;
  Shard shard_;
  ShardLayout layout_;
  uint32_t layer_begin_ = 0, layer_end_ = 0;
  const TensorInfo* tok_embd_ = nullptr;
  Weight output_;
  bool tied_ = false;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<int> expert_owner_;         // expert parallel: [layer * n_expert + e] -> rank
  std::vector<uint64_t> expert_holders_;  // expert parallel: [layer * n_expert + e] -> rank bits
  std::vector<std::unique_ptr<float[]>> owned_;  // vectors expanded from f16/bf16
};

}  // namespace lattice::engine
