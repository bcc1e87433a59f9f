#include "lattice/engine/parallel/plan.h"

#include <algorithm>
#include <vector>

#include "lattice/engine/model/arch.h"
#include "lattice/engine/parallel/pp.h"
#include "lattice/engine/model/model.h"

namespace lattice::engine::parallel {
namespace {

std::string range_str(Range r) { return "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")"; }

uint64_t tensor_bytes(const GgufFile& f, const std::string& name) {
  const TensorInfo* t = f.find_tensor(name);
  return t ? t->n_bytes : 0;
}

}  // namespace

ParallelMode auto_mode(const Hparams& hp, int world, std::string* why) {
  // The heads tensor parallelism splits: KV heads, or under multi-head latent attention (one
  // latent shared by every head) the query heads.
  const uint32_t tp_heads = hp.kv_lora_rank ? hp.n_head : hp.n_head_kv;
  const std::string heads_name = hp.kv_lora_rank ? " heads" : " KV heads";
  std::string w;
  ParallelMode mode;
  if (hp.moe() && world > 1 && world <= static_cast<int>(hp.n_expert) && world <= static_cast<int>(tp_heads)) {
    mode = ParallelMode::kExpert;
    w = "auto: expert parallel (" + std::to_string(hp.n_expert) + " experts over " + std::to_string(world) +
        " nodes by memory, attention tensor parallel)";
  } else {
    // Tensor parallel streams 1/W of the weights per token on every node at once (the fastest
    // decode) as long as every node owns at least one head; beyond that, pipeline stages.
    mode = world <= static_cast<int>(tp_heads) ? ParallelMode::kTensor : ParallelMode::kPipeline;
    w = mode == ParallelMode::kTensor
            ? "auto: tensor parallel (every node owns >= 1 of " + std::to_string(tp_heads) + heads_name + ")"
            : "auto: pipeline (" + std::to_string(world) + " nodes > " + std::to_string(tp_heads) + heads_name + ")";
  }
  if (why) *why = std::move(w);
  return mode;
}

Result<Placement> plan_placement(const GgufFile& file, const std::vector<NodeSpec>& nodes, ParallelMode mode,
                                 uint32_t n_ctx) {
  if (nodes.empty()) return InvalidArgument("plan: no nodes");
  auto arch_name = file.metadata().get_string("general.architecture");
  if (!arch_name.ok()) return arch_name.status();
  const ArchInfo* arch = find_arch(*arch_name);
  if (!arch) return Unavailable("architecture '" + *arch_name + "' is not supported");
  LATTICE_ASSIGN_OR_RETURN(Hparams hp, read_hparams(file.metadata(), *arch));
  // block_count against the tensors present, before anything is sized by it: every layer holds
  // tensors, so a file has at least as many tensors as layers, and each layer's bytes come from
  // one pass over the table (found by fuzz/gguf_fuzz.cc: a file claiming 2^31 layers kept a plan
  // busy for minutes; then one with a tensor "blk.150994944." and as many layers did, through a
  // loop over layers x tensors).
  if (hp.n_layer > file.tensors().size())
    return Corrupt("block_count is " + std::to_string(hp.n_layer) + " but the file has only " +
                   std::to_string(file.tensors().size()) + " tensors");
  std::vector<uint64_t> layer_bytes(hp.n_layer, 0);
  std::vector<char> layer_seen(hp.n_layer, 0);
  for (const auto& t : file.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    uint64_t l = 0;
    size_t i = 4;
    for (; i < t.name.size() && i < 14 && t.name[i] >= '0' && t.name[i] <= '9'; ++i) l = l * 10 + uint64_t(t.name[i] - '0');
    if (i == 4 || i >= t.name.size() || t.name[i] != '.' || l >= hp.n_layer) continue;
    layer_bytes[l] += t.n_bytes;
    layer_seen[l] = 1;
  }
  for (uint32_t l = 0; l < hp.n_layer; ++l)
    if (!layer_seen[l])
      return Corrupt("block_count is " + std::to_string(hp.n_layer) + " but the file has no tensors of layer " +
                     std::to_string(l));
  const TensorInfo* emb = file.find_tensor("token_embd.weight");
  if (!emb || emb->n_dims != 2) return NotFound("tensor 'token_embd.weight' is missing");
  hp.n_vocab = static_cast<uint32_t>(emb->ne[1]);
  const int W = static_cast<int>(nodes.size());
  Placement p;
  p.n_ctx = n_ctx ? n_ctx : std::min<uint32_t>(hp.n_ctx_train, 4096);
  p.model_bytes = file.total_tensor_bytes();
  std::vector<double> mem(W);
  for (int i = 0; i < W; ++i) mem[i] = static_cast<double>(nodes[i].memory_bytes);

  if (mode == ParallelMode::kAuto) {
    mode = auto_mode(hp, W, &p.why);
  } else {
    p.why = mode == ParallelMode::kTensor ? "--parallel tp" : mode == ParallelMode::kExpert ? "--parallel ep" : "--parallel pp";
  }
  const uint64_t kv_per_head_layer = 2ull * p.n_ctx * hp.head_dim * sizeof(float);
  const uint64_t scratch = 64ull * (hp.n_embd * 4 + hp.n_ff * 2) * sizeof(float);

  if (mode == ParallelMode::kExpert && !hp.moe()) {
    mode = ParallelMode::kTensor;
    p.why += " (no experts in this model: tensor parallel)";
  }
  p.mode = mode;
  if (mode == ParallelMode::kExpert) {
    LATTICE_ASSIGN_OR_RETURN(p.nodes, plan_experts(file, hp, nodes, p.n_ctx));
    p.tp = W;
  } else if (mode == ParallelMode::kTensor) {
    p.tp = W;
    auto layout = make_shard_layout(hp, 1, 1, W, mem);
    if (!layout.ok()) return layout.status();
    const double E4 = hp.n_embd * 4.0;
    for (int i = 0; i < W; ++i) {
      NodePlacement n;
      n.name = nodes[i].name;
      n.memory_bytes = nodes[i].memory_bytes;
      const WeightShare w = node_weight_share(file, hp, *layout, i, -1);
      n.weight_bytes = static_cast<uint64_t>(w.total);
      n.expert_bytes = static_cast<uint64_t>(w.expert_bytes);
      n.kv_bytes = node_kv_bytes(hp, *layout, i, p.n_ctx, hp.n_layer);
      n.total_bytes = n.weight_bytes + n.kv_bytes + scratch;
      // Ring all-reduce: 2 (W-1)/W of the vector per rank, two per layer; plus the argmax gather.
      n.sent_per_token = W > 1 ? static_cast<uint64_t>(2.0 * hp.n_layer * 2.0 * (W - 1) / W * E4 + 8.0 * (W - 1)) : 0;
      n.part = (hp.kv_lora_rank ? "heads " + range_str(layout->heads[i]) : "kv heads " + range_str(layout->kv_heads[i])) +
               " ffn " + range_str(layout->ff[i]) + " vocab " +
               range_str(layout->vocab[i]);
      p.nodes.push_back(std::move(n));
    }
  } else {
    p.pp = W;
    auto layers = pp_layers(hp.n_layer, W, mem);
    if (!layers.ok()) return layers.status();
    for (int i = 0; i < W; ++i) {
      NodePlacement n;
      n.name = nodes[i].name;
      n.memory_bytes = nodes[i].memory_bytes;
      uint64_t w = 0;
      for (uint32_t l = (*layers)[i].begin; l < (*layers)[i].end; ++l) w += layer_bytes[l];
      if (i == W - 1) w += tensor_bytes(file, "output.weight") + tensor_bytes(file, "output_norm.weight");
      n.weight_bytes = w;
      n.kv_bytes = hp.kv_lora_rank ? node_kv_bytes(hp, {}, i, p.n_ctx, (*layers)[i].size())
                                   : kv_per_head_layer * hp.n_head_kv * (*layers)[i].size();
      n.total_bytes = n.weight_bytes + n.kv_bytes + scratch;
      n.sent_per_token = i + 1 < W ? hp.n_embd * sizeof(float) : (W > 1 ? 4ull * (W - 1) : 0);
      n.part = "layers " + range_str((*layers)[i]);
      p.nodes.push_back(std::move(n));
    }
  }
  uint64_t short_total = 0;
  for (const NodePlacement& n : p.nodes)
    if (n.memory_bytes && n.total_bytes > n.memory_bytes) short_total += n.total_bytes - n.memory_bytes;
  p.fits = short_total == 0;
  p.missing_bytes = short_total;
  return p;
}

}  // namespace lattice::engine::parallel
