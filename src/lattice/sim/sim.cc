#include "lattice/sim/sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "lattice/coll/choose.h"
#include "lattice/coll/plan/ring_route.h"

namespace lattice::sim {
namespace {

using coll::Algorithm;
using coll::CollOp;

// The simulated cluster: ranks, their speeds, the cables.
struct Rank {
  std::string name;
  Machine machine;
  std::string phys;     // physical machine (hosts at one address share its memory bandwidth)
  double read_gbs = 0;  // what the engine reaches
  double flops = 0;     // per second
  // read_gbs and flops over what they would be with no other core busy (Machine::kernel_scaling
  // and compute_scaling's shares): 1 alone, less when every core works at once.
  double read_quiet = 1, flops_quiet = 1;
  // What the rank does whole on each layer's hidden state whatever its slice (norms, the
  // activations' quantization, residual adds; Machine::replicated_ns), microseconds an element.
  double replicated_us = 0;
  // A mixture of experts' layer, also whole (Machine::moe_router_ns, moe_row_ns): microseconds a
  // multiply-add of the router and an element of a chosen expert's input rows; 0: not measured.
  double moe_router_us = 0, moe_row_us = 0;
  double memory_bytes = 0;
  // Ranks beyond their machine's cores, pinned round them as `run --bind cores` does (the i-th
  // rank there on core i mod cores): the core this one shares with the others there (an index
  // unique over every machine); -1 when the ranks there fit the cores.
  int core = -1;
};

std::string phys_of(const std::string& address) {
  if (!address.empty() && address[0] == '[') return address.substr(0, address.find(']') + 1);
  return address.substr(0, address.find(':'));
}

// The two all-reduce sizes the machine file measures (MeasuredLink::allreduce_us and allreduce_256k_us).
constexpr double kColocatedSmall = 8192, kColocatedLarge = 262144;

struct Collectives {
  const EngineProfile* profile = nullptr;
  bool rma = false;  // every cable has passive one-sided writes (shm): lattice's landing zones
  std::mt19937* rng = nullptr;  // the engine's synchronisation draws (a fixed seed per simulation)
  double colocated_us = 0;      // every call's cost beyond the wire when the ranks share a machine
  double colocated_us_per_byte = 0;  // and what it grows by a byte beyond 8 KiB (MeasuredLink::allreduce_256k_us)
  // Ranks in lockstep on one machine's cores (Machine::lockstep_scaling): each collective first
  // waits (1 / lockstep - 1) x each rank's work since the previous one. 1: none.
  double lockstep = 1;
  // And over a provider with its own figure against shm (MeasuredLink::lockstep_scaling: the
  // emulated verbs device, loopback tcp): (1 / link_lockstep - 1) x that work at its quiet
  // pace (Des::work's quiet_us: no other core busy). What the provider adds (its progress
  // threads' CPU, its wake-ups) takes time from the cores, not from the memory or the compute
  // units the ranks contend for: when every core works at once the work is longer by that
  // contention, and that part does not grow the provider's share.
  double link_lockstep = 1;
  // The provider's large calls measured apart (MeasuredLink::lockstep_256k_over_shm_us: the
  // emulated verbs device's prefill step over shm's, charged through colocated_us_per_byte):
  // link_lockstep's share then fades out from 8 KiB, where it was measured, to 256 KiB.
  bool link_lockstep_fades = false;
  // Ranks over a provider whose pace over shm's the machine file measured (MeasuredLink::
  // lockstep_over_shm_us and _slope): each call waits link_over_us + link_over_slope x the
  // rank's step as shm would take it (its work, beyond the cores its core's turns, and the
  // cores' lockstep wait), in place of link_lockstep's share, fading out over large calls the
  // same way. Negative: not measured.
  double link_over_us = -1, link_over_slope = 0;
  // Pipeline stages on one machine (MeasuredLink::pipeline_scaling): each stage's work is
  // followed by (1 / stages - 1) x it of waiting. 1: none.
  double stages = 1;
  // Ranks holding every core of one machine joined by emulated tcp links: what every message
  // of a collective holds each rank, its relay's CPU spread over the cores (microseconds). 0:
  // none.
  double emulator_us_per_msg = 0;
  // Rank r's core when ranks beyond the cores take turns on them (Rank::core; -1 or empty: on a
  // core of its own). Each core runs its ranks' segments one after the other, so a rank reaches
  // the next collective when every rank of its core has done its work since the last.
  std::vector<int> core_of = {};

  // The plans of one collective (one per rank), how many times they run (sliced all-reduce), and
  // the name of the choice.
  struct Sched {
    std::vector<coll::plan::Plan> plans;
    int repeat = 1;
    std::string name;
  };

  Result<Sched> make(const Des& des, CollOp op, size_t count, double elem_bytes, int root = 0) const {
    const int W = des.world();
    Sched s;
    coll::plan::Shape shape;
    shape.op = op;
    shape.world = W;
    shape.count = count;
    shape.root = root;
    auto linked = [&](int i, int j) { return des.linked(i, j); };
    if (!des.full_mesh()) {
      coll::plan::Route route = coll::plan::find_route(W, linked);
      if (route.order.empty()) return Unavailable("sim: the cables do not join every node (no route through all)");
      for (int r = 0; r < W; ++r) {
        shape.rank = r;
        LATTICE_ASSIGN_OR_RETURN(coll::plan::Plan p, coll::plan::build_on_route(shape, route));
        s.plans.push_back(std::move(p));
      }
      s.name = std::string(route.cycle ? "ring" : "path") + " route";
      return s;
    }
    Algorithm algo;
    size_t n = count;
    if (profile->comm == CommStyle::kJaccl) {
      // JACCL's mesh (mlx/distributed/jaccl/mesh_impl.h): every rank posts its buffer to every
      // peer and reduces the W-1 it receives, one round at every size (in pipelined chunks).
      algo = op == CollOp::kAllReduce ? Algorithm::kOneShot
                                      : coll::plan::choose_algorithm(op, count * elem_bytes, W, false);
      s.name = std::string(coll::to_string(algo)) + " (jaccl)";
    } else {
      coll::CallFacts f;
      f.op = op;
      f.count = count;
      f.elem_bytes = static_cast<size_t>(elem_bytes);
      f.world = W;
      f.full_mesh = true;
      f.oneshot_zone_bytes = rma ? 64 * 1024 : 0;
      f.twoshot_zone = rma;
      f.slice_bytes = 1024 * 1024;
      LATTICE_ASSIGN_OR_RETURN(coll::Choice c, coll::choose(f));
      algo = c.algo;
      if (c.path == coll::Path::kSlicedPlan && c.slice_count > 0) {
        n = c.slice_count;
        s.repeat = static_cast<int>((count + n - 1) / n);
      }
      s.name = std::string(coll::to_string(algo)) + " (" + std::string(coll::to_string(c.path)) + ")";
    }
    shape.count = n;
    for (int r = 0; r < W; ++r) {
      shape.rank = r;
      LATTICE_ASSIGN_OR_RETURN(coll::plan::Plan p, coll::plan::build(shape, algo));
      s.plans.push_back(std::move(p));
    }
    return s;
  }

