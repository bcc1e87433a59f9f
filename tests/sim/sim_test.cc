// The simulator end to end on built-in shapes and topologies written here.
#include <fstream>

#include <gtest/gtest.h>

#include "lattice/sim/machine.h"
#include "lattice/sim/sim.h"
#include "sim_testlib.h"

namespace lattice::sim {
namespace {

using testing::mesh;

SimResult sim(const std::string& preset, const cluster::Topology& t, SimOptions o = {}) {
  auto s = shape_preset(preset);
  EXPECT_TRUE(s.ok());
  auto r = simulate(*s, t, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : SimResult{};
}

// A link measured at `latency_us` one way and `gbytes_s`, nothing else measured.
MeasuredLink link(double latency_us, double gbytes_s) {
  MeasuredLink l;
  l.latency_us = latency_us;
  l.gbytes_s = gbytes_s;
  return l;
}

TEST(Sim, OneNodeDecodeIsBandwidthOverBytes) {
  auto t = mesh(1, "m3-ultra", "verbs", "tb5");
  SimOptions o;
  o.engine = "mlx";
  auto r = sim("qwen3-235b-a22b-q8", t, o);
  auto s = *shape_preset("qwen3-235b-a22b-q8");
  const double kv = 512.0 * s.kv_elems_per_token_layer() * 2 * s.n_layer;
  const double expect = 819e9 * 0.75 / (s.bytes_per_step(1) + kv);
  EXPECT_NEAR(r.decode_tok_s / expect, 1.0, 0.01);
  EXPECT_NEAR(r.token.weights_us / 1e3, r.token_ms, 1e-6);
  EXPECT_TRUE(r.links.empty());
  EXPECT_GT(r.energy_j_per_token, 0);
  EXPECT_GT(r.prefill_tok_s, r.decode_tok_s);
  EXPECT_NEAR(r.ttft_ms, 512 / r.prefill_tok_s * 1e3, 1e-6);
}

TEST(Sim, MoreNodesOverRdmaDecodeFasterThanTcp) {
  auto rdma = mesh(4, "m3-ultra", "verbs", "tb5");
  auto tcp = mesh(4, "m3-ultra", "tcp", "tb5");
  SimOptions o;
  o.engine = "mlx";
  double prev = 0;
  for (int k = 1; k <= 4; k *= 2) {
    o.hosts = k;
    auto r = sim("qwen3-235b-a22b-q8", rdma, o);
    EXPECT_GT(r.decode_tok_s, prev) << k;
    prev = r.decode_tok_s;
    auto t = sim("qwen3-235b-a22b-q8", tcp, o);
    if (k > 1) {
      EXPECT_LT(t.decode_tok_s, r.decode_tok_s) << k;
      EXPECT_GT(t.token.latency_us, r.token.latency_us) << k;
    }
  }
}

TEST(Sim, BytesPerLinkFollowTheSchedule) {
  // Two nodes, one cable: per layer two one-shot all-reduces of the hidden state (bf16), plus
  // the argmax gather (2 x 4 bytes).
  auto t = mesh(2, "m3-ultra", "verbs", "tb5");
  SimOptions o;
  o.engine = "mlx";
  auto r = sim("llama-1.1b-q4", t, o);
  ASSERT_EQ(r.links.size(), 1u);
  EXPECT_DOUBLE_EQ(r.links[0].bytes_per_token_ab, 22 * 2 * 2048 * 2 + 8);
  EXPECT_DOUBLE_EQ(r.links[0].bytes_per_token_ab, r.links[0].bytes_per_token_ba);
  EXPECT_EQ(r.allreduce, "oneshot (jaccl)");
}

TEST(Sim, RingOfCablesUsesTheRoute) {
  auto t = mesh(4, "m3-ultra", "verbs", "tb5", /*ring=*/true);
  SimOptions o;
  o.engine = "mlx";
  auto r = sim("qwen3-235b-a22b-q8", t, o);
  EXPECT_EQ(r.allreduce, "ring route");
  auto full = sim("qwen3-235b-a22b-q8", mesh(4, "m3-ultra", "verbs", "tb5"), o);
  EXPECT_LT(r.decode_tok_s, full.decode_tok_s);
}

TEST(Sim, PipelineAndExpertParallel) {
  auto t = mesh(4, "m3-ultra", "verbs", "tb5");
  SimOptions o;
  o.engine = "mlx";
  o.mode = Mode::kPipeline;
  auto pp = sim("qwen3-235b-a22b-q8", t, o);
  EXPECT_EQ(pp.mode, Mode::kPipeline);
  EXPECT_EQ(pp.pp, 4);
  o.mode = Mode::kTensor;
  auto tp = sim("qwen3-235b-a22b-q8", t, o);
  EXPECT_GT(tp.decode_tok_s, pp.decode_tok_s);  // one sequence: stages take turns
  // A pipeline moves one hidden state (4096 bf16) over each stage boundary h0-h1-h2-h3; the
  // token broadcast from the last stage adds a few bytes elsewhere.
  int carrying = 0;
  for (const auto& l : pp.links) carrying += l.bytes_per_token_ab == 4096 * 2;
  EXPECT_EQ(carrying, 3);
  o.mode = Mode::kExpert;
  auto ep = sim("qwen3-235b-a22b-q8", t, o);
  EXPECT_EQ(ep.mode, Mode::kExpert);
  EXPECT_GT(ep.decode_tok_s, 0);
}

TEST(Sim, BatchRaisesAggregateThroughput) {
  auto t = mesh(2, "m3-ultra", "verbs", "tb5");
  SimOptions o;
  o.engine = "mlx";
  auto one = sim("llama-1.1b-q4", t, o);
  o.batch = 8;
  auto eight = sim("llama-1.1b-q4", t, o);
  EXPECT_GT(eight.decode_tok_s, 3 * one.decode_tok_s);
}

TEST(Sim, ErrorsNameTheProblem) {
  auto s = *shape_preset("llama-1.1b-q4");
  auto t = mesh(2, "m2-ultra", "verbs", "tb5");
  auto r = simulate(s, t, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no Thunderbolt 5 port"), std::string::npos) << r.status().to_string();
  auto none = cluster::parse_topology(R"({"version": 1, "hosts": [{"name": "a", "address": "1.2.3.4"}]})", "t.json");
  ASSERT_TRUE(none.ok());
  r = simulate(s, *none, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has no \"machine\""), std::string::npos);
  SimOptions o;
  o.hosts = 3;
  EXPECT_FALSE(simulate(s, mesh(2, "m3-ultra", "verbs", "tb5"), o).ok());
  o = {};
  o.engine = "vllm";
  EXPECT_FALSE(simulate(s, mesh(2, "m3-ultra", "verbs", "tb5"), o).ok());
  // Six cables on one M3 Ultra: it has five usable ports.
  auto seven = mesh(7, "m3-ultra", "verbs", "tb5");
  r = simulate(s, seven, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ports"), std::string::npos) << r.status().to_string();
}

TEST(Sim, FitFindsTheEfficiency) {
  auto t = mesh(2, "m3-ultra", "verbs", "tb5");
  auto s = *shape_preset("qwen3-235b-a22b-q8");
  SimOptions o;
  o.engine = "mlx";
  auto e = fit_decode_efficiency(s, t, o, 1, 19.5);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  o.decode_efficiency = *e;
  o.hosts = 1;
  EXPECT_NEAR(simulate(s, t, o)->decode_tok_s, 19.5, 0.01);
  EXPECT_FALSE(fit_decode_efficiency(s, t, o, 1, 1000).ok());
}

// (Not "...Slowest...": a test name holding "Slow" is labelled slow and left out of the default run.)
TEST(Sim, MlxRanksWaitForTheLastOfTheirSynchronisations) {
  // Qwen3: 94 layers, two all-reduces each and the token's gather: 189 collectives a token. Each
  // rank's own cost is an exponential draw of mean 58 / 1.5 us; every rank waits for the largest
  // of W: 58 us on average at two ranks, 58 / 1.5 x (1 + 1/2 + 1/3 + 1/4) = 80.6 us at four.
  auto s = *shape_preset("qwen3-235b-a22b-q8");
  SimOptions o;
  o.engine = "mlx";
  o.mode = Mode::kTensor;
  auto per_collective = [&](int n) {
    auto r = simulate(s, mesh(n, "m3-ultra", "verbs", "tb5"), o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->token.sync_us / 189 : 0.0;
  };
  const double two = per_collective(2), four = per_collective(4);
  EXPECT_NEAR(two, 58, 58 * 0.15);
  EXPECT_NEAR(four, 80.6, 80.6 * 0.15);
  EXPECT_NEAR(four / two, 80.6 / 58, 0.15);
  // The lattice engine has no such cost: what its ranks wait for is the staged verbs protocol's
  // whole slots and the acks sharing the way back (link.h), a fraction of MLX's draws.
  ASSERT_TRUE(engine_profile("lattice").ok());
  EXPECT_EQ(engine_profile("lattice")->sync_us, 0);
  o.engine = "lattice";
  const double lattice_four = per_collective(4);
  EXPECT_LT(lattice_four, four / 3) << lattice_four;
}

TEST(Sim, PrefillFitRecoversTheComputeEfficiency) {
  auto t = mesh(1, "m3-ultra", "verbs", "tb5");
  auto s = *shape_preset("llama-1.1b-q4");
  SimOptions o;
  o.prompt = 256;
  o.prefill_efficiency = 0.3;
  auto at = simulate(s, t, o);
  ASSERT_TRUE(at.ok());
  o.prefill_efficiency = 0.6;
  EXPECT_GT(simulate(s, t, o)->prefill_tok_s, 1.5 * at->prefill_tok_s);  // compute-bound here
  o.prefill_efficiency = 0;
  auto e = fit_prefill_efficiency(s, t, o, 1, at->prefill_tok_s);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_NEAR(*e, 0.3, 1e-3);
  EXPECT_FALSE(fit_prefill_efficiency(s, t, o, 1, 1e9).ok());
}

// Tensor parallel on the first host alone at a known decode efficiency, decoding at position 40.
SimOptions one_node(double decode_efficiency) {
  SimOptions o;
  o.mode = Mode::kTensor;
  o.hosts = 1;
  o.decode_efficiency = decode_efficiency;
  o.prompt = 40;  // the decode's average position
  return o;
}

TEST(Sim, APromptsLastPartialStepCostsItsOwnRows) {
  // lattice's engine prefills 64 rows a step over several nodes: a prompt of 65 is one full step
  // and a step of one row, not two full steps; compute-bound, 65 rows take about 65/64 of 64's time.
  auto t = mesh(2, "m3-ultra", "verbs", "tb5");
  auto s = *shape_preset("llama-1.1b-q4");
  SimOptions o;
  o.mode = Mode::kTensor;
  o.prefill_efficiency = 0.3;
  o.prompt = 64;
  auto full = simulate(s, t, o);
  o.prompt = 65;
  auto more = simulate(s, t, o);
  o.prompt = 128;
  auto two = simulate(s, t, o);
  ASSERT_TRUE(full.ok() && more.ok() && two.ok());
  EXPECT_LT(more->ttft_ms, 1.2 * full->ttft_ms);
  EXPECT_GT(more->ttft_ms, full->ttft_ms);
  EXPECT_NEAR(two->ttft_ms, 2 * full->ttft_ms, 0.05 * full->ttft_ms);
  // A pipeline's micro-batches too (32 rows): 33 rows are one micro-batch and a row.
  o.mode = Mode::kPipeline;
  o.prompt = 32;
  auto pp32 = simulate(s, t, o);
  o.prompt = 33;
  auto pp33 = simulate(s, t, o);
  ASSERT_TRUE(pp32.ok() && pp33.ok());
  EXPECT_LT(pp33->ttft_ms, 1.6 * pp32->ttft_ms);
}

TEST(Sim, ARunOfOneRankThroughTheDistributedPathPrefillsInItsSteps) {
  // One process prefills 256 rows a step, `run --nodes 1` 64 like several ranks: a 100-token
  // prompt is one step or two (64 + 36). Calibrated on a figure of the latter, the fit finds the
  // efficiency it was made with and keeps the path for the predictions.
  auto t = mesh(2, "m4-pro", "tcp", "10gbe");
  auto s = *shape_preset("llama-1.1b-q4");
  SimOptions o = one_node(0.45);
  o.prefill_efficiency = 0.2;
  o.one_node_distributed = true;
  o.prompt = 100;
  auto dist = simulate(s, t, o);
  o.one_node_distributed = false;
  auto solo = simulate(s, t, o);
  ASSERT_TRUE(dist.ok() && solo.ok());
  EXPECT_NE(dist->ttft_ms, solo->ttft_ms);
  OneNodeFigures f;
  f.decode_tok_s = dist->decode_tok_s;
  f.decode_pos = 40;
  f.prefill_tok_s = dist->prefill_tok_s;
  f.prefill_tokens = 100;
  f.distributed = true;
  SimOptions fresh;
  fresh.mode = Mode::kTensor;
  auto c = calibrate_one_node(s, t, fresh, f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->one_node_distributed);
  EXPECT_NEAR(c->prefill_efficiency, 0.2, 1e-3);
}

TEST(Sim, OneNodeCalibrationReproducesTheMeasuredFigures) {
  // Figures of one node at known efficiencies; calibrating on them finds those efficiencies, and
  // the two-node prediction is what the simulator gives at them.
  auto t = mesh(2, "m4-pro", "tcp", "10gbe");
  auto s = *shape_preset("llama-1.1b-q4");
  SimOptions o = one_node(0.45);
  o.prefill_efficiency = 0.2;
  auto dec = simulate(s, t, o);
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  o.prompt = 64;
  auto pre = simulate(s, t, o);
  ASSERT_TRUE(pre.ok());
  OneNodeFigures f;
  f.decode_tok_s = dec->decode_tok_s;
  f.decode_pos = 40;
  f.prefill_tok_s = pre->prefill_tok_s;
  f.prefill_tokens = 64;
  SimOptions fresh;
  fresh.mode = Mode::kTensor;
  auto c = calibrate_one_node(s, t, fresh, f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_NEAR(c->decode_efficiency, 0.45, 1e-3);
  EXPECT_NEAR(c->prefill_efficiency, 0.2, 1e-3);
  EXPECT_EQ(c->hosts, 0);  // the prediction still uses every host
  o.hosts = 0;
  o.prompt = 512;
  auto two = simulate(s, t, o), fitted = simulate(s, t, *c);
  ASSERT_TRUE(two.ok() && fitted.ok());
  EXPECT_NEAR(fitted->decode_tok_s, two->decode_tok_s, 1e-3 * two->decode_tok_s);
  EXPECT_FALSE(calibrate_one_node(s, t, fresh, OneNodeFigures{}).ok());
  f.decode_tok_s = 1e6;  // beyond the machine's bandwidth
  EXPECT_FALSE(calibrate_one_node(s, t, fresh, f).ok());
}

TEST(Sim, TheTimeOutsideTheStepIsKeptWholeOnEveryRank) {
  // A token's time outside the forward step (sampling, the generator) does not shrink with the
  // ranks: it adds the same to one node's token as to four's, and calibrating on a one-node run
  // that reports it finds the step's efficiency alone.
  auto s = *shape_preset("llama-1.1b-q4");
  for (int W : {1, 4}) {
    auto t = mesh(W, "m4-pro", "tcp", "10gbe");
    SimOptions o;
    o.mode = Mode::kTensor;
    o.decode_efficiency = 0.45;
    auto base = simulate(s, t, o);
    o.token_overhead_ms = 0.6;
    auto more = simulate(s, t, o);
    ASSERT_TRUE(base.ok() && more.ok()) << W;
    EXPECT_NEAR(more->token_ms - base->token_ms, 0.6, 0.01) << W << " nodes";
  }
  auto t = mesh(2, "m4-pro", "tcp", "10gbe");
  SimOptions o = one_node(0.45);
  o.token_overhead_ms = 0.6;
  auto one = simulate(s, t, o);
  ASSERT_TRUE(one.ok());
  OneNodeFigures f;
  f.decode_tok_s = one->decode_tok_s;
  f.decode_pos = 40;
  f.outside_ms = 0.6;
  SimOptions fresh;
  fresh.mode = Mode::kTensor;
  auto c = calibrate_one_node(s, t, fresh, f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_NEAR(c->decode_efficiency, 0.45, 1e-3);
  EXPECT_DOUBLE_EQ(c->token_overhead_ms, 0.6);
  f.outside_ms = -1;
  EXPECT_FALSE(calibrate_one_node(s, t, fresh, f).ok());
}

TEST(Sim, JsonHasTheDocumentedKeys) {
  auto r = sim("llama-1.1b-q4", mesh(2, "m4-pro", "verbs", "tb5"));
  auto j = to_json(r);
  for (const char* k : {"decode_tok_s", "prefill_tok_s", "ttft_ms", "nodes", "links", "token_breakdown",
                        "energy_j_per_token"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["links"].size(), 1u);
  EXPECT_FALSE(render_text(r).empty());
}

TEST(Machine, FileRoundTripAndErrors) {
  auto m = machine_preset("m3-ultra");
  ASSERT_TRUE(m.ok());
  m->links["tcp"] = link(12, 2.5);
  auto back = machine_from_json(machine_to_json(*m), "x.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->mem_bw_gbs, 819);
  EXPECT_EQ(back->links.at("tcp").gbytes_s, 2.5);
  auto j = machine_to_json(*m);
  j["mem_bw"] = 1;
  EXPECT_FALSE(machine_from_json(j, "x.json").ok());
  j = machine_to_json(*m);
  j.erase("memory_gb");
  auto e = machine_from_json(j, "x.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("memory_gb"), std::string::npos);
  EXPECT_FALSE(machine_preset("m9").ok());
  // A machine file next to the topology, named by a relative path.
  const std::string dir = testing::scratch_dir("m");
  std::ofstream(dir + "/here.json") << machine_to_json(*m).dump();
  auto r = resolve_machine("here.json", dir);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->memory_gb, 512);
}

TEST(Machine, SharersSplitTheBandwidth) {
  Machine m;
  m.mem_bw_gbs = 40;
  m.core_bw_gbs = 25;
  EXPECT_DOUBLE_EQ(m.read_gbs(1, 1), 25);
  EXPECT_DOUBLE_EQ(m.read_gbs(2, 1), 40);
  EXPECT_DOUBLE_EQ(m.read_gbs(1, 2), 20);
}

TEST(Machine, EngineKernelsLimitEachThreadAndTheMemoryAllOfThem) {
  Machine m;
  m.mem_bw_gbs = 40;
  m.core_bw_gbs = 25;
  m.cores = 2;
  // One thread: its kernels' 60% of a thread's streaming rate.
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 1, 0.6), 15);
  // Two processes of one thread: each still its kernels' rate (30 of the memory's 40 in all).
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 2, 0.6), 15);
  // Efficient kernels meet the memory's limit: half of it each.
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 2, 0.9), 20);
  // Four processes on two cores hold half a core each.
  EXPECT_DOUBLE_EQ(m.cores_held(1, 4), 0.5);
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 4, 0.6), 7.5);
  EXPECT_DOUBLE_EQ(m.cores_held(2, 1), 2);
  // Three on two cores: two rounds a step (the third rank runs alone in the second), half a core
  // each, and a quarter of the bus each (two share it while they run, for half the time).
  EXPECT_DOUBLE_EQ(m.cores_held(1, 3), 0.5);
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 3, 0.6), 7.5);
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 3, 2.0), 10);
  // Kernels that keep 70% of their rate when both cores run them (measured by sim --calibrate):
  // two ranks each get 0.7 of one alone; one stage of a pipeline its whole rate.
  m.kernel_scaling = 0.7;
  m.compute_tflops = 0.5;
  m.memory_gb = 16;
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 2, 0.6), 15 * 0.7);
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 1, 0.6), 15);
  EXPECT_DOUBLE_EQ(m.engine_read_gbs(1, 4, 0.6), 7.5 * 0.7);
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->kernel_scaling, 0.7);
  auto j = machine_to_json(m);
  j["kernel_scaling"] = 1.5;
  EXPECT_FALSE(machine_from_json(j, "m.json").ok());
  // Prefill's compute the same way: 0.8 with both cores at work, none with one.
  EXPECT_DOUBLE_EQ(m.compute_scale(1, 2), 1);  // not measured
  m.compute_scaling = 0.8;
  EXPECT_DOUBLE_EQ(m.compute_scale(1, 1), 1);
  EXPECT_DOUBLE_EQ(m.compute_scale(1, 2), 0.8);
  EXPECT_DOUBLE_EQ(m.compute_scale(1, 4), 0.8);
  auto cs = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  EXPECT_DOUBLE_EQ(cs->compute_scaling, 0.8);
  for (double bad : {0.0, 1.2}) {
    auto jc = machine_to_json(m);
    jc["compute_scaling"] = bad;
    auto r = machine_from_json(jc, "m.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("compute_scaling is a fraction"), std::string::npos);
  }
  // No per-thread figure (a GPU): the efficiency of its share of the memory bandwidth.
  Machine g;
  g.mem_bw_gbs = 800;
  EXPECT_DOUBLE_EQ(g.engine_read_gbs(1, 2, 0.5), 200);
}

