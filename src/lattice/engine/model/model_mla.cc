// The loader's part for multi-head latent attention (deepseek2) and shared experts: which
// tensors a block has and how they become per-head matrices (see model.h, deepseek2.cc).
// A rank binds the heads of its shard (Model::heads()): their query rows, their k_b / v_b
// matrices and their attn_output columns; the latent projections whole (every rank keeps the
// whole latent cache), and its columns of the shared experts.
#include <string>

#include "lattice/engine/model/model.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {

Status Model::bind_mla(LayerWeights& L, uint32_t i, bool pack) {
  const TensorNames& nm = arch_->names;
  const uint32_t E = hp_.n_embd, H = hp_.n_head, R = hp_.rope.n_rot, C = hp_.kv_lora_rank;
  const uint32_t KD = hp_.mla_k_dim, VD = hp_.mla_v_dim, N = hp_.nope_dim();
  const auto name = [&](std::string_view base) { return "blk." + std::to_string(i) + "." + std::string(base) + ".weight"; };
  const uint32_t all_q = H * KD;
  const Range hs = heads();
  const Range q_rows{hs.begin * KD, hs.end * KD};
  if (hp_.q_lora_rank > 0) {
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* ta, matrix_info(name(nm.wq_a), E, hp_.q_lora_rank));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tb, matrix_info(name(nm.wq_b), hp_.q_lora_rank, all_q));
    LATTICE_ASSIGN_OR_RETURN(L.wq_a, rows(*ta, {0, hp_.q_lora_rank}, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wq_b, rows(*tb, q_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.q_a_norm, vec(name(nm.q_a_norm), hp_.q_lora_rank, true));
  } else {
    auto tq = matrix_info(name(nm.wq), E, all_q);
    if (!tq.ok())
      return tq.status().with_context(std::string(arch_->name) + ".attention.q_lora_rank is 0 or absent, so a plain " +
                                      std::string(nm.wq) + " is needed");
    LATTICE_ASSIGN_OR_RETURN(L.wq, rows(**tq, q_rows, pack));
  }
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tkv, matrix_info(name(nm.wkv_a), E, C + R));
  LATTICE_ASSIGN_OR_RETURN(L.wkv_a, rows(*tkv, {0, C + R}, pack));
  LATTICE_ASSIGN_OR_RETURN(L.kv_a_norm, vec(name(nm.kv_a_norm), C, true));
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* to, matrix_info(name(nm.wo), uint64_t{H} * VD, E));
  LATTICE_ASSIGN_OR_RETURN(L.wo, cols(*to, {hs.begin * VD, hs.end * VD}, pack));

  L.k_b.resize(hs.size()), L.v_b.resize(hs.size());
  if (hp_.mla_split_kv_b) {
    // attn_k_b [nope, kv_lora, n_head], attn_v_b [kv_lora, v, n_head]: per head a matrix.
    const auto heads3 = [&](std::string_view base, uint64_t n_in, uint64_t n_out) -> Result<const TensorInfo*> {
      const std::string n = name(base);
      const TensorInfo* t = file_->find_tensor(n);
      if (!t) return NotFound("tensor '" + n + "' is missing (multi-head latent attention)");
      if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != H)
        return Corrupt("tensor '" + n + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n_in) +
                       ", " + std::to_string(n_out) + ", " + std::to_string(H) + "]");
      if (!is_supported_weight_type(t->type))
        return Unavailable("tensor '" + n + "': weight type " +
                           std::string(type_traits(static_cast<uint32_t>(t->type))->name) + " is not supported");
      return t;
    };
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tk, heads3(nm.wk_b, N, C));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tv, heads3(nm.wv_b, C, VD));
    for (uint32_t h = hs.begin; h < hs.end; ++h) {
      const TensorInfo k = expert_slice(*tk, h), v = expert_slice(*tv, h);
      LATTICE_ASSIGN_OR_RETURN(L.k_b[h - hs.begin], rows(k, {0, C}, pack));
      LATTICE_ASSIGN_OR_RETURN(L.v_b[h - hs.begin], rows(v, {0, VD}, pack));
    }
    return Status::Ok();
  }
  // The older fused attn_kv_b [kv_lora, n_head * (nope + v)]: per head, nope rows of k then v
  // rows. The k rows are transposed (in f32) into the absorbed form; the v rows are viewed.
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tkvb, matrix_info(name(nm.wkv_b), C, uint64_t{H} * (N + VD)));
  std::vector<float> row(C);
  for (uint32_t h = hs.begin; h < hs.end; ++h) {
    auto kt = std::make_unique<float[]>(size_t{C} * N);
    for (uint32_t d = 0; d < N; ++d) {
      const size_t r = size_t{h} * (N + VD) + d;
      LATTICE_RETURN_IF_ERROR(dequantize_row(tkvb->type, tkvb->data + r * tkvb->row_bytes(), row.data(), C));
      for (uint32_t c = 0; c < C; ++c) kt[size_t{c} * N + d] = row[c];
    }
    LATTICE_ASSIGN_OR_RETURN(L.k_b[h - hs.begin], Weight::view({TensorType::kF32, kt.get(), C, N, 0}));
    owned_.push_back(std::move(kt));
    const uint32_t v0 = h * (N + VD) + N;
    LATTICE_ASSIGN_OR_RETURN(L.v_b[h - hs.begin], rows(*tkvb, {v0, v0 + VD}, false));
  }
  return Status::Ok();
}

Status Model::bind_shared_experts(LayerWeights& L, uint32_t i, bool pack) {
  const TensorNames& nm = arch_->names;
  const uint32_t E = hp_.n_embd, FS = hp_.n_ff_exp * hp_.n_expert_shared;
  const auto name = [&](std::string_view base) { return "blk." + std::to_string(i) + "." + std::string(base) + ".weight"; };
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tg, matrix_info(name(nm.gate_shexp), E, FS));
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tu, matrix_info(name(nm.up_shexp), E, FS));
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* td, matrix_info(name(nm.down_shexp), FS, E));
  // Tensor parallel (expert parallel too): this rank's columns of the shared experts.
  const Range f = layout_.ff_shared[shard_.rank];
  LATTICE_ASSIGN_OR_RETURN(L.gate_shexp, rows(*tg, f, pack));
  LATTICE_ASSIGN_OR_RETURN(L.up_shexp, rows(*tu, f, pack));
  LATTICE_ASSIGN_OR_RETURN(L.down_shexp, cols(*td, f, pack));
  return Status::Ok();
}

}  // namespace lattice::engine