  // The messages one run of a schedule sends, over every rank.
  static size_t messages(const Sched& s) {
    size_t n = 0;
    for (const auto& p : s.plans)
      for (const auto& st : p.steps) n += st.sends.size();
    return n;
  }

  Status run(Des& des, CollOp op, size_t count, double elem_bytes, std::string* name = nullptr, int root = 0) const {
    if (des.world() == 1) return Status::Ok();
    LATTICE_ASSIGN_OR_RETURN(Sched s, make(des, op, count, elem_bytes, root));
    if (name) *name = s.name;
    const int W = des.world();
    std::vector<double> segment(W), quiet(W);
    for (int r = 0; r < W; ++r) segment[r] = des.take_work(r, &quiet[r]);
    if (!core_of.empty()) {
      // The turns: a rank's segment is its core's, every rank there working at the core's rate
      // in its turn (the others' work is time this rank waits: sync).
      std::map<int, double> on_core, quiet_on_core;
      for (int r = 0; r < W; ++r)
        if (core_of[r] >= 0) on_core[core_of[r]] += segment[r], quiet_on_core[core_of[r]] += quiet[r];
      for (int r = 0; r < W; ++r)
        if (core_of[r] >= 0) {
          des.wait(r, on_core[core_of[r]] - segment[r]);
          segment[r] = on_core[core_of[r]];
          quiet[r] = quiet_on_core[core_of[r]];
        }
    }
    if (lockstep < 1)
      for (int r = 0; r < W; ++r) des.wait(r, segment[r] * (1 / lockstep - 1));
    const double bytes = static_cast<double>(count) * elem_bytes;
    const double large = std::clamp((bytes - kColocatedSmall) / (kColocatedLarge - kColocatedSmall), 0.0, 1.0);
    const double kept = link_lockstep_fades ? 1 - large : 1.0;
    if (link_over_us >= 0) {
      for (int r = 0; r < W; ++r) des.wait(r, (link_over_us + link_over_slope * segment[r] / lockstep) * kept);
    } else if (link_lockstep < 1) {
      for (int r = 0; r < W; ++r) des.wait(r, quiet[r] * (1 / link_lockstep - 1) * kept);
    }
    const double emulator_us = emulator_us_per_msg * static_cast<double>(messages(s));
    for (int i = 0; i < s.repeat; ++i) {
      if (emulator_us > 0)
        for (int r = 0; r < des.world(); ++r) des.wait(r, emulator_us);
      double sync = profile->sync_us;
      if (profile->sync_jitter && sync > 0) {
        // Each rank's own cost this time (engine_profile.h): the collective ends for everyone
        // after the slowest rank's, so W ranks wait for the largest of W draws.
        std::exponential_distribution<double> d(1.5 / sync);
        for (int r = 0; r < des.world(); ++r) des.wait(r, d(*rng));
        sync = 0;
      }
      const double colocated = colocated_us + colocated_us_per_byte * std::max(0.0, bytes - kColocatedSmall);
      LATTICE_RETURN_IF_ERROR(des.run(s.plans, elem_bytes, sync + colocated, 10.0));
    }
    return Status::Ok();
  }
};

// One node's work: `bytes` read and `flops` done; whichever takes longer bounds it.
void work(Des& des, int r, const Rank& k, double bytes, double flops) {
  const double t_read = bytes / (k.read_gbs * 1e3);
  const double t_flop = flops / k.flops * 1e6;
  des.work(r, std::max(t_read, t_flop), t_read >= t_flop, std::max(t_read * k.read_quiet, t_flop * k.flops_quiet));
}

struct Step {
  uint32_t rows = 1;     // rows per sequence... total rows of the step
  uint32_t seqs = 1;     // sequences (decode batch)
  double pos = 0;        // average position (KV length read)
};

class Runner {
 public:
  Runner(const ModelShape& s, const Layout& L, const std::vector<Rank>& ranks, const EngineProfile& p,
         const Collectives& coll)
      : s_(s), L_(L), ranks_(ranks), p_(p), coll_(coll) {}

  // Layer l on node r: attention (weights + KV reads + score FLOPs).
  void attention(Des& des, int r, uint32_t l, const Step& st) const {
    const NodeShare& n = L_.nodes[r];
    const double f = L_.mode == Mode::kPipeline ? 1.0 : n.f_kv;
    // MLA's latent projections are whole on every node (placement.h).
    const double w = (s_.attn_latent_bytes + (s_.attn_bytes - s_.attn_latent_bytes) * f) / s_.n_layer;
    const bool x = p_.mla_expanded_cache;
    const double kv = st.pos * s_.kv_elems_per_token_layer(x) * p_.kv_elem_bytes * st.seqs * (s_.kv_split(x) ? f : 1.0);
    const double flops = 2.0 * st.rows * w * 8 / s_.bits_per_weight + 4.0 * st.rows * st.pos * s_.n_head * f * s_.head_dim;
    (void)l;
    work(des, r, ranks_[r], w + kv, flops);
    if (const double rep = ranks_[r].replicated_us * st.rows * s_.n_embd; rep > 0) des.work(r, rep, false, rep);
  }