TEST(Topology, MachineMediumAndLatencyKeys) {
  auto t = mesh(2, "m4-max", "tcp", "10gbe", false, ", \"latency_us\": 40, \"gbps\": 8");
  ASSERT_EQ(t.links.size(), 1u);
  EXPECT_EQ(t.hosts[0].machine, "m4-max");
  EXPECT_EQ(t.links[0].medium, "10gbe");
  EXPECT_EQ(*t.links[0].latency_us, 40);
  auto a = machine_preset("m4-max");
  auto l = link_for(t.links[0], *a, *a);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->latency_us, 40);
  EXPECT_DOUBLE_EQ(l->gbytes_s, 1.0);  // gbps caps the preset's 1.17
  auto bad = cluster::parse_topology(
      R"({"version": 1, "hosts": [{"name": "a", "address": "1.2.3.4", "machine": ""}, {"name": "b", "address": "1.2.3.5"}],
          "links": [{"a": "a", "b": "b", "provider": "tcp", "latency_us": -1}]})",
      "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("latency_us"), std::string::npos);
  EXPECT_NE(bad.status().message().find("machine"), std::string::npos);
  auto unknown = link_preset("infiniband");
  EXPECT_FALSE(unknown.ok());
}

}  // namespace
}  // namespace lattice::sim

