// `lattice plan -m FILE (--hostfile FILE | --nodes N) [--parallel tp|pp|ep|auto] [--ctx N] [--json]`:
// the layout a distributed run would use (TP degree, PP stages, experts per node, bytes per
// node, traffic per token), from the GGUF tensor table and the hosts' memory_gb (hosts without it: this
// machine's available memory). Refuses (exit 1) a model that cannot fit, saying how much
// memory is missing. Nothing is loaded: the file is only mapped for its header.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "engine_cli.h"
#include "lattice/cluster/topology.h"
#include "lattice/engine/parallel/plan.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/model/shard.h"
#include "lattice/engine/runtime/forward.h"

namespace lattice::cli {
namespace {

struct PlanArgs {
  std::string model, hostfile, parallel = "auto";
  int nodes = 0;
  int ctx = 0;
  bool json = false;
};

uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

int run_plan(const PlanArgs& a) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "lattice plan: %s\n", m.c_str());
    return 2;
  };
  using engine::parallel::ParallelMode;
  ParallelMode mode;
  if (a.parallel == "auto") mode = ParallelMode::kAuto;
  else if (a.parallel == "tp") mode = ParallelMode::kTensor;
  else if (a.parallel == "pp") mode = ParallelMode::kPipeline;
  else if (a.parallel == "ep") mode = ParallelMode::kExpert;
  else return fail("--parallel must be tp, pp, ep or auto");
  if ((a.nodes > 0) == !a.hostfile.empty()) return fail("give --hostfile FILE or --nodes N");
  std::vector<engine::parallel::NodeSpec> nodes;
  const uint64_t local = mem_available();
  if (!a.hostfile.empty()) {
    auto topo = cluster::load_topology(a.hostfile);
    if (!topo.ok()) return fail(topo.status().to_string());
    for (const auto& h : topo->hosts)
      nodes.push_back({h.name, h.memory_gb ? static_cast<uint64_t>(*h.memory_gb * (1ull << 30)) : local});
  } else {
    if (a.nodes > 256) return fail("--nodes: at most 256");
    // Local ranks share this machine's memory.
    for (int i = 0; i < a.nodes; ++i) nodes.push_back({"rank" + std::to_string(i), local / a.nodes});
  }
  engine::OpenOptions oo;
  auto file = engine::GgufFile::open(a.model, oo);
  if (!file.ok()) return fail(file.status().to_string());
  auto p = engine::parallel::plan_placement(**file, nodes, mode, static_cast<uint32_t>(a.ctx));
  if (!p.ok()) return fail(p.status().to_string());
  // Expert parallel: the prefill path the engine's cost model picks for this placement.
  engine::EpPrefillCost cost;
  if (p->mode == ParallelMode::kExpert) {
    auto name = (*file)->metadata().get_string("general.architecture");
    const engine::ArchInfo* arch = name.ok() ? engine::find_arch(*name) : nullptr;
    auto hp = arch ? engine::read_hparams((*file)->metadata(), *arch) : Result<engine::Hparams>(NotFound("architecture"));
    if (hp.ok()) {
      std::vector<double> mem;
      for (const auto& n : nodes) mem.push_back(double(n.memory_bytes));
      const std::vector<int> owner = engine::place_experts(hp->n_expert, int(nodes.size()), mem);
      cost = engine::ep_prefill_cost(
          *hp, int(nodes.size()), [&](uint32_t, uint32_t e) { return owner[e]; }, [](int) { return true; });
    }
  }
  const char* mode_name = p->mode == ParallelMode::kTensor   ? "tp"
                          : p->mode == ParallelMode::kExpert ? "ep"
                                                             : "pp";
  if (a.json) {
    nlohmann::json j = {{"mode", mode_name}, {"tp", p->tp}, {"pp", p->pp}, {"n_ctx", p->n_ctx},
                        {"model_bytes", p->model_bytes}, {"fits", p->fits}, {"missing_bytes", p->missing_bytes},
                        {"why", p->why}};
    if (p->mode == ParallelMode::kExpert)
      j["ep_prefill"] = {{"a2a_min_rows", cost.min_rows}, {"rule", engine::describe(engine::EpPrefill::kAuto, cost.min_rows)},
                         {"reduce_floats_per_row", cost.reduce_floats_per_row},
                         {"a2a_floats_per_row", cost.a2a_floats_per_row}};
    for (const auto& n : p->nodes)
      j["nodes"].push_back({{"name", n.name}, {"part", n.part}, {"weight_bytes", n.weight_bytes},
                            {"kv_bytes", n.kv_bytes}, {"total_bytes", n.total_bytes},
                            {"memory_bytes", n.memory_bytes}, {"sent_per_token", n.sent_per_token},
                            {"experts", n.experts}, {"expert_bytes", n.expert_bytes}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("model %s: %s of weights; context %u\n", a.model.c_str(), human_bytes(p->model_bytes).c_str(),
                p->n_ctx);
    std::printf("layout: %s, TP degree %d, PP stages %d (%s)\n", mode_name, p->tp, p->pp, p->why.c_str());
    if (p->mode == ParallelMode::kExpert)
    {
      std::printf("  sends: per node and link per token, two all-reduces of the hidden state a layer\n");
      std::printf("  prefill: %s; per row of a step a node sends %.0f floats (reduce) or %.0f (all-to-all)\n",
                  engine::describe(engine::EpPrefill::kAuto, cost.min_rows).c_str(), cost.reduce_floats_per_row,
                  cost.a2a_floats_per_row);
    }
    for (const auto& n : p->nodes)
      std::printf("  %-12s %-48s weights %10s  kv %9s  total %10s of %10s  sends %s/token\n", n.name.c_str(),
                  n.part.c_str(), human_bytes(n.weight_bytes).c_str(), human_bytes(n.kv_bytes).c_str(),
                  human_bytes(n.total_bytes).c_str(), human_bytes(n.memory_bytes).c_str(),
                  human_bytes(n.sent_per_token).c_str());
  }
  if (!p->fits) {
    std::fprintf(stderr, "lattice plan: the model does not fit: %s of memory missing\n",
                 human_bytes(p->missing_bytes).c_str());
    return 1;
  }
  return 0;
}

Registrar plan_cmd{{"plan", "show how a model would be placed on a cluster (TP/PP/EP layout, bytes, traffic)",
                    [](CLI::App& app) {
                      auto a = std::make_shared<PlanArgs>();
                      app.add_option("-m,--model", a->model, "GGUF file")->required();
                      app.add_option("--hostfile", a->hostfile, "topology file or MLX hostfile (memory_gb per host)");
                      app.add_option("--nodes", a->nodes, "N local ranks sharing this machine's memory");
                      app.add_option("--parallel", a->parallel, "tp, pp, ep (experts by memory) or auto")->capture_default_str();
                      app.add_option("--ctx", a->ctx, "context for the KV cache (0: training context, <= 4096)");
                      app.add_flag("--json", a->json, "print JSON");
                      return [a] { return run_plan(*a); };
                    }}};

}  // namespace
}  // namespace lattice::cli