  // Layer l's FFN on node r; `ep_experts` the experts chosen on this node (expert parallel) and
  // `ep_share` its share of the chosen experts' rows.
  void ffn(Des& des, int r, uint32_t l, const Step& st, double ep_experts, double ep_share) const {
    const NodeShare& n = L_.nodes[r];
    const double f = L_.mode == Mode::kPipeline ? 1.0 : n.f_ff;
    double bytes, flop_bytes;
    if (!s_.moe() || l < s_.n_dense_layers) {
      bytes = s_.dense_ffn_bytes / std::max<uint32_t>(s_.moe() ? s_.n_dense_layers : s_.n_layer, 1) * f;
      flop_bytes = bytes;
    } else {
      const double per_expert = s_.expert_bytes / s_.n_moe_layers() / s_.n_expert;
      const double fixed = (s_.shared_bytes * f + s_.router_bytes) / s_.n_moe_layers();
      // The router's multiply-adds and each chosen expert's gathered, quantized and accumulated
      // rows at the machine's measured rates, whole on every rank (expert parallel: the rows of
      // its experts); the router's bytes are still read with the weights.
      const Rank& k = ranks_[r];
      if (k.moe_router_us > 0 || k.moe_row_us > 0) {
        const double rows_share = L_.mode == Mode::kExpert ? ep_share : 1.0;
        const double us = double(st.rows) * s_.n_embd *
                          (s_.n_expert * k.moe_router_us + s_.n_expert_used * k.moe_row_us * rows_share);
        des.work(r, us, false, us);
      }
      double experts_read;
      if (L_.mode == Mode::kExpert) {
        experts_read = ep_experts * per_expert;
      } else {
        experts_read = s_.n_expert * s_.expert_fraction(st.rows) * per_expert * f;
      }
      bytes = fixed + experts_read;
      const double router_flop_bytes = k.moe_router_us > 0 ? 0.0 : s_.router_bytes / s_.n_moe_layers();
      flop_bytes = s_.shared_bytes * f / s_.n_moe_layers() + router_flop_bytes +
                   s_.n_expert_used * per_expert * (L_.mode == Mode::kExpert ? 1.0 / L_.tp : f);
    }
    work(des, r, ranks_[r], bytes, 2.0 * st.rows * flop_bytes * 8 / s_.bits_per_weight);
  }

  void output(Des& des, int r, const Step& st) const {
    const double f = L_.mode == Mode::kPipeline ? 1.0 : L_.nodes[r].f_vocab;
    const double bytes = s_.output_bytes * f;
    work(des, r, ranks_[r], bytes, 2.0 * st.seqs * bytes * 8 / s_.bits_per_weight);
  }

  // Expert-parallel routing of one layer: how many distinct chosen experts land on each node.
  std::vector<double> route(std::mt19937& rng, uint32_t rows) const {
    std::vector<double> on(L_.nodes.size(), 0);
    if (L_.mode != Mode::kExpert) return on;
    std::vector<char> chosen(s_.n_expert, 0);
    std::vector<uint32_t> ids(s_.n_expert);
    for (uint32_t i = 0; i < s_.n_expert; ++i) ids[i] = i;
    for (uint32_t t = 0; t < rows; ++t) {
      for (uint32_t k = 0; k < s_.n_expert_used; ++k) {
        std::uniform_int_distribution<uint32_t> d(k, s_.n_expert - 1);
        std::swap(ids[k], ids[d(rng)]);
        chosen[ids[k]] = 1;
      }
    }
    for (uint32_t e = 0; e < s_.n_expert && e < L_.expert_owner.size(); ++e) on[L_.expert_owner[e]] += chosen[e];
    return on;
  }

  // One step (decode: rows = seqs; prefill: rows of the prompt) through a tensor-parallel (or
  // expert-parallel) layout.
  Status tensor_step(Des& des, const Step& st, std::string* algo) const {
    const int W = des.world();
    std::mt19937 rng(12345);
    const size_t hidden = static_cast<size_t>(st.rows) * s_.n_embd;
    for (uint32_t l = 0; l < s_.n_layer; ++l) {
      for (int r = 0; r < W; ++r) attention(des, r, l, st);
      LATTICE_RETURN_IF_ERROR(coll_.run(des, CollOp::kAllReduce, hidden, p_.act_bytes, algo));
      auto on = route(rng, st.rows);
      const double chosen = std::accumulate(on.begin(), on.end(), 0.0);
      for (int r = 0; r < W; ++r) ffn(des, r, l, st, on[r], chosen > 0 ? on[r] / chosen : 1.0);
      LATTICE_RETURN_IF_ERROR(coll_.run(des, CollOp::kAllReduce, hidden, p_.act_bytes));
    }
    for (int r = 0; r < W; ++r) output(des, r, st);
    // The next token: every rank's best candidate (value, index) gathered.
    LATTICE_RETURN_IF_ERROR(coll_.run(des, CollOp::kAllGather, 2 * st.seqs, 4));
    des.barrier();
    return Status::Ok();
  }

  // One micro-batch through the pipeline stages in `order`; the last stage broadcasts the token.
  // llama.cpp RPC instead: the client (order[0]) drives each server in turn (rpc_call).
  Status pipeline_step(Des& des, const Step& st, const std::vector<int>& order, bool last_micro) const {
    const double act = double(st.rows) * s_.n_embd * p_.act_bytes;
    const int W = des.world();
    const bool rpc = p_.comm == CommStyle::kRpcStar;
    const int last = order[W - 1];
    for (int i = 0; i < W; ++i) {
      const int r = order[i];
      if (rpc && i > 0) LATTICE_RETURN_IF_ERROR(rpc_call(des, order[0], r, act, true));
      for (uint32_t l = L_.nodes[r].layers.begin; l < L_.nodes[r].layers.end; ++l) {
        attention(des, r, l, st);
        ffn(des, r, l, st, 0, 1.0);
      }
      if (r == last && last_micro) output(des, last, st);
      if (coll_.stages < 1) des.wait(r, des.take_work(r) * (1 / coll_.stages - 1));
      if (rpc && i > 0) {
        const double back = r == last && last_micro ? double(st.seqs) * s_.n_vocab * 4 : act;
        LATTICE_RETURN_IF_ERROR(rpc_call(des, order[0], r, back, false));
      } else if (!rpc && i + 1 < W) {
        LATTICE_RETURN_IF_ERROR(des.send(r, order[i + 1], act));
      }
    }
    if (!last_micro) return Status::Ok();
    // The tokens and how many random draws each took (PpSession::choose).
    if (!rpc) LATTICE_RETURN_IF_ERROR(coll_.run(des, CollOp::kBroadcast, 2 * st.seqs, 4, nullptr, last));
    des.barrier();
    return Status::Ok();
  }