namespace lattice::sim {
namespace {

// A two-core CPU whose shm link was measured (no collectives): the local tests' machine.
Machine two_core_cpu() {
  Machine m;
  m.name = "cpu";
  m.mem_bw_gbs = 40;
  m.core_bw_gbs = 25;
  m.cores = 2;
  m.compute_tflops = 0.5;
  m.memory_gb = 16;
  m.decode_efficiency = 0.9;
  m.links["shm"] = link(0.5, 8);
  return m;
}

// Two ranks of machine `m` on this machine over shm, its file written into a scratch folder
// named `name` (the options' base_dir).
struct LocalPair {
  std::string dir;
  Result<cluster::Topology> t;
};
LocalPair local_pair(const Machine& m, const std::string& name) {
  LocalPair p{testing::scratch_dir(name), InvalidArgument("unset")};
  std::ofstream(p.dir + "/cpu.json") << machine_to_json(m).dump();
  p.t = cluster::parse_topology(R"({"version": 1, "hosts": [
      {"name": "r0", "address": "127.0.0.1:7100", "machine": "cpu.json"},
      {"name": "r1", "address": "127.0.0.1:7101", "machine": "cpu.json"}],
      "links": [{"a": "r0", "b": "r1", "provider": "shm"}]})",
                                "local.json");
  return p;
}

TEST(Sim, RanksOnOneMachineShareItsBandwidthWhenTheyWorkAtOnce) {
  const Machine m = two_core_cpu();
  auto [dir, t] = local_pair(m, "local");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  auto tp = simulate(*shape_preset("llama-1.1b-q4"), *t, o);
  ASSERT_TRUE(tp.ok()) << tp.status().to_string();
  EXPECT_DOUBLE_EQ(tp->nodes[0].read_gbs, 20);  // half of the machine's 40 each (below a thread's 22.5)
  EXPECT_EQ(tp->links[0].medium, "shm (measured)");
  o.mode = Mode::kPipeline;
  auto pp = simulate(*shape_preset("llama-1.1b-q4"), *t, o);
  ASSERT_TRUE(pp.ok());
  EXPECT_DOUBLE_EQ(pp->nodes[0].read_gbs, 25 * 0.9);  // one stage at a time: one thread's kernels
}

}  // namespace
}  // namespace lattice::sim

namespace lattice::sim {
namespace {

TEST(Machine, MeasuredAllReduceOfColocatedRanks) {
  Machine m = two_core_cpu();
  m.links["shm"].allreduce_us = {{2, 3.0}, {4, 30.0}};
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->links.at("shm").allreduce_us, (std::map<int, double>{{2, 3.0}, {4, 30.0}}));
  m.links["shm"].allreduce_256k_us = {{2, 25.0}};
  auto big = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_EQ(big->links.at("shm").allreduce_256k_us, (std::map<int, double>{{2, 25.0}}));
  nlohmann::json jb = machine_to_json(m);
  jb["links"]["shm"]["allreduce_256k_us"] = {{"2", 0.0}};
  auto nb = machine_from_json(jb, "m.json");
  ASSERT_FALSE(nb.ok());
  EXPECT_NE(nb.status().message().find("allreduce_256k_us.2 must be microseconds"), std::string::npos);
  auto bad = [&](nlohmann::json ar) {
    nlohmann::json j = machine_to_json(m);
    j["links"]["shm"]["allreduce_8k_us"] = std::move(ar);
    auto r = machine_from_json(j, "m.json");
    EXPECT_FALSE(r.ok()) << j.dump();
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad({{"1", 3.0}}).find("allreduce_8k_us: key '1' is not a rank count"), std::string::npos);
  EXPECT_NE(bad({{"2x", 3.0}}).find("key '2x'"), std::string::npos);
  EXPECT_NE(bad({{"2", -1.0}}).find("allreduce_8k_us.2 must be microseconds"), std::string::npos);
  EXPECT_NE(bad({{"2", "fast"}}).find("allreduce_8k_us.2 must be microseconds"), std::string::npos);
  EXPECT_NE(bad(nlohmann::json::array({3.0})).find("maps a rank count"), std::string::npos);
}

// n hosts of `machine`, a full mesh of `provider` links (with a latency when not 0: an emulated
// link): at one address (ranks sharing a machine) or one address each (apart).
cluster::Topology shm_mesh(const char* machine, bool apart, int n, const char* provider = "shm", double latency_us = 0) {
  nlohmann::json j = {{"version", 1}, {"hosts", nlohmann::json::array()}, {"links", nlohmann::json::array()}};
  for (int i = 0; i < n; ++i)
    j["hosts"].push_back({{"name", "r" + std::to_string(i)},
                          {"address", (apart ? "10.0.0." + std::to_string(i + 1) : std::string("127.0.0.1")) + ":" +
                                          std::to_string(7100 + i)},
                          {"machine", machine}});
  for (int i = 0; i < n; ++i)
    for (int k = i + 1; k < n; ++k) {
      nlohmann::json l = {{"a", "r" + std::to_string(i)}, {"b", "r" + std::to_string(k)}, {"provider", provider}};
      if (latency_us > 0) l["latency_us"] = latency_us;
      if (std::string(provider) == "verbs") {  // each end's port for its peer, as cables are plugged
        l["a_device"] = "emu_tb5_" + std::to_string(k);
        l["b_device"] = "emu_tb5_" + std::to_string(i);
      }
      j["links"].push_back(l);
    }
  auto t = cluster::parse_topology(j.dump(), "t.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : cluster::Topology{};
}

TEST(Machine, LockstepScalingRoundTripsAndRejectsWhatIsNotAFraction) {
  Machine m = two_core_cpu();
  m.lockstep_scaling = {{2, 0.9}};
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->lockstep_scaling, (std::map<int, double>{{2, 0.9}}));
  auto bad = [&](nlohmann::json v) {
    nlohmann::json j = machine_to_json(m);
    j["lockstep_scaling"] = std::move(v);
    auto r = machine_from_json(j, "m.json");
    EXPECT_FALSE(r.ok()) << j.dump();
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad({{"2", 1.5}}).find("lockstep_scaling.2 must be a fraction in (0, 1]"), std::string::npos);
  EXPECT_NE(bad({{"2", 0.0}}).find("lockstep_scaling.2 must be a fraction"), std::string::npos);
  EXPECT_NE(bad({{"1", 0.9}}).find("lockstep_scaling: key '1' is not a rank count"), std::string::npos);
  EXPECT_NE(bad(0.9).find("maps a rank count"), std::string::npos);
  // A provider's own figure (links.P.lockstep_scaling) is a fraction by rank count too.
  m.links["verbs"] = link(6.0, 5.0);
  m.links["verbs"].allreduce_us = {{2, 15.0}};
  m.links["verbs"].lockstep_scaling = {{2, 0.8}};
  back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->links.at("verbs").lockstep_scaling, (std::map<int, double>{{2, 0.8}}));
  nlohmann::json j = machine_to_json(m);
  j["links"]["verbs"]["lockstep_scaling"]["2"] = 1.2;
  auto r = machine_from_json(j, "m.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("links.verbs.lockstep_scaling.2 must be a fraction in (0, 1]"), std::string::npos)
      << r.status().message();
}

// The error `m` written out with links.verbs.<key>.<rank> set to `v` gets when read back (empty,
// and the test failed, when it is accepted).
std::string bad_verbs_figure(const Machine& m, const char* key, const char* rank, nlohmann::json v) {
  nlohmann::json j = machine_to_json(m);
  j["links"]["verbs"][key][rank] = std::move(v);
  auto r = machine_from_json(j, "m.json");
  EXPECT_FALSE(r.ok()) << j.dump();
  return r.ok() ? std::string() : r.status().message();
}

// A provider's pipeline figure (links.P.pipeline_scaling) round-trips: a fraction by rank count.
TEST(Machine, PipelineScalingRoundTripsAndRejectsWhatIsNotAFraction) {
  Machine m = two_core_cpu();
  m.links["verbs"] = link(6.0, 5.0);
  m.links["verbs"].pipeline_scaling = {{2, 1.0}, {4, 0.87}};
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->links.at("verbs").pipeline_scaling, (std::map<int, double>{{2, 1.0}, {4, 0.87}}));
  auto bad = [&](nlohmann::json v) { return bad_verbs_figure(m, "pipeline_scaling", "3", std::move(v)); };
  EXPECT_NE(bad(1.3).find("links.verbs.pipeline_scaling.3 must be a fraction in (0, 1]"), std::string::npos);
  EXPECT_NE(bad(0.0).find("links.verbs.pipeline_scaling.3 must be a fraction"), std::string::npos);
  EXPECT_NE(bad("slow").find("links.verbs.pipeline_scaling.3 must be a fraction"), std::string::npos);
}

