// `lattice plan --parallel ep`: what each node holds and sends when the experts of a
// mixture-of-experts model are spread over the nodes by memory (parallel/plan.h).
#include <algorithm>
#include <numeric>
#include <string_view>

#include "lattice/engine/model/shard.h"
#include "lattice/engine/parallel/plan.h"

namespace lattice::engine::parallel {

namespace {
bool has(std::string_view name, std::string_view part) { return name.find(part) != std::string_view::npos; }
double frac(Range r, uint32_t n) { return n ? double(r.size()) / n : 0.0; }
}  // namespace

WeightShare node_weight_share(const GgufFile& file, const Hparams& hp, const ShardLayout& layout, int i,
                              double f_experts) {
  const bool mla = hp.kv_lora_rank > 0;
  const double f_heads = frac(layout.heads[i], hp.n_head);
  const double f_ff = frac(layout.ff[i], hp.ffn_width());
  const double f_dense = hp.moe() ? frac(layout.ff_dense[i], hp.n_ff) : f_ff;
  const double f_shared = frac(layout.ff_shared[i], hp.n_ff_exp * hp.n_expert_shared);
  const double f_vocab = frac(layout.vocab[i], hp.n_vocab);
  const bool tied = file.find_tensor("output.weight") == nullptr;
  WeightShare out;
  for (const TensorInfo& t : file.tensors()) {
    const std::string_view name = t.name;
    const double b = static_cast<double>(t.n_bytes);
    if (has(name, "_exps")) {
      const double e = (f_experts < 0 ? f_ff : f_experts) * b;
      out.total += e, out.expert_bytes += e;
    } else if (t.n_dims < 2 || has(name, "ffn_gate_inp") || has(name, "exp_probs_b")) {
      out.total += b;  // norms, biases, routers: on every node
    } else if (name == "output.weight") {
      out.total += f_vocab * b;
    } else if (name == "token_embd.weight") {
      if (tied) out.total += f_vocab * b;  // tied: the output's rows
    } else if (has(name, "_shexp")) {
      out.total += f_shared * b;
    } else if (mla && (has(name, ".attn_q_a.") || has(name, ".attn_kv_a_mqa."))) {
      out.total += b;  // the latent projections: every node keeps the whole latent
    } else if (has(name, ".attn_")) {
      out.total += f_heads * b;
    } else {
      out.total += f_dense * b;  // dense FFNs: columns
    }
  }
  return out;
}

uint64_t node_kv_bytes(const Hparams& hp, const ShardLayout& layout, int i, uint32_t n_ctx, uint32_t n_layers) {
  if (hp.kv_lora_rank > 0) return uint64_t{n_ctx} * (hp.kv_lora_rank + hp.rope.n_rot) * sizeof(float) * n_layers;
  return 2ull * n_ctx * hp.head_dim * sizeof(float) * n_layers * layout.kv_heads[i].size();
}

Result<std::vector<NodePlacement>> plan_experts(const GgufFile& file, const Hparams& hp,
                                                const std::vector<NodeSpec>& nodes, uint32_t n_ctx) {
  const int W = static_cast<int>(nodes.size());
  if (W == 0) return InvalidArgument("plan: no nodes");
  if (!hp.moe()) return InvalidArgument("plan: expert parallel needs a mixture-of-experts model");
  std::vector<double> mem(W);
  for (int i = 0; i < W; ++i) mem[i] = static_cast<double>(nodes[i].memory_bytes);
  LATTICE_ASSIGN_OR_RETURN(ShardLayout layout, make_shard_layout(hp, 1, 1, W, mem));
  const std::vector<int> owner = place_experts(hp.n_expert, W, mem);
  std::vector<NodePlacement> out(W);
  for (int i = 0; i < W; ++i) {
    NodePlacement& n = out[i];
    n.name = nodes[i].name;
    n.memory_bytes = nodes[i].memory_bytes;
    n.experts = static_cast<uint32_t>(std::count(owner.begin(), owner.end(), i));
    const WeightShare w = node_weight_share(file, hp, layout, i, double(n.experts) / hp.n_expert);
    n.expert_bytes = static_cast<uint64_t>(w.expert_bytes);
    n.weight_bytes = static_cast<uint64_t>(w.total);
    n.kv_bytes = node_kv_bytes(hp, layout, i, n_ctx, hp.n_layer);
    const uint64_t scratch = 64ull * (hp.n_embd * 4 + std::max(hp.n_ff, hp.n_ff_exp) * 2) * sizeof(float);
    n.total_bytes = n.weight_bytes + n.kv_bytes + scratch;
    // Ring all-reduce of n_embd floats, twice a layer (attention, then experts + dense FFN),
    // 2 (W-1)/W of it over this node's outgoing link; plus the argmax gather.
    const double E4 = hp.n_embd * 4.0;
    n.sent_per_token = W > 1 ? static_cast<uint64_t>(2.0 * hp.n_layer * 2.0 * (W - 1) / W * E4 + 8.0 * (W - 1)) : 0;
    const Range h = hp.kv_lora_rank ? layout.heads[i] : layout.kv_heads[i];
    n.part = std::string(hp.kv_lora_rank ? "heads [" : "kv heads [") + std::to_string(h.begin) + "," +
             std::to_string(h.end) + ") experts " + std::to_string(n.experts) + "/" + std::to_string(hp.n_expert) + " vocab [" +
             std::to_string(layout.vocab[i].begin) + "," + std::to_string(layout.vocab[i].end) + ")";
  }
  return out;
}

}  // namespace lattice::engine::parallel
