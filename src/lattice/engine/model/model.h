// A decoder model bound to an open GGUF file: hyper-parameters plus, for every weight, a
// view of its bytes in the read-only mapping. Matrices are never copied; only small f32
// vectors (norm weights, biases) stored as f16/bf16 are expanded once at load.
//
// Thread safety: immutable after load; any number of Sessions may read it concurrently.
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
#include "lattice/engine/quant/matmul.h"

namespace lattice::engine {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  Weight wq, wk, wv, wo;             // rows x cols: [q_dim x n_embd], [kv_dim x n_embd], [v_dim x n_embd], [n_embd x attn_out]
  const float* bq = nullptr;         // optional biases (required for qwen2)
  const float* bk = nullptr;
  const float* bv = nullptr;
  const float* q_norm = nullptr;     // [head_dim], qwen3
  const float* k_norm = nullptr;
  const float* ffn_norm = nullptr;   // [n_embd]
  Weight w_gate, w_up, w_down;       // [n_ff x n_embd], [n_ff x n_embd], [n_embd x n_ff]
};

struct LoadOptions {
  OpenOptions open;
  // Repack Q4_0/Q8_0 matrices into the interleaved layout of the fast kernels (a copy; the
  // mapped pages of the originals are then released, so resident memory stays about one
  // model). false: every matrix is used in place from the mapping.
  bool pack = true;
};

class Model {
 public:
  // Opens `path` and binds the weights. Errors name the file, tensor or key: kUnavailable for
  // an unsupported architecture ("architecture 'gemma3' is not supported (supported: llama,
  // qwen2, qwen3)") or weight type, kNotFound for a missing tensor, kCorrupt for a wrong shape.
  static Result<std::unique_ptr<Model>> load(const std::string& path, const LoadOptions& options = {});
  // Binds an already-open file (takes ownership).
  static Result<std::unique_ptr<Model>> bind(std::unique_ptr<GgufFile> file, const LoadOptions& options = {});

  const ArchInfo& arch() const { return *arch_; }
  const Hparams& hparams() const { return hp_; }
  const GgufFile& file() const { return *file_; }

  const TensorInfo& tok_embd() const { return *tok_embd_; }  // rows read in place for lookups
  const float* output_norm() const { return output_norm_; }
  const Weight& output() const { return output_; }  // the embedding's bytes when tied
  bool tied_output() const { return tied_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const float* rope_freq_factors() const { return rope_freqs_; }  // [n_rot/2] or null

  uint64_t n_params() const;
  uint64_t weight_bytes() const;  // bytes of all tensors in the file(s)
  // "Q4_0", or the most common matrix type followed by " mix" when types differ.
  std::string type_name() const;

  // Reads every page of the weights used in place once, so the first tokens do not pay
  // page faults (progress(done_bytes, total_bytes) is called now and then).
  void prefault(const std::function<void(uint64_t, uint64_t)>& progress = {}) const;

 private:
  Model() = default;
  Status bind_all(const LoadOptions& options);
  Result<Weight> matrix(const std::string& name, uint64_t n_in, uint64_t n_out, bool required, bool pack);
  Result<const float*> vec(const std::string& name, uint64_t n, bool required);

  std::unique_ptr<GgufFile> file_;
  const ArchInfo* arch_ = nullptr;
  Hparams hp_;
  const TensorInfo* tok_embd_ = nullptr;
  Weight output_;
  bool tied_ = false;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<std::unique_ptr<float[]>> owned_;  // vectors expanded from f16/bf16
};

}  // namespace lattice::engine