// A provider's prefill step figure (links.P.lockstep_256k_over_shm_us) round-trips: microseconds by
// rank count, 0 allowed (a step no longer than shm's).
TEST(Machine, PrefillStepExtraRoundTripsAndRejectsWhatIsNotMicroseconds) {
  Machine m = two_core_cpu();
  m.links["verbs"] = link(6.0, 5.0);
  m.links["verbs"].lockstep_256k_over_shm_us = {{2, 0.0}, {3, 1250.0}};
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->links.at("verbs").lockstep_256k_over_shm_us, (std::map<int, double>{{2, 0.0}, {3, 1250.0}}));
  auto bad = [&](nlohmann::json v) { return bad_verbs_figure(m, "lockstep_256k_over_shm_us", "4", std::move(v)); };
  EXPECT_NE(bad(-1.0).find("links.verbs.lockstep_256k_over_shm_us.4 must be microseconds in [0, 1e6]"), std::string::npos);
  EXPECT_NE(bad(2e6).find("lockstep_256k_over_shm_us.4 must be microseconds"), std::string::npos);
  EXPECT_NE(bad("slow").find("lockstep_256k_over_shm_us.4 must be microseconds"), std::string::npos);
}

// A provider's pace figures beyond the cores (links.P.lockstep_over_shm_us and _slope)
// round-trip: microseconds and a ratio by rank count, 0 allowed for both.
TEST(Machine, PaceOverShmRoundTripsAndRejectsWhatIsNotItsUnit) {
  Machine m = two_core_cpu();
  m.links["verbs"] = link(6.0, 5.0);
  m.links["verbs"].lockstep_over_shm_us = {{3, 0.0}, {4, 347.0}};
  m.links["verbs"].lockstep_over_shm_slope = {{3, 0.25}, {4, 0.0}};
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->links.at("verbs").lockstep_over_shm_us, (std::map<int, double>{{3, 0.0}, {4, 347.0}}));
  EXPECT_EQ(back->links.at("verbs").lockstep_over_shm_slope, (std::map<int, double>{{3, 0.25}, {4, 0.0}}));
  auto us = [&](nlohmann::json v) { return bad_verbs_figure(m, "lockstep_over_shm_us", "4", std::move(v)); };
  EXPECT_NE(us(-1.0).find("links.verbs.lockstep_over_shm_us.4 must be microseconds in [0, 1e6]"), std::string::npos);
  EXPECT_NE(us("slow").find("lockstep_over_shm_us.4 must be microseconds"), std::string::npos);
  auto slope = [&](nlohmann::json v) { return bad_verbs_figure(m, "lockstep_over_shm_slope", "4", std::move(v)); };
  EXPECT_NE(slope(11.0).find("links.verbs.lockstep_over_shm_slope.4 must be a ratio in [0, 10]"), std::string::npos);
  EXPECT_NE(slope(-0.1).find("lockstep_over_shm_slope.4 must be a ratio"), std::string::npos);
}

// Three ranks of one machine over the emulated verbs device, whose prefill step the machine file
// measured 2 ms longer than shm's: a 64-token prompt's all-reduces (512 KiB) each pay that and
// shm's 256 KiB call, less the wire model's 256 KiB call, over the 248 KiB beyond 8, for their
// 504 KiB, in place of the device's lockstep share, which decode's 8 KiB calls still pay. A
// figure of 0 (the step no longer than shm's) leaves prefill the share's cost lighter. Over shm,
// on machines of their own, or at a rank count not measured: nothing.
TEST(Sim, RanksOverTheEmulatedDevicePayItsPrefillStepInPlaceOfItsShare) {
  Machine m = two_core_cpu();
  m.tb5_ports = 5;
  m.links["shm"].allreduce_256k_us = {{3, 80.0}};
  m.links["verbs"] = link(6.0, 5.0);
  const std::string dir = testing::scratch_dir("prefill-verbs");
  std::ofstream(dir + "/no-share.json") << machine_to_json(m).dump();
  m.links["verbs"].lockstep_scaling = {{3, 0.6}};
  std::ofstream(dir + "/plain.json") << machine_to_json(m).dump();
  m.links["verbs"].lockstep_256k_over_shm_us = {{3, 0.0}};
  std::ofstream(dir + "/zero.json") << machine_to_json(m).dump();
  m.links["verbs"].lockstep_256k_over_shm_us = {{3, 2000.0}};
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  o.prompt = 64;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto with = simulate(shape, shm_mesh("cpu.json", false, 3, "verbs"), o);
  auto without = simulate(shape, shm_mesh("plain.json", false, 3, "verbs"), o);
  auto zero = simulate(shape, shm_mesh("zero.json", false, 3, "verbs"), o);
  auto no_share = simulate(shape, shm_mesh("no-share.json", false, 3, "verbs"), o);
  for (auto* r : {&with, &without, &zero, &no_share}) ASSERT_TRUE(r->ok()) << r->status().to_string();
  EXPECT_DOUBLE_EQ(with->lockstep_256k_over_shm_us, 2000.0);
  EXPECT_DOUBLE_EQ(with->colocated_allreduce_256k_us, 2080.0);
  EXPECT_EQ(with->colocated_allreduce_us, 0.0);  // the small call is the lockstep figure's
  EXPECT_EQ(with->colocated_sync_us, 0.0);
  // 2080 us less the device's wire model at 256 KiB (6 us one way, 5 GB/s: some hundred us).
  const double per_kib = with->colocated_sync_us_per_kib;
  EXPECT_GT(per_kib, 1500.0 / 248);
  EXPECT_LT(per_kib, 2080.0 / 248);
  EXPECT_NEAR(with->token_ms, without->token_ms, 1e-9);  // decode's calls are 8 KiB: the share
  EXPECT_GT(with->token_ms, no_share->token_ms * 1.1);
  const double calls = 2.0 * shape.n_layer;
  const double prefill_ms = 64.0 / with->prefill_tok_s * 1e3, alone_ms = 64.0 / no_share->prefill_tok_s * 1e3;
  EXPECT_NEAR(prefill_ms - alone_ms, calls * (512 - 8) * per_kib / 1e3, calls * (512 - 8) * per_kib / 1e3 * 0.05);
  // Measured no longer than shm's: prefill's large calls pay shm's call beyond the wire model's
  // (a few us), not the share; the prompt's last row, a step of its own, still pays the share.
  const double zero_kib = zero->colocated_sync_us_per_kib;
  EXPECT_LT(zero_kib, 10.0 / 248);
  const double zero_ms = 64.0 / zero->prefill_tok_s * 1e3, share_ms = 64.0 / without->prefill_tok_s * 1e3;
  EXPECT_GT(zero_ms - alone_ms, calls * (512 - 8) * zero_kib / 1e3);
  EXPECT_LT(zero_ms - alone_ms, 0.1 * (share_ms - alone_ms));
  EXPECT_DOUBLE_EQ(with->lockstep_scaling, without->lockstep_scaling);
  const std::string text = render_text(*with);
  EXPECT_NE(text.find("over the emulated device: its 256 KiB step between prefill's kernels 2000.0 us longer"),
            std::string::npos)
      << text;
  EXPECT_EQ(to_json(*with)["lockstep_256k_over_shm_us"], 2000.0);
  for (auto [topo, what] : {std::pair{shm_mesh("cpu.json", false, 3), "shm"},
                            std::pair{shm_mesh("cpu.json", true, 3, "verbs"), "apart"},
                            std::pair{shm_mesh("cpu.json", false, 2, "verbs"), "2 ranks"}}) {
    auto r = simulate(shape, topo, o);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    EXPECT_EQ(r->lockstep_256k_over_shm_us, 0.0) << what;
    EXPECT_EQ(r->colocated_sync_us_per_kib, 0.0) << what;
  }
}