  // llama.cpp RPC (ggml-rpc): before a server computes, the client sets its input tensor
  // (SET_TENSOR, answered) and asks for the graph (GRAPH_COMPUTE); after, the server answers and
  // the client reads the result back (GET_TENSOR): rpc_round_trips exchanges, one after the other.
  Status rpc_call(Des& des, int client, int server, double bytes, bool before) const {
    const int n = p_.rpc_round_trips;
    if (before) {
      for (int i = 0; i + 2 < n; ++i) {  // SET_TENSOR with its answer (more exchanges if n > 3)
        LATTICE_RETURN_IF_ERROR(des.send(client, server, i == 0 ? bytes : 64));
        LATTICE_RETURN_IF_ERROR(des.send(server, client, 64));
      }
      return des.send(client, server, 64);  // GRAPH_COMPUTE
    }
    LATTICE_RETURN_IF_ERROR(des.send(server, client, 64));  // its answer
    LATTICE_RETURN_IF_ERROR(des.send(client, server, 64));  // GET_TENSOR
    return des.send(server, client, bytes);
  }

 private:
  const ModelShape& s_;
  const Layout& L_;
  const std::vector<Rank>& ranks_;
  const EngineProfile& p_;
  const Collectives& coll_;
};

// Every rank at one address, on the same machine file: ranks sharing one machine.
bool one_machine(const std::vector<Rank>& ranks) {
  for (const Rank& k : ranks)
    if (k.phys != ranks[0].phys || k.machine.name != ranks[0].machine.name) return false;
  return true;
}

// The provider every chosen cable has, if they share one.
std::optional<cluster::LinkProvider> common_provider(const std::vector<const cluster::Link*>& chosen) {
  if (chosen.empty()) return std::nullopt;
  for (const cluster::Link* l : chosen)
    if (l->provider != chosen[0]->provider) return std::nullopt;
  return chosen[0]->provider;
}

// A cable's model as `prof`'s engine uses it: link_for's, through the staged protocol on a verbs
// link when the engine stages its verbs transfers.
Result<LinkModel> engine_link(const cluster::Link& l, const Machine& a, const Machine& b, const EngineProfile& prof) {
  LATTICE_ASSIGN_OR_RETURN(LinkModel m, link_for(l, a, b));
  if (l.provider == cluster::LinkProvider::kVerbs && prof.verbs_staged) m = with_verbs_staging(m);
  return m;
}

// The machine file's figures for the provider that joins every rank, when every rank is on that
// one machine (MeasuredLink: measured between processes of it); null otherwise.
const MeasuredLink* colocated_link(const std::vector<Rank>& ranks, const std::vector<const cluster::Link*>& chosen) {
  const auto common = common_provider(chosen);
  if (!common || !one_machine(ranks)) return nullptr;
  const auto& links = ranks[0].machine.links;
  const auto it = links.find(std::string(cluster::to_string(*common)));
  return it == links.end() ? nullptr : &it->second;
}

// Ranks of lattice's engine all on one machine, joined by one provider whose all-reduce among
// that many ranks the machine file measured (MeasuredLink::allreduce_us): the measured call less
// what the wire model gives the same call over the provider's measured figures (the carrier, not
// an emulated link's setting: the emulator delays bytes the carrier still has to move). Zero
// otherwise, and never negative. For the emulated verbs device (not shm or tcp), whose small
// call the lockstep figure charges, its prefill step over shm's instead (MeasuredLink::
// lockstep_256k_over_shm_us), in place of that figure on large calls.
struct Colocated {
  double measured_us = 0, extra_us = 0;
  double measured_large_us = 0, per_byte_us = 0;  // the large call, and the extra's growth a byte (0: not measured)
  double prefill_extra_us = 0;  // MeasuredLink::lockstep_256k_over_shm_us among these ranks
  bool prefill_measured = false;  // that figure is the machine file's (it replaces the lockstep share on large calls)
};

Result<Colocated> colocated_cost(const EngineProfile& prof, const std::vector<Rank>& ranks,
                                 const std::vector<const cluster::Link*>& chosen, const std::vector<int>& rank_of,
                                 const Collectives& coll) {
  Colocated out;
  const int W = static_cast<int>(ranks.size());
  const auto common = common_provider(chosen);
  if (prof.comm != CommStyle::kLattice || W < 2 || !common) return out;
  const MeasuredLink* link = colocated_link(ranks, chosen);
  if (link == nullptr) return out;
  const bool shared = *common == cluster::LinkProvider::kShm || *common == cluster::LinkProvider::kTcp;
  const auto at = link->allreduce_us.find(W);
  const auto prefill = link->lockstep_256k_over_shm_us.find(W);
  if (shared ? at == link->allreduce_us.end() : prefill == link->lockstep_256k_over_shm_us.end()) return out;
  std::vector<Cable> carrier;
  for (const cluster::Link* l : chosen) {
    cluster::Link plain = *l;
    plain.medium.clear();
    plain.gbps.reset();
    plain.latency_us.reset();
    Cable c;
    c.a = rank_of[l->a];
    c.b = rank_of[l->b];
    LATTICE_ASSIGN_OR_RETURN(c.model, engine_link(plain, ranks[c.a].machine, ranks[c.b].machine, prof));
    carrier.push_back(std::move(c));
  }
  Collectives bare = coll;
  bare.colocated_us = 0;
  bare.colocated_us_per_byte = 0;
  // What the wire model gives one call of `bytes` over the carrier.
  auto wire_us = [&](double bytes) -> Result<double> {
    Des probe(W, carrier);
    LATTICE_RETURN_IF_ERROR(bare.run(probe, CollOp::kAllReduce, size_t(bytes / 4), 4.0));
    return probe.now();
  };
  if (!shared) {
    // A provider measured in lockstep between prefill's kernels (the emulated verbs device): its
    // 256 KiB step that much longer than shm's, with shm's call (allreduce_256k_us over shm) part
    // of that step. Charged beyond this wire model's call, from nothing at 8 KiB (where its
    // lockstep_scaling holds) linearly in bytes, the share fading out over the same bytes.
    const auto& links = ranks[0].machine.links;
    const auto shm = links.find("shm");
    double shm_large = 0;
    if (shm != links.end())
      if (const auto big = shm->second.allreduce_256k_us.find(W); big != shm->second.allreduce_256k_us.end())
        shm_large = big->second;
    LATTICE_ASSIGN_OR_RETURN(const double large, wire_us(kColocatedLarge));
    out.prefill_extra_us = prefill->second;
    out.prefill_measured = true;
    out.measured_large_us = shm_large + prefill->second;
    out.per_byte_us = std::max(0.0, (out.measured_large_us - large) / (kColocatedLarge - kColocatedSmall));
    return out;
  }
  LATTICE_ASSIGN_OR_RETURN(const double small, wire_us(kColocatedSmall));
  out.measured_us = at->second;
  out.extra_us = std::max(0.0, at->second - small);
  // A prefill step's larger call: the extra at 256 KiB, and linear in bytes from the small one's.
  if (const auto big = link->allreduce_256k_us.find(W); big != link->allreduce_256k_us.end()) {
    LATTICE_ASSIGN_OR_RETURN(const double large, wire_us(kColocatedLarge));
    out.measured_large_us = big->second;
    out.per_byte_us = std::max(0.0, (big->second - large - out.extra_us) / (kColocatedLarge - kColocatedSmall));
  }
  return out;
}

}  // namespace

Result<SimResult> simulate(const ModelShape& shape, const cluster::Topology& topo, const SimOptions& o) {
  if (topo.hosts.empty()) return InvalidArgument("sim: the topology has no hosts");
  if (o.hosts < 0 || o.hosts > static_cast<int>(topo.hosts.size()))
    return InvalidArgument("sim: --hosts " + std::to_string(o.hosts) + " but the topology has " +
                           std::to_string(topo.hosts.size()) + " hosts");
  if (o.batch < 1 || o.batch > 4096) return InvalidArgument("sim: --batch must be in 1..4096");
  if (o.prompt < 1) return InvalidArgument("sim: the prompt needs at least one token");
  if (o.threads < 1) return InvalidArgument("sim: --threads must be >= 1");
  LATTICE_ASSIGN_OR_RETURN(EngineProfile prof, engine_profile(o.engine));
  const int W = o.hosts ? o.hosts : static_cast<int>(topo.hosts.size());
  // Ranks in rank order; topology host index -> rank.
  std::vector<int> by_rank(topo.hosts.size(), -1), rank_of(topo.hosts.size(), -1);
  for (size_t i = 0; i < topo.hosts.size(); ++i) by_rank[topo.hosts[i].rank] = static_cast<int>(i);
  std::vector<Rank> ranks(W);
  std::map<std::string, int> sharers;
  for (int r = 0; r < W; ++r) {
    const cluster::Host& h = topo.hosts[by_rank[r]];
    rank_of[by_rank[r]] = r;
    const std::string m = h.machine.empty() ? o.default_machine : h.machine;
    if (m.empty()) return InvalidArgument("sim: host '" + h.name + "' has no \"machine\" (give one in the topology or --machine)");
    auto mach = resolve_machine(m, o.base_dir);
    if (!mach.ok()) return mach.status().with_context("host '" + h.name + "'");
    ranks[r].name = h.name;
    ranks[r].machine = *mach;
    ranks[r].phys = phys_of(h.address);
    ranks[r].memory_bytes = (h.memory_gb ? *h.memory_gb : mach->memory_gb) * double(1ull << 30);
    ++sharers[ranks[r].phys];
  }
  // Cables between the chosen ranks.
  std::vector<Cable> cables;
  std::vector<const cluster::Link*> chosen;  // the topology's link of each cable
  std::vector<int> ports_used(W, 0);
  bool all_rma = true;
  for (const cluster::Link& l : topo.links) {
    const int a = rank_of[l.a], b = rank_of[l.b];
    if (a < 0 || b < 0) continue;
    chosen.push_back(&l);
    Cable c;
    c.a = a;
    c.b = b;
    LATTICE_ASSIGN_OR_RETURN(c.model, engine_link(l, ranks[a].machine, ranks[b].machine, prof));
    if (c.model.uses_tb5_port) {
      for (auto [end, ctl] : {std::pair{a, &c.controller_a}, std::pair{b, &c.controller_b}}) {
        const Machine& m = ranks[end].machine;
        if (m.tb5_ports == 0)
          return InvalidArgument("sim: host '" + ranks[end].name + "' (" + m.name + ") has no Thunderbolt 5 port for the " +
                                 c.model.medium + " link at " + topo.source + ":" + std::to_string(l.line));
        if (ports_used[end] >= m.tb5_ports)
          return InvalidArgument("sim: host '" + ranks[end].name + "' has more Thunderbolt cables than its " +
                                 std::to_string(m.tb5_ports) + " ports (" + m.name + ")");
        *ctl = ports_used[end]++ % std::max(1, m.tb5_controllers);
      }
    }
    if (l.provider != cluster::LinkProvider::kShm) all_rma = false;
    cables.push_back(std::move(c));
  }
  std::vector<double> mem(W);
  for (int r = 0; r < W; ++r) mem[r] = ranks[r].memory_bytes;
  PlaceRules rules;
  rules.auto_expert = prof.auto_expert;
  rules.replicate_output = prof.replicate_output;
  rules.mla_expanded_cache = prof.mla_expanded_cache;
  LATTICE_ASSIGN_OR_RETURN(Layout L, place(shape, mem, o.mode, o.n_ctx, prof.kv_elem_bytes,
                                           prof.split_by_memory ? mem : std::vector<double>{}, rules));
  if (prof.comm == CommStyle::kRpcStar && L.mode != Mode::kPipeline && W > 1)
    return InvalidArgument("sim: the llamacpp-rpc engine runs a layer split: use --parallel pp");
  // Speeds. Ranks on one machine share its memory bandwidth and cores while they work at once
  // (tensor and expert parallel); pipeline stages of one sequence take turns, so each has the
  // machine to itself while it works.
  // Ranks beyond a machine's cores (tensor and expert parallel, which meet at every collective)
  // are pinned round its cores, as `run --bind cores` places them: the i-th rank there on core i
  // mod the cores it has room for (-t threads a rank). Each then works at a core's rate in its
  // turn, with as many ranks as cores at once (Collectives::core_of). Pipeline stages take turns
  // on the whole machine instead (one works at a time).
  std::map<std::string, int> placed, first_core;
  std::map<int, int> on_core;  // the ranks each core runs in turn
  int cores_used = 0;
  for (Rank& k : ranks) {
    const Machine& m = k.machine;
    const int share = sharers[k.phys], slots = std::max(1, m.cores / std::max(1, o.threads));
    if (L.mode == Mode::kPipeline || m.cores <= 0 || share * std::max(1, o.threads) <= m.cores) continue;
    if (!first_core.count(k.phys)) first_core[k.phys] = cores_used, cores_used += slots;
    k.core = first_core[k.phys] + placed[k.phys]++ % slots;
    ++on_core[k.core];
  }
  for (Rank& k : ranks) {
    const Machine& m = k.machine;
    const int slots = std::max(1, m.cores / std::max(1, o.threads));
    const int share = L.mode == Mode::kPipeline ? 1 : k.core >= 0 ? slots : sharers[k.phys];
    const double eff = o.decode_efficiency > 0 ? o.decode_efficiency
                       : m.decode_efficiency > 0 ? m.decode_efficiency : prof.decode_efficiency;
    const double sus = o.sustained && m.throttles ? m.sustained_factor : 1.0;
    // A CPU's threads are limited by their own kernels (the efficiency) while they hold a core,
    // and together by the memory's streaming rate; ranks beyond the cores take turns on them.
    k.read_gbs = m.engine_read_gbs(o.threads, share, eff) * sus;
    Machine alone = m;
    alone.kernel_scaling = 1;
    if (const double quiet = alone.engine_read_gbs(o.threads, share, eff) * sus; quiet > 0)
      k.read_quiet = std::min(1.0, k.read_gbs / quiet);
    double cf = 1.0 / share;
    if (m.cores > 0) cf = std::min(1.0, m.cores_held(o.threads, share) / m.cores);
    const double ceff = o.prefill_efficiency > 0 ? o.prefill_efficiency
                        : m.prefill_efficiency > 0 ? m.prefill_efficiency : prof.compute_efficiency;
    // Ranks computing at once keep compute_scaling of a core's rate alone (the one-rank fit runs alone).
    k.flops = m.compute_tflops * 1e12 * ceff * sus * cf * m.compute_scale(o.threads, share);
    k.flops_quiet = std::clamp(m.compute_scale(o.threads, share), 0.0, 1.0);
    // lattice's engine on a machine file that measured its kernels (`sim --calibrate`): the work
    // each rank does whole on one thread, at every rank count (the one-rank fit too, whose
    // efficiencies then leave it out), and the matmul's rate on a tensor-parallel slice.
    if (prof.comm == CommStyle::kLattice) {
      const double hold = m.cores > 0 ? std::min(1.0, m.cores_held(1, share)) : 1.0;
      const double us_per_ns = 1e-3 / std::max(hold, 1e-3) / sus;  // a core held part of the time
      k.replicated_us = m.replicated_ns * us_per_ns;
      k.moe_router_us = m.moe_router_ns * us_per_ns;
      k.moe_row_us = m.moe_row_ns * us_per_ns;
      if (L.mode != Mode::kPipeline && L.tp > 1) k.flops *= m.slice_rate(L.tp);
    }
  }
  std::mt19937 sync_rng(2026);
  Collectives coll{&prof, all_rma && !cables.empty(), &sync_rng};
  LATTICE_ASSIGN_OR_RETURN(Colocated colo, colocated_cost(prof, ranks, chosen, rank_of, coll));
  coll.colocated_us = colo.extra_us;
  coll.colocated_us_per_byte = colo.per_byte_us;
  if (!on_core.empty())
    for (const Rank& k : ranks) coll.core_of.push_back(k.core);
  // Ranks that meet at every collective on one machine: each on cores of its own, the machine
  // file's lockstep figure for that many. Beyond the cores each core runs its ranks' segments in
  // turn and the cores meet at every collective as that many ranks would: the figure for as many
  // ranks as cores (the turns model adds the hand-overs). Joined by a provider whose own figure
  // it measured against shm (the emulated verbs device), that too, or its pace over shm's in place
  // of it where measured.
  if (L.mode != Mode::kPipeline && W > 1 && one_machine(ranks)) {
    const Machine& m = ranks[0].machine;
    const int threads = std::max(1, o.threads);
    const int in_step = m.cores > 0 && W * threads > m.cores ? std::max(1, m.cores / threads) : W;
    const auto it = m.lockstep_scaling.find(in_step);
    if (it != m.lockstep_scaling.end()) coll.lockstep = it->second;
    if (const MeasuredLink* link = colocated_link(ranks, chosen)) {
      const auto own = link->lockstep_scaling.find(W);
      if (own != link->lockstep_scaling.end()) coll.link_lockstep = own->second;
      coll.link_lockstep_fades = colo.prefill_measured;
      const auto over = link->lockstep_over_shm_us.find(W);
      const auto slope = link->lockstep_over_shm_slope.find(W);
      if (over != link->lockstep_over_shm_us.end() && slope != link->lockstep_over_shm_slope.end()) {
        coll.link_over_us = over->second;
        coll.link_over_slope = slope->second;
      }
    }
  }
  // Pipeline stages on one machine joined by a provider whose chain it measured against shm (the
  // emulated verbs device: the waiting stages' polls and its progress threads share the cores).
  if (L.mode == Mode::kPipeline && prof.comm == CommStyle::kLattice && W > 1) {
    if (const MeasuredLink* link = colocated_link(ranks, chosen)) {
      const auto at = link->pipeline_scaling.find(W);
      if (at != link->pipeline_scaling.end()) coll.stages = at->second;
    }
  }
  // Ranks in lockstep holding every core of one machine, joined by emulated tcp links (a latency
  // or rate on tcp between processes of one machine: `run --provider 'tcp?latency_us=..'`, whose
  // link emulator relays every byte): the relays' CPU (MeasuredLink::emulator_cpu_us, an 8 KiB
  // all-reduce among W ranks) comes out of the cores the ranks compute on, so each message of
  // every collective holds each rank its share of it. That holds with as many ranks as cores too
  // (session 30: two ranks' lockstep step over a relay of no latency 48-99 us a call longer than
  // over plain tcp, the relays' CPU 58-92 us a call in the same runs); where cores are left over
  // the relays run there, and pipeline stages leave cores to them: not charged. The relay is
  // lattice's tcp provider's: other engines pay nothing.
  double emulator_cpu_us = 0;
  if (prof.comm == CommStyle::kLattice && L.mode != Mode::kPipeline && W > 1 &&
      common_provider(chosen) == cluster::LinkProvider::kTcp &&
      std::all_of(chosen.begin(), chosen.end(), [](const cluster::Link* l) { return l->latency_us || l->gbps; })) {
    const Machine& m = ranks[0].machine;
    const MeasuredLink* link = colocated_link(ranks, chosen);
    if (m.cores > 0 && W * o.threads >= m.cores && link != nullptr) {
      const auto at = link->emulator_cpu_us.find(W);
      if (at != link->emulator_cpu_us.end()) {
        Des probe(W, cables);
        LATTICE_ASSIGN_OR_RETURN(Collectives::Sched s, coll.make(probe, CollOp::kAllReduce, 2048, 4.0));
        const double msgs = static_cast<double>(Collectives::messages(s) * static_cast<size_t>(s.repeat));
        if (msgs > 0) {
          emulator_cpu_us = at->second;
          coll.emulator_us_per_msg = at->second / msgs / m.cores;
        }
      }
    }
  }
  Runner run(shape, L, ranks, prof, coll);

  // Pipeline stages follow the route through the cables, as `run --parallel pp` places them.
  std::vector<int> order(W);
  for (int r = 0; r < W; ++r) order[r] = r;
  Des probe(W, cables);
  if (L.mode == Mode::kPipeline && W > 1 && prof.comm != CommStyle::kRpcStar) {
    auto route = coll::plan::find_route(W, [&](int i, int j) { return probe.linked(i, j); });
    if (route.order.empty()) return Unavailable("sim: the cables do not join every node");
    order = route.order;
  }

  SimResult R;
  R.colocated_allreduce_us = colo.measured_us;
  R.colocated_sync_us = colo.extra_us;
  R.colocated_allreduce_256k_us = colo.measured_large_us;
  R.colocated_sync_us_per_kib = colo.per_byte_us * 1024;
  R.lockstep_scaling = coll.lockstep * (coll.link_over_us >= 0 ? 1.0 : coll.link_lockstep);
  R.lockstep_over_shm_us = coll.link_over_us;
  R.lockstep_over_shm_slope = coll.link_over_slope;
  R.lockstep_256k_over_shm_us = colo.prefill_extra_us;
  for (const auto& [core, n] : on_core) R.core_turns = std::max(R.core_turns, n);
  R.pipeline_scaling = coll.stages;
  R.emulator_cpu_us = emulator_cpu_us;
  R.emulator_us_per_msg = coll.emulator_us_per_msg;
  R.model = shape.name;
  R.engine = prof.name;
  R.why = L.why;
  R.mode = L.mode;
  R.world = W;
  R.tp = L.tp;
  R.pp = L.pp;
  R.fits = L.fits;
  R.missing_bytes = L.missing_bytes;
  R.model_bytes = shape.total_bytes();
  R.bytes_per_token = shape.bytes_per_step(o.batch) / o.batch;

  // Decode: one step of `batch` sequences at the end of the prompt.
  Des dec(W, cables);
  Step ds{o.batch, o.batch, double(o.prompt)};
  if (L.mode == Mode::kPipeline) {
    LATTICE_RETURN_IF_ERROR(run.pipeline_step(dec, ds, order, true));
  } else {
    LATTICE_RETURN_IF_ERROR(run.tensor_step(dec, ds, &R.allreduce));
  }
  if (o.token_overhead_ms > 0) {
    // After the step, on every rank at once: the next token waits for it on each of them.
    dec.barrier();
    for (int r = 0; r < W; ++r) dec.work(r, o.token_overhead_ms * 1e3, false);
  }
  const double token_us = dec.now();
  R.token_ms = token_us / 1e3;
  R.decode_tok_s = o.batch * 1e6 / token_us;

  // Prefill: the prompt in steps of the engine's batch rows (micro-batches through a pipeline).
  Des pre(W, cables);
  const uint32_t batch = W == 1 && prof.solo_prefill_batch && !o.one_node_distributed ? prof.solo_prefill_batch
                         : L.mode == Mode::kPipeline && prof.pp_micro_batch ? prof.pp_micro_batch
                                                                             : prof.prefill_batch;
  // The last step holds what is left of the prompt, fewer rows than the others when the batch
  // does not divide it.
  const uint32_t rows = std::min(o.prompt, batch);
  const uint32_t n_steps = (o.prompt + rows - 1) / rows;
  const uint32_t last_rows = o.prompt - (n_steps - 1) * rows;
  double prefill_us = 0;
  if (L.mode == Mode::kPipeline) {
    for (uint32_t i = 0; i < n_steps; ++i) {
      const uint32_t r = i + 1 == n_steps ? last_rows : rows;
      Step ps{r, 1, i * rows + r / 2.0};
      LATTICE_RETURN_IF_ERROR(run.pipeline_step(pre, ps, order, i + 1 == n_steps));
    }
    prefill_us = pre.now();
  } else {
    // Steps at the prompt's middle position; the full ones alike, then the last.
    Step ps{rows, 1, o.prompt / 2.0};
    LATTICE_RETURN_IF_ERROR(run.tensor_step(pre, ps, nullptr));
    prefill_us = pre.now() * (n_steps - 1);
    if (last_rows == rows) {
      prefill_us += pre.now();
    } else {
      Des tail(W, cables);
      Step ts{last_rows, 1, o.prompt / 2.0};
      LATTICE_RETURN_IF_ERROR(run.tensor_step(tail, ts, nullptr));
      prefill_us += tail.now();
    }
  }
  R.ttft_ms = prefill_us / 1e3;
  R.prefill_tok_s = o.prompt * 1e6 / prefill_us;

  // Where the time goes: the node that waited least is the one the others waited for.
  int crit = 0;
  for (int r = 1; r < W; ++r)
    if (dec.breakdown(r).sync_us < dec.breakdown(crit).sync_us) crit = r;
  R.token = dec.breakdown(crit);
  std::map<std::string, double> phys_power;
  for (int r = 0; r < W; ++r) {
    NodeResult n;
    n.name = ranks[r].name;
    n.machine = ranks[r].machine.name;
    n.part = L.nodes[r].part;
    n.share = L.nodes[r];
    n.token = dec.breakdown(r);
    n.read_gbs = ranks[r].read_gbs;
    n.power_w = ranks[r].machine.power_load_w;
    n.throttles = ranks[r].machine.throttles;
    phys_power[ranks[r].phys] = std::max(phys_power[ranks[r].phys], n.power_w);
    R.nodes.push_back(std::move(n));
  }
  double watts = 0;
  for (const auto& [p, w] : phys_power) watts += w;
  R.energy_j_per_token = watts * token_us / 1e6 / o.batch;
  for (size_t c = 0; c < dec.cables().size(); ++c) {
    const Cable& cb = dec.cables()[c];
    const CableStats& st = dec.cable_stats()[c];
    LinkResult lr;
    lr.a = ranks[cb.a].name;
    lr.b = ranks[cb.b].name;
    lr.medium = cb.model.medium;
    lr.latency_us = cb.model.latency_us;
    lr.gbytes_s = cb.model.gbytes_s;
    lr.bytes_per_token_ab = st.bytes_ab / o.batch;
    lr.bytes_per_token_ba = st.bytes_ba / o.batch;
    lr.busy_fraction = token_us > 0 ? st.busy_us / (2 * token_us) : 0;
    R.links.push_back(std::move(lr));
  }
  return R;
}

namespace {

// Bisection over (0, 1] of the efficiency `set` writes into the options, for `measure` of the
// result to reach tok_s at fit_hosts hosts.
template <typename Set, typename Measure>
Result<double> fit_efficiency(const ModelShape& shape, const cluster::Topology& topo, SimOptions o, int fit_hosts,
                              double tok_s, const char* what, Set set, Measure measure, double most = 1.0) {
  if (tok_s <= 0) return InvalidArgument("sim: the figure to fit must be positive");
  o.hosts = fit_hosts;
  double lo = 1e-3, hi = most;
  set(o, hi);
  LATTICE_ASSIGN_OR_RETURN(SimResult top, simulate(shape, topo, o));
  if (measure(top) < tok_s)
    return InvalidArgument(std::string("sim: even at ") + (most > 1 ? std::to_string(most) + " x " : "full ") + what +
                           " the model predicts " +
                           std::to_string(measure(top)) + " tok/s at " + std::to_string(fit_hosts) + " hosts, below " +
                           std::to_string(tok_s));
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    set(o, mid);
    LATTICE_ASSIGN_OR_RETURN(SimResult r, simulate(shape, topo, o));
    (measure(r) < tok_s ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace

Result<double> fit_decode_efficiency(const ModelShape& shape, const cluster::Topology& topo, SimOptions o,
                                     int fit_hosts, double tok_s, double top) {
  return fit_efficiency(
      shape, topo, o, fit_hosts, tok_s, "bandwidth", [](SimOptions& x, double e) { x.decode_efficiency = e; },
      [](const SimResult& r) { return r.decode_tok_s; }, top);
}

Result<double> fit_prefill_efficiency(const ModelShape& shape, const cluster::Topology& topo, SimOptions o,
                                      int fit_hosts, double tok_s, double top) {
  return fit_efficiency(
      shape, topo, o, fit_hosts, tok_s, "compute", [](SimOptions& x, double e) { x.prefill_efficiency = e; },
      [](const SimResult& r) { return r.prefill_tok_s; }, top);
}

Result<SimOptions> calibrate_one_node(const ModelShape& shape, const cluster::Topology& topo, SimOptions o,
                                      const OneNodeFigures& f) {
  if (f.decode_tok_s <= 0) return InvalidArgument("sim: the one-node figures have no decode rate");
  if (f.threads < 1) return InvalidArgument("sim: the one-node figures need a thread count");
  if (f.outside_ms < 0) return InvalidArgument("sim: the one-node figures' time outside the step is negative");
  o.token_overhead_ms = f.outside_ms;
  o.one_node_distributed = f.distributed;
  SimOptions one = o;
  one.threads = f.threads;
  one.batch = 1;
  one.prompt = std::max<uint32_t>(1, f.decode_pos);
  // Above 1 when the run read faster than the machine file's streaming figure (measured while
  // other work held the machine): the fit still reproduces the run, the caller says so.
  if (f.prefill_tok_s <= 0) {
    LATTICE_ASSIGN_OR_RETURN(double d, fit_decode_efficiency(shape, topo, one, 1, f.decode_tok_s, kMaxCalibratedEfficiency));
    o.decode_efficiency = d;
    return o;
  }
  if (f.prefill_tokens < 1) return InvalidArgument("sim: the one-node prefill figure has no prompt length");
  // A token's work takes the longer of its reads and its multiply-adds, these at prefill's
  // efficiency (work() above). Decode fitted before that efficiency is known takes the
  // profile's, and a decode faster than its multiply-adds allow cannot be fitted at all
  // (session 39: one rank of the 1.1B Llama at 22.6 tok/s where 0.186 TFLOP/s at 0.5 allow
  // 22.3, whatever the bandwidth). So decode is fitted first with the multiply-adds at their
  // most, prefill on it, and each again on the other's figure (prefill's only when decode's
  // moved: a read-bound decode fits the same either way).
  SimOptions pre = one;
  pre.prompt = f.prefill_tokens;
  one.prefill_efficiency = kMaxCalibratedEfficiency;
  double d = 0, p = 0;
  for (int pass = 0; pass < 2; ++pass) {
    auto dd = fit_decode_efficiency(shape, topo, one, 1, f.decode_tok_s, kMaxCalibratedEfficiency);
    if (!dd.ok()) return dd.status().with_context("the one-node decode figure");
    if (pass > 0 && *dd == d) break;
    d = pre.decode_efficiency = *dd;
    auto pp = fit_prefill_efficiency(shape, topo, pre, 1, f.prefill_tok_s, kMaxCalibratedEfficiency);
    if (!pp.ok()) return pp.status().with_context("the one-node prefill figure");
    p = one.prefill_efficiency = *pp;
  }
  o.decode_efficiency = d;
  o.prefill_efficiency = p;
  return o;
}

}  // namespace lattice::sim
