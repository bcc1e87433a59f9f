#include "lattice/sim/placement.h"

#include <algorithm>

#include "lattice/engine/model/hparams.h"
#include "lattice/engine/parallel/pp.h"

namespace lattice::sim {

std::string_view to_string(Mode m) {
  switch (m) {
    case Mode::kAuto: return "auto";
    case Mode::kTensor: return "tp";
    case Mode::kPipeline: return "pp";
    case Mode::kExpert: return "ep";
  }
  return "?";
}

Result<Mode> parse_mode(std::string_view s) {
  if (s == "auto") return Mode::kAuto;
  if (s == "tp") return Mode::kTensor;
  if (s == "pp") return Mode::kPipeline;
  if (s == "ep") return Mode::kExpert;
  return InvalidArgument("--parallel must be tp, pp, ep or auto, not '" + std::string(s) + "'");
}

namespace {

std::string rs(engine::Range r) { return "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")"; }

}  // namespace

Result<Layout> place(const ModelShape& s, const std::vector<double>& mem, Mode mode, uint32_t n_ctx,
                     double kv_elem_bytes, const std::vector<double>& split, PlaceRules rules) {
  const int W = static_cast<int>(mem.size());
  if (W < 1) return InvalidArgument("sim: no nodes");
  if (mode == Mode::kExpert && !s.moe()) return InvalidArgument("sim: --parallel ep needs a mixture-of-experts model");
  Layout L;
  // plan_placement's rule (engine/parallel/plan.cc): the heads tensor parallelism splits are
  // the KV heads, or under MLA (one latent for every head) the query heads.
  const uint32_t tp_heads = s.kv_lora_rank ? s.n_head : s.n_head_kv;
  const std::string what = s.kv_lora_rank ? " heads" : " KV heads";
  if (mode == Mode::kAuto && rules.auto_expert && s.moe() && W > 1 && W <= static_cast<int>(s.n_expert) &&
      W <= static_cast<int>(tp_heads)) {
    mode = Mode::kExpert;
    L.why = "auto: expert parallel (" + std::to_string(s.n_expert) + " experts over " + std::to_string(W) +
            " nodes by memory, attention tensor parallel)";
  } else if (mode == Mode::kAuto) {
    mode = W <= static_cast<int>(tp_heads) ? Mode::kTensor : Mode::kPipeline;
    L.why = mode == Mode::kTensor ? "auto: tensor parallel (every node owns >= 1 of " + std::to_string(tp_heads) + what + ")"
                                  : "auto: pipeline (" + std::to_string(W) + " nodes > " + std::to_string(tp_heads) + what +
                                        ")";
  } else {
    L.why = "--parallel " + std::string(to_string(mode));
  }
  L.mode = mode;
  const double kv_tok_layer = s.kv_elems_per_token_layer(rules.mla_expanded_cache) * kv_elem_bytes;
  const double per_layer_attn = s.attn_bytes / s.n_layer;
  if (mode == Mode::kPipeline) {
    L.pp = W;
    LATTICE_ASSIGN_OR_RETURN(auto layers, engine::parallel::pp_layers(s.n_layer, W, split));
    for (int i = 0; i < W; ++i) {
      NodeShare n;
      n.f_kv = n.f_ff = n.f_vocab = 1;
      n.layers = layers[i];
      double w = 0;
      for (uint32_t l = n.layers.begin; l < n.layers.end; ++l) {
        w += per_layer_attn;
        if (!s.moe() || l < s.n_dense_layers) w += s.dense_ffn_bytes / std::max<uint32_t>(s.moe() ? s.n_dense_layers : s.n_layer, 1);
        else w += (s.expert_bytes + s.shared_bytes + s.router_bytes) / s.n_moe_layers();
      }
      // As plan_placement counts: the embedding is mapped but only its looked-up rows are read.
      if (i == W - 1) w += s.output_bytes;
      n.weight_bytes = w;
      n.kv_bytes = kv_tok_layer * n_ctx * n.layers.size();
      n.part = "layers " + rs(n.layers);
      L.nodes.push_back(n);
    }
  } else {
    L.tp = W;
    engine::Hparams hp;
    hp.n_embd = s.n_embd;
    hp.n_head = s.n_head;
    hp.n_head_kv = s.n_head_kv;
    hp.head_dim = s.head_dim;
    hp.head_dim_v = s.kv_lora_rank ? (s.v_head_dim ? s.v_head_dim : 128) : s.head_dim;
    hp.n_ff = s.n_ff ? s.n_ff : s.n_ff_exp;
    hp.n_expert = s.n_expert;
    hp.n_ff_exp = s.n_ff_exp;
    hp.n_vocab = s.n_vocab;
    hp.kv_lora_rank = s.kv_lora_rank;  // MLA: split by query heads
    hp.mla_v_dim = hp.head_dim_v;
    LATTICE_ASSIGN_OR_RETURN(engine::ShardLayout sl, engine::make_shard_layout(hp, 1, 1, W, split));
    if (mode == Mode::kExpert) L.expert_owner = engine::place_experts(s.n_expert, W, split);
    const double latent = s.attn_latent_bytes;  // whole on every node
    for (int i = 0; i < W; ++i) {
      NodeShare n;
      n.layers = {0, s.n_layer};
      n.f_kv = s.kv_lora_rank ? double(sl.heads[i].size()) / s.n_head : double(sl.kv_heads[i].size()) / s.n_head_kv;
      const std::string heads = s.kv_lora_rank ? "heads " + rs(sl.heads[i]) : "kv heads " + rs(sl.kv_heads[i]);
      n.f_ff = double(sl.ff[i].size()) / hp.ffn_width();
      n.f_vocab = rules.replicate_output ? 1.0 : double(sl.vocab[i].size()) / s.n_vocab;
      // Dense FFNs split by columns with the same share as the experts' columns.
      const double f_dense = s.n_ff ? n.f_ff : 0;
      double w = latent + (s.attn_bytes - latent) * n.f_kv + s.dense_ffn_bytes * f_dense + s.router_bytes +
                 s.output_bytes * n.f_vocab;
      if (mode == Mode::kExpert) {
        n.experts = static_cast<uint32_t>(std::count(L.expert_owner.begin(), L.expert_owner.end(), i));
        w += s.expert_bytes * double(n.experts) / s.n_expert + s.shared_bytes * n.f_ff;
        // As plan_experts names it.
        n.part = heads + " experts " + std::to_string(n.experts) + "/" + std::to_string(s.n_expert) + " vocab " +
                 rs(sl.vocab[i]);
      } else {
        w += (s.expert_bytes + s.shared_bytes) * n.f_ff;
        n.part = heads + " ffn " + rs(sl.ff[i]) + " vocab " + rs(sl.vocab[i]);
      }
      n.weight_bytes = w;
      // MLA caches one latent per token that every head reads: each node keeps all of it.
      n.kv_bytes = kv_tok_layer * n_ctx * s.n_layer * (s.kv_split(rules.mla_expanded_cache) ? n.f_kv : 1.0);
      L.nodes.push_back(n);
    }
  }
  for (int i = 0; i < W; ++i) {
    NodeShare& n = L.nodes[i];
    n.memory_bytes = mem[i];
    n.total_bytes = n.weight_bytes + n.kv_bytes + 64.0 * (s.n_embd * 4 + std::max(s.n_ff, s.n_ff_exp) * 2) * 4;
    if (n.total_bytes > n.memory_bytes) {
      L.fits = false;
      L.missing_bytes += n.total_bytes - n.memory_bytes;
    }
  }
  return L;
}

}  // namespace lattice::sim