// Four ranks on a two-core machine over the emulated verbs device, whose pace the machine file
// measured (400 us + 0.25 x shm's step a call): each decode call pays that, on the step shm would
// take (its core's turns and the cores' lockstep wait), in place of the device's lockstep share;
// without the figures the share. Two ranks on cores of their own pay their figures alike.
TEST(Sim, RanksOverTheEmulatedDevicePayItsPaceOverShms) {
  Machine m = two_core_cpu();
  m.tb5_ports = 5;
  m.lockstep_scaling = {{2, 0.9}};
  m.links["verbs"] = link(6.0, 5.0);
  const std::string dir = testing::scratch_dir("pace-verbs");
  std::ofstream(dir + "/none.json") << machine_to_json(m).dump();
  m.links["verbs"].lockstep_scaling = {{2, 0.8}, {4, 0.6}};
  std::ofstream(dir + "/share.json") << machine_to_json(m).dump();
  m.links["verbs"].lockstep_over_shm_us = {{2, 400.0}, {4, 400.0}};
  m.links["verbs"].lockstep_over_shm_slope = {{2, 0.25}, {4, 0.25}};
  std::ofstream(dir + "/pace.json") << machine_to_json(m).dump();
  m.links["verbs"].lockstep_over_shm_slope = {{2, 0.0}, {4, 0.0}};
  std::ofstream(dir + "/flat.json") << machine_to_json(m).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto none = simulate(shape, shm_mesh("none.json", false, 4, "verbs"), o);
  auto share = simulate(shape, shm_mesh("share.json", false, 4, "verbs"), o);
  auto pace = simulate(shape, shm_mesh("pace.json", false, 4, "verbs"), o);
  auto flat = simulate(shape, shm_mesh("flat.json", false, 4, "verbs"), o);
  for (auto* r : {&none, &share, &pace, &flat}) ASSERT_TRUE(r->ok()) << r->status().to_string();
  EXPECT_EQ(pace->core_turns, 2);
  EXPECT_DOUBLE_EQ(pace->lockstep_over_shm_us, 400.0);
  EXPECT_DOUBLE_EQ(pace->lockstep_over_shm_slope, 0.25);
  EXPECT_DOUBLE_EQ(pace->lockstep_scaling, 0.9);  // the cores' own; the device's share is not charged
  EXPECT_DOUBLE_EQ(share->lockstep_scaling, 0.9 * 0.6);
  EXPECT_LT(share->lockstep_over_shm_us, 0.0);
  // A token's calls: 2 a layer and the last logits' gather. The flat figure adds 400 us to each
  // call; the slope a quarter of the step without the device's charge, which is the token less
  // its wire parts and the work after the last call (within 5%).
  const double calls = 2.0 * shape.n_layer + 1;
  const double flat_extra = flat->token_ms * 1e3 - none->token_ms * 1e3;
  EXPECT_NEAR(flat_extra, calls * 400.0, 1.0);
  const double step = none->token_ms * 1e3 - none->token.latency_us - none->token.bandwidth_us;
  EXPECT_NEAR(pace->token_ms * 1e3 - flat->token_ms * 1e3, 0.25 * step, 0.25 * step * 0.05);
  EXPECT_GT(share->token_ms, none->token_ms * 1.1);
  const std::string text = render_text(*pace);
  EXPECT_NE(text.find("ranks on one machine over the emulated device: each collective 400 us plus 0.250 x the step"),
            std::string::npos)
      << text;
  EXPECT_EQ(to_json(*pace)["lockstep_over_shm_us"], 400.0);
  // Two ranks with a core each pay their own figures the same way: 400 us a call on the flat
  // file, in place of the share.
  auto two_none = simulate(shape, shm_mesh("none.json", false, 2, "verbs"), o);
  auto two_flat = simulate(shape, shm_mesh("flat.json", false, 2, "verbs"), o);
  ASSERT_TRUE(two_none.ok() && two_flat.ok());
  EXPECT_EQ(two_flat->core_turns, 0);
  EXPECT_DOUBLE_EQ(two_flat->lockstep_over_shm_us, 400.0);
  EXPECT_NEAR(two_flat->token_ms * 1e3 - two_none->token_ms * 1e3, calls * 400.0, 1.0);
  // Over shm, or on machines of their own, nothing.
  for (auto [topo, what] : {std::pair{shm_mesh("pace.json", false, 4), "shm"},
                            std::pair{shm_mesh("pace.json", true, 4, "verbs"), "apart"}}) {
    auto r = simulate(shape, topo, o);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    EXPECT_LT(r->lockstep_over_shm_us, 0.0) << what;
  }
}

// Three pipeline stages of one machine over the emulated verbs device, whose chain the machine
// file measured at 0.8: each stage's work costs a quarter (1 / 0.8 - 1) more, as
// synchronisation on the token's path.
// Over shm, tensor parallel, on machines of their own, or at a rank count not measured: nothing.
TEST(Sim, PipelineStagesOverAProviderPayItsMeasuredChain) {
  Machine m = two_core_cpu();
  m.tb5_ports = 5;
  m.links["verbs"] = link(6.0, 5.0);
  m.links["verbs"].pipeline_scaling = {{3, 0.8}};
  const std::string dir = testing::scratch_dir("pipeline-verbs");
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kPipeline;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto verbs = simulate(shape, shm_mesh("cpu.json", false, 3, "verbs"), o);
  ASSERT_TRUE(verbs.ok()) << verbs.status().to_string();
  EXPECT_DOUBLE_EQ(verbs->pipeline_scaling, 0.8);
  auto apart = simulate(shape, shm_mesh("cpu.json", true, 3, "verbs"), o);
  ASSERT_TRUE(apart.ok()) << apart.status().to_string();
  EXPECT_DOUBLE_EQ(apart->pipeline_scaling, 1.0);
  // The same stages and links on machines of their own work alike: the difference is the charge,
  // on the token's path through every stage's work.
  double work = 0;
  for (const NodeResult& n : apart->nodes) work += n.token.weights_us + n.token.compute_us;
  EXPECT_NEAR(verbs->token_ms * 1e3 - apart->token_ms * 1e3, work * (1 / 0.8 - 1), 0.01 * work);
  EXPECT_NEAR(verbs->token.sync_us - apart->token.sync_us, work * (1 / 0.8 - 1), 0.01 * work);
  auto shm = simulate(shape, shm_mesh("cpu.json", false, 3), o);
  ASSERT_TRUE(shm.ok()) << shm.status().to_string();
  EXPECT_DOUBLE_EQ(shm->pipeline_scaling, 1.0);
  auto two = simulate(shape, shm_mesh("cpu.json", false, 2, "verbs"), o);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_DOUBLE_EQ(two->pipeline_scaling, 1.0);
  o.mode = Mode::kTensor;
  auto tp = simulate(shape, shm_mesh("cpu.json", false, 3, "verbs"), o);
  ASSERT_TRUE(tp.ok()) << tp.status().to_string();
  EXPECT_DOUBLE_EQ(tp->pipeline_scaling, 1.0);
}

// Two ranks of one machine over the emulated verbs device, or loopback tcp, whose own lockstep
// figure the machine file carries: the two fractions multiply. Over shm, or on machines of their own: not applied.
TEST(Sim, LockstepOverAProviderWithItsOwnFigureMultiplies) {
  Machine m = two_core_cpu();
  m.tb5_ports = 5;
  m.lockstep_scaling = {{2, 0.9}};
  m.links["verbs"] = link(6.0, 5.0);
  m.links["verbs"].lockstep_scaling = {{2, 0.8}};
  m.links["tcp"] = link(20.0, 5.0);  // loopback tcp's, measured on cores of their own
  m.links["tcp"].lockstep_scaling = {{2, 0.85}};
  const std::string dir = testing::scratch_dir("lockstep-verbs");
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  auto pair = [](const char* provider, bool apart) {
    nlohmann::json link = {{"a", "r0"}, {"b", "r1"}, {"provider", provider}};
    if (std::string(provider) == "verbs") {
      link["a_device"] = "emu_tb5_1";
      link["b_device"] = "emu_tb5_0";
      link["latency_us"] = 50;
    }
    nlohmann::json j = {{"version", 1},
                        {"hosts",
                         {{{"name", "r0"}, {"address", apart ? "10.0.0.1:7100" : "127.0.0.1:7100"}, {"machine", "cpu.json"}},
                          {{"name", "r1"}, {"address", apart ? "10.0.0.2:7101" : "127.0.0.1:7101"}, {"machine", "cpu.json"}}}},
                        {"links", {link}}};
    auto t = cluster::parse_topology(j.dump(), "t.json");
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? *t : cluster::Topology{};
  };
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto verbs = simulate(shape, pair("verbs", false), o);
  ASSERT_TRUE(verbs.ok()) << verbs.status().to_string();
  EXPECT_DOUBLE_EQ(verbs->lockstep_scaling, 0.9 * 0.8);
  auto shm = simulate(shape, pair("shm", false), o);
  ASSERT_TRUE(shm.ok()) << shm.status().to_string();
  EXPECT_DOUBLE_EQ(shm->lockstep_scaling, 0.9);
  EXPECT_GT(verbs->token.sync_us, shm->token.sync_us);
  auto tcp = simulate(shape, pair("tcp", false), o);
  ASSERT_TRUE(tcp.ok()) << tcp.status().to_string();
  EXPECT_DOUBLE_EQ(tcp->lockstep_scaling, 0.9 * 0.85);
  auto apart = simulate(shape, pair("verbs", true), o);
  ASSERT_TRUE(apart.ok()) << apart.status().to_string();
  EXPECT_DOUBLE_EQ(apart->lockstep_scaling, 1.0);
  // Beyond the cores (4 ranks on 2): the cores meet as 2 ranks would (the machine's figure for
  // 2, not one it might carry for 4), times the provider's own at 4.
  m.lockstep_scaling[4] = 0.7;
  m.links["verbs"].lockstep_scaling[4] = 0.5;
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  auto four = simulate(shape, shm_mesh("cpu.json", false, 4, "verbs"), o);
  ASSERT_TRUE(four.ok()) << four.status().to_string();
  EXPECT_DOUBLE_EQ(four->lockstep_scaling, 0.9 * 0.5);
}

