// Engine profiles. Sources and derivations (MLX shards every layer equally across the group: its
// shard_linear splits rows or columns by group size, whatever each node's memory):
//  lattice       src/lattice/engine: activations and the KV cache are f32; tensor parallel all-reduces the
//                hidden state twice a layer and gathers the argmax (engine/parallel/plan.cc); collectives
//                are chosen by coll::choose. Its decode efficiency on a machine comes from `sim --calibrate`.
//                Over verbs every message is whole staged slots with acks (fabric/verbs/wire.h).
//  mlx           MLX + JACCL as exo 1.0 runs it. bf16 (2 bytes) activations and KV cache. exo's tensor parallel
//                (exo auto_parallel.py at f8483cf, 19 Dec 2025) shards every layer equally and leaves lm_head,
//                the routers and MLA's q_a / kv_a projections whole on every node; it does not run expert
//                parallel. mlx-lm's deepseek_v3 (ede65a1) caches MLA's keys and values per head. JACCL's mesh
//                all-reduce (mlx/distributed/jaccl/mesh_impl.h) is one round to every peer at every size.
//                sync_us: the per-all-reduce cost beyond the wire at two ranks, derived from exo issue 2070
//                (two M5 Max, gpt-oss-120b, 36 layers, 72 all-reduces a token): 89 tok/s on one node, 98 tok/s
//                with pure MLX tensor parallel over RDMA, so 1/98 - 1/(2 x 89) = 4.58 ms over 72 all-reduces =
//                64 us each, of which the TB5 wire (4.5 us + 5.8 KB at 7.5 GB/s, plus posting) takes about 6:
//                58 us. A different machine and model from the figures the simulator is checked against.
//                sync_jitter: each rank's cost is an exponential draw (an assumption) of mean 58 / 1.5, so the
//                slowest of two averages 58 us and the slowest of W grows as the harmonic number H_W.
//  llamacpp-rpc  ggml-rpc (llama.cpp ggml/src/ggml-rpc): the client sends a server its inputs
//                (SET_TENSOR), runs its part of the graph (GRAPH_COMPUTE) and reads the result back
//                (GET_TENSOR): three request/response exchanges per server per token, one after the
//                other, in layer order (a pipeline without overlap). f32 activations, f16 KV cache.
#include <map>

#include "lattice/engine/parallel/distributed.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/sim/engine_profile.h"

namespace lattice::sim {
namespace {

EngineProfile make(const char* name, const char* source, CommStyle comm, double act, double kv, double eff,
                   double sync_us, int rpc, uint32_t prefill, bool by_memory) {
  EngineProfile p;
  p.name = name;
  p.source = source;
  p.comm = comm;
  p.act_bytes = act;
  p.kv_elem_bytes = kv;
  p.decode_efficiency = eff;
  p.sync_us = sync_us;
  p.rpc_round_trips = rpc;
  p.prefill_batch = prefill;
  p.split_by_memory = by_memory;
  return p;
}

const std::map<std::string, EngineProfile>& table() {
  static const std::map<std::string, EngineProfile> t = [] {
    std::map<std::string, EngineProfile> m;
    // Prefill rows a step as the engine runs them: `run --nodes` steps DistOptions::n_batch rows,
    // its pipeline passes micro-batches of 32 (distributed.cc, place()), one process its
    // ForwardOptions::n_batch.
    EngineProfile lat = make("lattice", "src/lattice/engine", CommStyle::kLattice, 4, 4, 0.8, 0, 0,
                             engine::parallel::DistOptions{}.n_batch, true);
    lat.solo_prefill_batch = engine::ForwardOptions{}.n_batch;
    lat.pp_micro_batch = 32;
    lat.verbs_staged = true;  // fabric/verbs: every message whole slots, acked (wire.h)
    m["lattice"] = lat;
    EngineProfile mlx = make("mlx", "MLX + JACCL (exo 1.0); sync_us from exo issue 2070", CommStyle::kJaccl, 2, 2, 0.75,
                             58, 0, 512, false);
    mlx.sync_jitter = true;
    mlx.auto_expert = false;      // exo runs tensor parallel (auto_parallel.py)
    mlx.replicate_output = true;  // exo leaves lm_head unsharded
    mlx.mla_expanded_cache = true;  // mlx-lm's deepseek_v3 caches k_nope|k_pe and v per head
    m["mlx"] = mlx;
    EngineProfile rpc = make("llamacpp-rpc", "llama.cpp ggml-rpc", CommStyle::kRpcStar, 4, 2, 0.7, 0, 3, 512, true);
    rpc.auto_expert = false;  // a layer split
    m["llamacpp-rpc"] = rpc;
    return m;
  }();
  return t;
}

}  // namespace

std::vector<std::string> engine_profile_names() {
  std::vector<std::string> v;
  for (const auto& [k, p] : table()) v.push_back(k);
  return v;
}

Result<EngineProfile> engine_profile(const std::string& name) {
  auto it = table().find(name);
  if (it != table().end()) return it->second;
  std::string all;
  for (const auto& n : engine_profile_names()) all += (all.empty() ? "" : ", ") + n;
  return NotFound("no engine profile '" + name + "' (" + all + ")");
}

}  // namespace lattice::sim
