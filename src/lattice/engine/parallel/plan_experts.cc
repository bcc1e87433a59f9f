// `lattice plan --parallel ep`: what each node holds and sends when the experts of a
// mixture-of-experts model are spread over the nodes by memory (parallel/plan.h).
#include <algorithm>
#include <numeric>
#include <string_view>

#include "lattice/engine/model/shard.h"
#include "lattice/engine/parallel/plan.h"

namespace lattice::engine::parallel {

Result<std::vector<NodePlacement>> plan_experts(const GgufFile& file, const Hparams& hp,
                                                const std::vector<NodeSpec>& nodes, uint32_t n_ctx) {
  const int W = static_cast<int>(nodes.size());
  if (W == 0) return InvalidArgument("plan: no nodes");
  if (!hp.moe()) return InvalidArgument("plan: expert parallel needs a mixture-of-experts model");
  std::vector<double> mem(W);
  for (int i = 0; i < W; ++i) mem[i] = static_cast<double>(nodes[i].memory_bytes);
  LATTICE_ASSIGN_OR_RETURN(ShardLayout layout, make_shard_layout(hp, 1, 1, W, mem));
  const std::vector<int> owner = place_experts(hp.n_expert, W, mem);
  const double total_mem = std::accumulate(mem.begin(), mem.end(), 0.0);
  std::vector<NodePlacement> out(W);
  for (int i = 0; i < W; ++i) {
    NodePlacement& n = out[i];
    n.name = nodes[i].name;
    n.memory_bytes = nodes[i].memory_bytes;
    n.experts = static_cast<uint32_t>(std::count(owner.begin(), owner.end(), i));
    const double f_heads = double(layout.kv_heads[i].size()) / std::max<uint32_t>(hp.n_head_kv, 1);
    const double f_vocab = double(layout.vocab[i].size()) / std::max<uint32_t>(hp.n_vocab, 1);
    const double f_share = total_mem > 0 ? mem[i] / total_mem : 1.0 / W;
    const double f_experts = double(n.experts) / hp.n_expert;
    double w = 0, we = 0;
    for (const TensorInfo& t : file.tensors()) {
      const std::string_view name = t.name;
      const double b = static_cast<double>(t.n_bytes);
      if (name.find("_exps") != std::string_view::npos) {
        we += f_experts * b;
      } else if (t.n_dims < 2 || name.find("ffn_gate_inp") != std::string_view::npos ||
                 name.find("exp_probs_b") != std::string_view::npos) {
        w += b;  // norms, biases, routers: on every node
      } else if (name == "output.weight") {
        w += f_vocab * b;
      } else if (name == "token_embd.weight") {
        if (!file.find_tensor("output.weight")) w += f_vocab * b;  // tied: the output's rows
      } else if (name.find(".attn_") != std::string_view::npos) {
        w += f_heads * b;
      } else {
        w += f_share * b;  // dense FFNs and shared experts: columns by share
      }
    }
    n.expert_bytes = static_cast<uint64_t>(we);
    n.weight_bytes = static_cast<uint64_t>(w + we);
    n.kv_bytes = 2ull * n_ctx * hp.head_dim * sizeof(float) * hp.n_layer * layout.kv_heads[i].size();
    const uint64_t scratch = 64ull * (hp.n_embd * 4 + std::max(hp.n_ff, hp.n_ff_exp) * 2) * sizeof(float);
    n.total_bytes = n.weight_bytes + n.kv_bytes + scratch;
    // Ring all-reduce of n_embd floats, twice a layer (attention, then experts + dense FFN),
    // 2 (W-1)/W of it over this node's outgoing link; plus the argmax gather.
    const double E4 = hp.n_embd * 4.0;
    n.sent_per_token = W > 1 ? static_cast<uint64_t>(2.0 * hp.n_layer * 2.0 * (W - 1) / W * E4 + 8.0 * (W - 1)) : 0;
    n.part = "kv heads [" + std::to_string(layout.kv_heads[i].begin) + "," + std::to_string(layout.kv_heads[i].end) +
             ") experts " + std::to_string(n.experts) + "/" + std::to_string(hp.n_expert) + " vocab [" +
             std::to_string(layout.vocab[i].begin) + "," + std::to_string(layout.vocab[i].end) + ")";
  }
  return out;
}

}  // namespace lattice::engine::parallel