// A provider's own lockstep figure (the emulated verbs device's progress threads and wake-ups
// against shm) is charged on the ranks' work at its quiet pace: when the cores contend for memory
// (kernel_scaling) the work is longer, and the provider's share does not grow with it (docs/SIM.md,
// session 29: the MoE's 2-rank rows over the device read -9 / -24 / -17% with the co-run at
// 0.74 / 0.68 / 0.67, the Llama's -8 / +8 / -4% at 0.85 / 0.96 / 0.98).
TEST(Sim, AProvidersOwnLockstepIsChargedOnTheQuietWork) {
  const auto shape = *shape_preset("llama-1.1b-q4");
  SimOptions o;
  o.mode = Mode::kTensor;
  // (verbs sync - shm sync, verbs weight reads) per token, for a machine of this kernel_scaling.
  auto link_part = [&](double kernel_scaling, int ranks = 2) {
    Machine m = two_core_cpu();
    m.mem_bw_gbs = 100;  // the cores' own rate bounds the reads, so kernel_scaling applies
    m.tb5_ports = 5;
    m.kernel_scaling = kernel_scaling;
    m.links["verbs"] = link(6.0, 5.0);
    m.links["verbs"].lockstep_scaling = {{2, 0.8}, {4, 0.8}};
    const std::string dir = testing::scratch_dir("lockstep-quiet");
    std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
    o.base_dir = dir;
    auto verbs = simulate(shape, shm_mesh("cpu.json", false, ranks, "verbs"), o);
    auto shm = simulate(shape, shm_mesh("cpu.json", false, ranks, "shm"), o);
    EXPECT_TRUE(verbs.ok() && shm.ok());
    return verbs.ok() && shm.ok() ? std::pair{verbs->token.sync_us - shm->token.sync_us, verbs->token.weights_us}
                                  : std::pair{0.0, 0.0};
  };
  const auto [quiet_sync, quiet_reads] = link_part(1.0);
  const auto [busy_sync, busy_reads] = link_part(0.5);
  EXPECT_NEAR(busy_reads, 2 * quiet_reads, 1e-6 * quiet_reads);  // the contention doubles the work
  // The device's share: (1 / 0.8 - 1) of the quiet work either way, not of the doubled work.
  EXPECT_NEAR(quiet_sync, 0.25 * quiet_reads, 0.02 * quiet_reads);
  EXPECT_NEAR(busy_sync, quiet_sync, 0.01 * quiet_sync);
  // 4 ranks on 2 cores take turns: each waits at a collective for its core's work, the two
  // ranks' there, and the device's share is of that work at its quiet pace.
  const auto [turns_sync, turns_reads] = link_part(0.5, 4);
  const auto [turns_quiet_sync, turns_quiet_reads] = link_part(1.0, 4);
  EXPECT_NEAR(turns_sync, 0.25 * 2 * turns_quiet_reads, 0.05 * turns_sync);  // not 0.25 x its own
  EXPECT_NEAR(turns_sync, turns_quiet_sync, 0.01 * turns_sync);
}

// Two ranks in lockstep on the cores of one machine that measured 0.8: every collective first
// waits a quarter (1 / 0.8 - 1) of the work since the previous one, as synchronisation; nothing
// else moves. Beyond the cores the cores' figure (as many ranks as cores). Pipeline stages,
// ranks on machines of their own, and counts not measured: nothing.
TEST(Sim, LockstepRanksWaitForEachSegmentsSlowest) {
  Machine m = two_core_cpu();
  m.lockstep_scaling = {{2, 0.8}};
  const std::string dir = testing::scratch_dir("lockstep");
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  std::ofstream(dir + "/bare.json") << machine_to_json(two_core_cpu()).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto with = simulate(shape, shm_mesh("cpu.json", false, 2), o);
  auto without = simulate(shape, shm_mesh("bare.json", false, 2), o);
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  EXPECT_DOUBLE_EQ(with->lockstep_scaling, 0.8);
  EXPECT_DOUBLE_EQ(without->lockstep_scaling, 1.0);
  EXPECT_NEAR(with->token.weights_us, without->token.weights_us, 1e-6);
  // The work before the token's last collective is charged; what follows it (the output's
  // sampling side) is not, so the charge is at most a quarter of all the work.
  const double work = without->token.weights_us + without->token.compute_us;
  const double charged = with->token.sync_us - without->token.sync_us;
  EXPECT_GT(charged, 0.2 * work);
  EXPECT_LE(charged, 0.25 * work * 1.0001);
  EXPECT_GT(with->token_ms, without->token_ms * 1.15);
  o.mode = Mode::kPipeline;
  auto pp = simulate(shape, shm_mesh("cpu.json", false, 2), o);
  ASSERT_TRUE(pp.ok());
  EXPECT_DOUBLE_EQ(pp->lockstep_scaling, 1.0);
  o.mode = Mode::kTensor;
  auto apart = simulate(shape, shm_mesh("cpu.json", true, 2), o);
  ASSERT_TRUE(apart.ok());
  EXPECT_DOUBLE_EQ(apart->lockstep_scaling, 1.0);
  // Beyond the cores each core runs two ranks' segments in turn, and the two cores meet at
  // every collective as two ranks do: the figure for 2.
  auto four = simulate(shape, shm_mesh("cpu.json", false, 4), o);
  ASSERT_TRUE(four.ok());
  EXPECT_DOUBLE_EQ(four->lockstep_scaling, 0.8);
  auto three = simulate(shape, shm_mesh("cpu.json", false, 3), o);
  ASSERT_TRUE(three.ok());
  EXPECT_DOUBLE_EQ(three->lockstep_scaling, 0.8);
  auto four_bare = simulate(shape, shm_mesh("bare.json", false, 4), o);  // not measured
  ASSERT_TRUE(four_bare.ok());
  EXPECT_DOUBLE_EQ(four_bare->lockstep_scaling, 1.0);
  EXPECT_GT(four_bare->decode_tok_s, four->decode_tok_s);
}

// Ranks beyond a machine's cores are pinned round them (`run --bind cores`: the i-th on core i
// mod 2) and each core runs its ranks' work in turn: a rank works at a core's rate (as two ranks at
// once do), and reaches each collective when its core's ranks have all done theirs. Four equal
// ranks on two cores then step as two do; three put ranks 0 and 2 on core 0, which carries rank
// 0's larger share of the 1.1B Llama's 4 KV heads (2 of 4, the others 1): its layer is 3/4 of the
// attention and 2/3 of the FFN, 1.37 x what each of two ranks reads, where giving every rank half
// a core (the heaviest twice over) would read 1.48 x.
TEST(Sim, RanksBeyondTheCoresTakeTurnsOnTheCoresTheyArePinnedTo) {
  const std::string dir = testing::scratch_dir("turns");
  std::ofstream(dir + "/cpu.json") << machine_to_json(two_core_cpu()).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto two = simulate(shape, shm_mesh("cpu.json", false, 2), o);
  auto three = simulate(shape, shm_mesh("cpu.json", false, 3), o);
  auto four = simulate(shape, shm_mesh("cpu.json", false, 4), o);
  ASSERT_TRUE(two.ok() && three.ok() && four.ok()) << three.status().to_string();
  EXPECT_EQ(two->core_turns, 0);
  EXPECT_EQ(three->core_turns, 2);
  EXPECT_EQ(four->core_turns, 2);
  for (const auto* r : {&*three, &*four})
    for (const auto& n : r->nodes) EXPECT_DOUBLE_EQ(n.read_gbs, two->nodes[0].read_gbs) << n.name;
  EXPECT_NEAR(four->token_ms, two->token_ms, 0.03 * two->token_ms);
  EXPECT_GT(three->token_ms, 1.33 * two->token_ms);
  EXPECT_LT(three->token_ms, 1.42 * two->token_ms);
  // Machines of their own, and pipeline stages (one works at a time): no turns.
  auto apart = simulate(shape, shm_mesh("cpu.json", true, 3), o);
  o.mode = Mode::kPipeline;
  auto pp = simulate(shape, shm_mesh("cpu.json", false, 3), o);
  ASSERT_TRUE(apart.ok() && pp.ok());
  EXPECT_EQ(apart->core_turns, 0);
  EXPECT_EQ(pp->core_turns, 0);
  EXPECT_NE(render_text(*three).find("up to 2 a core"), std::string::npos);
  EXPECT_EQ(to_json(*three)["core_turns"], 2);
}

// Ranks on one 2-core machine joined by emulated tcp links (a latency on tcp between processes of
// one machine: the link emulator's relay), whose machine file measured the relays' CPU an 8 KiB
// all-reduce: where the ranks hold every core (as many as the cores, or more) each message of
// every collective holds every rank its share (the measured CPU over the call's messages, over
// the cores); with cores left over, as pipeline stages, over plain tcp, or at a rank count not
// measured: nothing.
TEST(Sim, RelaysOfEmulatedTcpLinksTakeTheirCpuFromRanksHoldingEveryCore) {
  Machine m = two_core_cpu();
  m.links["tcp"] = link(12, 2.5);
  m.links["tcp"].emulator_cpu_us = {{2, 60.0}, {4, 400.0}};
  const std::string dir = testing::scratch_dir("emulator-cpu");
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  m.links["tcp"].emulator_cpu_us.clear();
  std::ofstream(dir + "/bare.json") << machine_to_json(m).dump();
  auto mesh = [](const char* machine, int n, bool emulated) {
    return shm_mesh(machine, false, n, "tcp", emulated ? 50 : 0);
  };
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto with = simulate(shape, mesh("cpu.json", 4, true), o);
  auto without = simulate(shape, mesh("bare.json", 4, true), o);
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  EXPECT_DOUBLE_EQ(with->emulator_cpu_us, 400.0);
  // 4 ranks' recursive-doubling all-reduce sends 8 messages: 400 / 8 over 2 cores.
  EXPECT_EQ(with->allreduce, without->allreduce);
  EXPECT_NE(with->allreduce.find("recursive"), std::string::npos) << with->allreduce;
  EXPECT_DOUBLE_EQ(with->emulator_us_per_msg, 400.0 / 8 / 2);
  EXPECT_DOUBLE_EQ(without->emulator_cpu_us, 0.0);
  EXPECT_NEAR(with->token.weights_us, without->token.weights_us, 1e-6);
  // Two all-reduces a layer, each 8 messages of 25 us, and the token's argmax gather.
  EXPECT_GE(with->token_ms - without->token_ms, 2.0 * shape.n_layer * 8 * 25.0 * 0.999 / 1e3)
      << with->token_ms << " ms against " << without->token_ms;
  EXPECT_LE(with->token_ms - without->token_ms, (2.0 * shape.n_layer + 2) * 8 * 25.0 / 1e3)
      << with->token_ms << " ms against " << without->token_ms;
  EXPECT_LT(with->decode_tok_s, without->decode_tok_s);
  auto not_charged = [&](const cluster::Topology& t, Mode mode, const char* what) {
    SimOptions p = o;
    p.mode = mode;
    auto r = simulate(shape, t, p);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    EXPECT_DOUBLE_EQ(r->emulator_cpu_us, 0.0) << what;
    EXPECT_DOUBLE_EQ(r->emulator_us_per_msg, 0.0) << what;
  };
  // As many ranks as cores hold every core too: 2 ranks' one-shot all-reduce sends 2 messages,
  // 60 / 2 over 2 cores.
  auto two = simulate(shape, mesh("cpu.json", 2, true), o);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_DOUBLE_EQ(two->emulator_cpu_us, 60.0);
  EXPECT_DOUBLE_EQ(two->emulator_us_per_msg, 60.0 / 2 / 2);
  // Cores left over run the relays: 2 ranks on a machine of 4 pay nothing.
  Machine wide = two_core_cpu();
  wide.cores = 4;
  wide.links["tcp"] = link(12, 2.5);
  wide.links["tcp"].emulator_cpu_us = {{2, 60.0}, {4, 400.0}};
  std::ofstream(dir + "/wide.json") << machine_to_json(wide).dump();
  not_charged(mesh("wide.json", 2, true), Mode::kTensor, "cores left over");
  not_charged(mesh("cpu.json", 4, true), Mode::kPipeline, "pipeline stages");
  not_charged(mesh("cpu.json", 4, false), Mode::kTensor, "plain tcp");
  not_charged(mesh("cpu.json", 3, true), Mode::kTensor, "3 ranks, not measured");
  SimOptions mlx = o;
  mlx.engine = "mlx";
  auto other = simulate(shape, mesh("cpu.json", 4, true), mlx);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_DOUBLE_EQ(other->emulator_cpu_us, 0.0) << "another engine: the relay is lattice's";
}

TEST(Machine, EmulatorCpuRoundTripsAndRejectsWhatIsNotMicroseconds) {
  Machine m = two_core_cpu();
  m.links["tcp"] = link(12, 2.5);
  m.links["tcp"].emulator_cpu_us = {{4, 380.0}};
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->links.at("tcp").emulator_cpu_us, (std::map<int, double>{{4, 380.0}}));
  nlohmann::json j = machine_to_json(m);
  j["links"]["tcp"]["emulator_cpu_8k_us"]["4"] = -1;
  auto r = machine_from_json(j, "m.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("links.tcp.emulator_cpu_8k_us.4 must be microseconds"), std::string::npos)
      << r.status().message();
}

// Four ranks at one address whose machine measured their all-reduce: each collective costs the
// measured call less the wire model's, in sync, for lattice's engine only and only when they
// share the machine.
TEST(Sim, ColocatedRanksPayTheirMeasuredAllReduce) {
  Machine m = two_core_cpu();
  m.links["shm"].allreduce_us = {{2, 3.0}, {4, 40.0}};
  const std::string dir = testing::scratch_dir("colocated");
  std::ofstream(dir + "/cpu.json") << machine_to_json(m).dump();
  Machine bare = m;
  bare.links["shm"].allreduce_us.clear();
  std::ofstream(dir + "/bare.json") << machine_to_json(bare).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto with = simulate(shape, shm_mesh("cpu.json", false, 4), o);
  auto without = simulate(shape, shm_mesh("bare.json", false, 4), o);
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  EXPECT_DOUBLE_EQ(with->colocated_allreduce_us, 40.0);
  EXPECT_GT(with->colocated_sync_us, 30.0);  // 40 less a few microseconds of wire
  EXPECT_LT(with->colocated_sync_us, 40.0);
  EXPECT_EQ(without->colocated_sync_us, 0.0);
  // Every all-reduce of the token pays it (two a layer, and the output's): the token's sync grows
  // by that many times the cost, and nothing else moves.
  const double calls = 2.0 * shape.n_layer;
  EXPECT_GE(with->token.sync_us - without->token.sync_us, calls * with->colocated_sync_us * 0.99);
  EXPECT_NEAR(with->token.weights_us, without->token.weights_us, 1e-6);
  EXPECT_GT(with->token_ms, without->token_ms);
  // Three ranks: not measured at that count, so nothing is added.
  auto three = simulate(shape, shm_mesh("cpu.json", false, 3), o);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->colocated_sync_us, 0.0);
  // Apart (one machine each), or another engine's profile: the measurement does not apply.
  auto apart = simulate(shape, shm_mesh("cpu.json", true, 4), o);
  ASSERT_TRUE(apart.ok());
  EXPECT_EQ(apart->colocated_sync_us, 0.0);
  o.engine = "mlx";
  auto mlx = simulate(shape, shm_mesh("cpu.json", false, 4), o);
  ASSERT_TRUE(mlx.ok()) << mlx.status().to_string();
  EXPECT_EQ(mlx->colocated_sync_us, 0.0);
}

// Measured at 256 KiB too: the cost beyond the wire grows linearly in a call's bytes from the
// 8 KiB call's. Decode's 8 KiB calls pay what they paid; a prompt's larger calls pay more.
TEST(Sim, ColocatedRanksLargerCallsPayTheMeasuredGrowth) {
  Machine m = two_core_cpu();
  m.links["shm"].allreduce_us = {{2, 3.0}};
  const std::string dir = testing::scratch_dir("colocated-large");
  std::ofstream(dir + "/small.json") << machine_to_json(m).dump();
  m.links["shm"].allreduce_256k_us = {{2, 500.0}};
  std::ofstream(dir + "/large.json") << machine_to_json(m).dump();
  SimOptions o;
  o.base_dir = dir;
  o.mode = Mode::kTensor;
  o.prompt = 64;
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto small = simulate(shape, shm_mesh("small.json", false, 2), o);
  auto large = simulate(shape, shm_mesh("large.json", false, 2), o);
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  ASSERT_TRUE(large.ok()) << large.status().to_string();
  EXPECT_EQ(small->colocated_sync_us_per_kib, 0.0);
  EXPECT_DOUBLE_EQ(large->colocated_allreduce_256k_us, 500.0);
  // 500 us less the wire's tens (shm at 8 GB/s) and the small call's extra, over the 248 KiB
  // between the sizes.
  const double per_kib = large->colocated_sync_us_per_kib;
  EXPECT_GT(per_kib, 1.6);
  EXPECT_LT(per_kib, 500.0 / 248);
  EXPECT_DOUBLE_EQ(large->colocated_sync_us, small->colocated_sync_us);
  EXPECT_NEAR(large->token_ms, small->token_ms, 1e-9);  // decode's calls are 8 KiB
  // 64 rows of 2048 f32 a call (512 KiB): each of the prompt's all-reduces 504 KiB's growth more.
  const double calls = 2.0 * shape.n_layer;
  const double more_ms = 64.0 / large->prefill_tok_s * 1e3 - 64.0 / small->prefill_tok_s * 1e3;
  EXPECT_NEAR(more_ms, calls * (512 - 8) * per_kib / 1e3, calls * (512 - 8) * per_kib / 1e3 * 0.05);
  // Three ranks: not measured at that count (at neither size).
  auto three = simulate(shape, shm_mesh("large.json", false, 3), o);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->colocated_sync_us_per_kib, 0.0);
}

// A 256-token prompt and decode on n ranks of `file` (in `dir`) joined by shm; a failure is the test's.
SimResult prefill_256(const ModelShape& shape, const std::string& dir, const char* file, int n, Mode mode) {
  SimOptions o;
  o.base_dir = dir;
  o.prompt = 256;
  o.mode = mode;
  auto r = simulate(shape, shm_mesh(file, false, n), o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : SimResult{};
}

// Ranks prefilling on both cores at once keep the machine's compute_scaling of a core's rate;
// one rank and a pipeline's stages (one at a time) keep all of it, and decode's reads are not
// touched.
TEST(Sim, RanksComputingAtOnceKeepTheMachinesComputeScaling) {
  Machine m = two_core_cpu();
  const std::string dir = testing::scratch_dir("compute-scaling");
  std::ofstream(dir + "/full.json") << machine_to_json(m).dump();
  m.compute_scaling = 0.8;
  std::ofstream(dir + "/scaled.json") << machine_to_json(m).dump();
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto run = [&](const char* file, int n, Mode mode) { return prefill_256(shape, dir, file, n, mode); };
  const SimResult full = run("full.json", 2, Mode::kTensor), scaled = run("scaled.json", 2, Mode::kTensor);
  EXPECT_LT(scaled.prefill_tok_s, full.prefill_tok_s * 0.95);
  EXPECT_GT(scaled.prefill_tok_s, full.prefill_tok_s * 0.75);
  EXPECT_NEAR(scaled.decode_tok_s, full.decode_tok_s, 1e-9);
  EXPECT_NEAR(run("scaled.json", 1, Mode::kTensor).prefill_tok_s, run("full.json", 1, Mode::kTensor).prefill_tok_s,
              1e-9);
  EXPECT_NEAR(run("scaled.json", 2, Mode::kPipeline).prefill_tok_s, run("full.json", 2, Mode::kPipeline).prefill_tok_s,
              1e-9);
}

// The work each tensor-parallel rank does on the whole hidden state (Machine::replicated_ns) is
// charged whole to every rank: a prefill's time grows by the same at 1 rank and at 2, where
// the efficiency would have halved it. A slice's matmul rate (slice_efficiency) slows the
// ranks' compute, not one rank's, a pipeline's or decode's reads.
TEST(Sim, TheWorkEveryRankDoesWholeIsNotDividedAndSlicesKeepTheirMeasuredRate) {
  Machine m = two_core_cpu();
  const std::string dir = testing::scratch_dir("replicated");
  std::ofstream(dir + "/base.json") << machine_to_json(m).dump();
  m.replicated_ns = 5;
  std::ofstream(dir + "/rep.json") << machine_to_json(m).dump();
  m.replicated_ns = 0;
  m.slice_efficiency = {{2, 0.8}};
  std::ofstream(dir + "/slice.json") << machine_to_json(m).dump();
  const auto shape = *shape_preset("llama-1.1b-q4");
  auto run = [&](const char* file, int n, Mode mode) { return prefill_256(shape, dir, file, n, mode); };
  const double whole_ms = 256.0 * shape.n_embd * shape.n_layer * 5e-6;
  for (int n : {1, 2}) {
    const double more = run("rep.json", n, Mode::kTensor).ttft_ms - run("base.json", n, Mode::kTensor).ttft_ms;
    EXPECT_NEAR(more, whole_ms, whole_ms * 0.02) << n << " ranks";
  }
  const SimResult base2 = run("base.json", 2, Mode::kTensor), slice2 = run("slice.json", 2, Mode::kTensor);
  EXPECT_LT(slice2.prefill_tok_s, base2.prefill_tok_s * 0.9);
  EXPECT_GT(slice2.prefill_tok_s, base2.prefill_tok_s * 0.75);
  EXPECT_NEAR(slice2.decode_tok_s, base2.decode_tok_s, base2.decode_tok_s * 1e-9);
  EXPECT_NEAR(run("slice.json", 1, Mode::kTensor).prefill_tok_s, run("base.json", 1, Mode::kTensor).prefill_tok_s, 1e-9);
  EXPECT_NEAR(run("slice.json", 2, Mode::kPipeline).prefill_tok_s, run("base.json", 2, Mode::kPipeline).prefill_tok_s,
              1e-9);
}

// A mixture of experts' work every rank does whole (Machine::moe_router_ns, moe_row_ns): the
// router over every expert and each chosen expert's gathered, quantized and accumulated rows.
// Tensor parallel charges it whole to each rank, so a prefill grows by the same at 1 rank and
// at 2; expert parallel divides the rows' part by the ranks' shares, not the router's; a dense
// model has none of it.
TEST(Sim, AMixtureOfExpertsRoutesAndGathersItsRowsWholeOnEveryRank) {
  Machine m = two_core_cpu();
  const std::string dir = testing::scratch_dir("moe-replicated");
  std::ofstream(dir + "/unmeasured.json") << machine_to_json(m).dump();
  m.moe_router_ns = 1e-9;  // the router at its own rate, next to nothing
  std::ofstream(dir + "/base.json") << machine_to_json(m).dump();
  m.moe_row_ns = 0.5;
  std::ofstream(dir + "/rows.json") << machine_to_json(m).dump();
  m.moe_row_ns = 0;
  m.moe_router_ns = 0.05;
  std::ofstream(dir + "/router.json") << machine_to_json(m).dump();
  const auto shape = *shape_preset("qwen3moe-bench-q4");
  auto run = [&](const char* file, int n, Mode mode) { return prefill_256(shape, dir, file, n, mode); };
  auto more = [&](const char* file, int n, Mode mode) {
    return run(file, n, mode).ttft_ms - run("base.json", n, mode).ttft_ms;
  };
  const double rows_ms = 256.0 * shape.n_embd * shape.n_expert_used * shape.n_moe_layers() * 0.5e-6;
  const double router_ms = 256.0 * shape.n_embd * shape.n_expert * shape.n_moe_layers() * 0.05e-6;
  for (int n : {1, 2}) {
    EXPECT_NEAR(more("rows.json", n, Mode::kTensor), rows_ms, rows_ms * 0.02) << n << " ranks";
    EXPECT_NEAR(more("router.json", n, Mode::kTensor), router_ms, router_ms * 0.02) << n << " ranks";
  }
  // Expert parallel: each rank gathers the rows of its own experts, and routes every row.
  const double ep_rows = more("rows.json", 2, Mode::kExpert);
  EXPECT_GT(ep_rows, rows_ms * 0.3);
  EXPECT_LT(ep_rows, rows_ms * 0.7);
  EXPECT_NEAR(more("router.json", 2, Mode::kExpert), router_ms, router_ms * 0.02);
  // Not measured, the router's multiply-adds are counted with the weights, at the prefill's rate.
  EXPECT_GT(run("unmeasured.json", 1, Mode::kTensor).ttft_ms, run("base.json", 1, Mode::kTensor).ttft_ms);
  const auto dense = *shape_preset("llama-1.1b-q4");
  EXPECT_NEAR(prefill_256(dense, dir, "rows.json", 2, Mode::kTensor).ttft_ms,
              prefill_256(dense, dir, "unmeasured.json", 2, Mode::kTensor).ttft_ms, 1e-9);
}

TEST(Machine, ReplicatedWorkAndSliceRatesRoundTripAndRejectWhatIsNotAFigure) {
  Machine m = two_core_cpu();
  EXPECT_DOUBLE_EQ(m.slice_rate(4), 1);  // not measured
  m.replicated_ns = 1.2;
  m.slice_efficiency = {{2, 0.99}, {4, 0.93}};
  EXPECT_DOUBLE_EQ(m.slice_rate(1), 1);
  EXPECT_DOUBLE_EQ(m.slice_rate(2), 0.99);
  EXPECT_DOUBLE_EQ(m.slice_rate(3), 0.99);  // the most below it that was measured
  EXPECT_DOUBLE_EQ(m.slice_rate(8), 0.93);
  auto back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->replicated_ns, 1.2);
  EXPECT_DOUBLE_EQ(back->moe_router_ns, 0);  // not measured
  m.moe_router_ns = 0.04;
  m.moe_row_ns = 0.5;
  back = machine_from_json(machine_to_json(m), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_DOUBLE_EQ(back->moe_router_ns, 0.04);
  EXPECT_DOUBLE_EQ(back->moe_row_ns, 0.5);
  for (const char* key : {"moe_router_ns", "moe_row_ns"}) {
    auto bad = machine_to_json(m);
    bad[key] = 2000;
    auto r = machine_from_json(bad, "m.json");
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(back->slice_efficiency, m.slice_efficiency);
  auto j = machine_to_json(m);
  j["replicated_ns"] = -1;
  auto r = machine_from_json(j, "m.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("replicated_ns"), std::string::npos);
  for (double bad : {0.0, 5.0}) {
    j = machine_to_json(m);
    j["slice_efficiency"]["2"] = bad;
    r = machine_from_json(j, "m.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("slice_efficiency.2"), std::string::npos) << r.status().message();
  }
  j = machine_to_json(m);
  j["slice_efficiency"] = {{"1", 0.9}};
  EXPECT_FALSE(machine_from_json(j, "m.json").ok());
}

// The text report's lines are whole whatever their figures' size (a fixed 64-byte buffer once cut
// the lockstep line mid-word and ran the next line into it).
TEST(Sim, TextReportLinesAreWhole) {
  SimResult r;
  r.lockstep_scaling = 0.5;
  r.colocated_allreduce_us = 123456.7;
  r.colocated_sync_us = 1234.5;
  const std::string text = render_text(r);
  EXPECT_NE(text.find("about 100.0% of the work before each collective (sync; a provider's own part of the work at its "
                      "quiet pace)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("its measured 123456.7 us a small all-reduce"), std::string::npos) << text;
}

TEST(Sim, ADecodeFasterThanTheDefaultComputeAllowsIsFittedOnPrefillsEfficiency) {
  // A machine of little compute for its bandwidth: at the profile's compute efficiency (0.5) a
  // token's multiply-adds take longer than its reads, so a decode figure made at a faster
  // prefill efficiency could not be fitted before prefill's was known (session 39). The fit
  // finds both figures' efficiencies, and the one node reproduces both.
  Machine m = two_core_cpu();
  m.compute_tflops = 0.2;
  auto [dir, t] = local_pair(m, "slow-compute");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const auto s = *shape_preset("llama-1.1b-q4");
  SimOptions o = one_node(0.9);
  o.base_dir = dir;
  o.threads = 1;
  o.prefill_efficiency = 1.2;
  auto dec = simulate(s, *t, o);
  o.prompt = 30;
  auto pre = simulate(s, *t, o);
  ASSERT_TRUE(dec.ok() && pre.ok()) << dec.status().to_string();
  // At the default efficiency even four times the bandwidth is slower than the figure.
  SimOptions slow = one_node(kMaxCalibratedEfficiency);
  slow.base_dir = dir;
  slow.threads = 1;
  auto floor = simulate(s, *t, slow);
  ASSERT_TRUE(floor.ok());
  ASSERT_LT(floor->decode_tok_s, dec->decode_tok_s);
  OneNodeFigures f;
  f.decode_tok_s = dec->decode_tok_s;
  f.decode_pos = 40;
  f.threads = 1;
  f.prefill_tok_s = pre->prefill_tok_s;
  f.prefill_tokens = 30;
  SimOptions fresh;
  fresh.mode = Mode::kTensor;
  fresh.base_dir = dir;
  auto c = calibrate_one_node(s, *t, fresh, f);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_NEAR(c->decode_efficiency, 0.9, 2e-3);
  EXPECT_NEAR(c->prefill_efficiency, 1.2, 2e-3);
  // Without a prefill figure nothing tells the compute: the old bound stands, and says which figure.
  f.prefill_tok_s = 0;
  auto alone = calibrate_one_node(s, *t, fresh, f);
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("even at"), std::string::npos) << alone.status().to_string();
}

}  // namespace
}  // namespace lattice::sim
