// `lattice sim` as a command: its errors, its listing, and calibration writing a machine file the
// simulator then uses.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lattice/sim/calibrate.h"
#include "lattice/sim/machine.h"
#include "sim_testlib.h"

namespace lattice::sim {
namespace {

struct Out {
  int code = -1;
  std::string text;
};

Out lattice(const std::string& args) {
  const std::string cmd = "timeout 300 " + std::string(LATTICE_BINARY_DIR) + "/lattice " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  Out o;
  if (!p) return o;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) o.text.append(buf, n);
  const int st = ::pclose(p);
  o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

const std::string kExamples = std::string(LATTICE_SOURCE_DIR) + "/examples/topologies/";

TEST(SimCliProcess, ErrorsAndListing) {
  auto o = lattice("sim --hostfile " + kExamples + "4x-m3-ultra-tb5.json");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("give -m FILE or --preset NAME"), std::string::npos) << o.text;
  o = lattice("sim --preset nope --hostfile " + kExamples + "4x-m3-ultra-tb5.json");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.text.find("qwen3-235b-a22b-q8"), std::string::npos) << o.text;
  o = lattice("sim --preset llama-1.1b-q4 --hostfile " + kExamples + "4x-m3-ultra-tb5.json --fit 5");
  EXPECT_EQ(o.code, 2);
  EXPECT_NE(o.text.find("TOK_S@HOSTS"), std::string::npos) << o.text;
  o = lattice("sim --list-presets");
  EXPECT_EQ(o.code, 0);
  for (const char* w : {"kimi-k2-thinking-q4", "m5-max", "tb5-rdma", "llamacpp-rpc"})
    EXPECT_NE(o.text.find(w), std::string::npos) << w;
  // Kimi K2 on one 512 GB Mac: does not fit, exit 1, says how much is missing.
  o = lattice("sim --preset kimi-k2-thinking-q4 --engine mlx --hosts 1 --hostfile " + kExamples + "4x-m3-ultra-tb5.json");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("does not fit"), std::string::npos) << o.text;
  o = lattice("sim --preset kimi-k2-thinking-q4 --engine mlx --hosts 2 --json --hostfile " + kExamples +
              "4x-m3-ultra-tb5.json");
  ASSERT_EQ(o.code, 0) << o.text;
  auto j = nlohmann::json::parse(o.text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.text;
  EXPECT_EQ(j["nodes"].size(), 2u);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
}

TEST(SimCliProcess, CalibrateFromAOneNodeRun) {
  // A one-node run's figures (the format `bench engine --json` prints) at the efficiencies the
  // simulator is given here; --calibrate-from finds them again.
  const std::string topo = kExamples + "4x-m3-ultra-tb5.json";
  auto at = [&](const std::string& extra) {
    auto o = lattice("sim --preset llama-1.1b-q4 --hosts 1 --json --hostfile " + topo + " " + extra);
    EXPECT_EQ(o.code, 0) << o.text;
    return nlohmann::json::parse(o.text, nullptr, false);
  };
  auto dec = at("--fit 100@1 --prompt 16");
  ASSERT_FALSE(dec.is_discarded());
  const double eff = dec["fitted_decode_efficiency"].get<double>();
  const std::string dir = testing::scratch_dir("calibrate-from");
  const nlohmann::json rows = {
      {{"model_file", "/x/llama-1.1b.gguf"}, {"threads", 1}, {"n_prompt", 0}, {"n_gen", 32}, {"batch", 1},
       {"decode_tok_s", 100.0}, {"prefill_tok_s", nullptr}},
      {{"model_file", "/x/llama-1.1b.gguf"}, {"threads", 1}, {"n_prompt", 64}, {"n_gen", 0}, {"batch", 1},
       {"decode_tok_s", nullptr}, {"prefill_tok_s", 900.0}}};
  std::ofstream(dir + "/bench.json") << rows.dump();
  auto o = lattice("sim --preset llama-1.1b-q4 --json --hostfile " + topo + " --calibrate-from " + dir + "/bench.json");
  ASSERT_EQ(o.code, 0) << o.text;
  auto j = nlohmann::json::parse(o.text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.text;
  EXPECT_NEAR(j["fitted_decode_efficiency"].get<double>(), eff, 1e-3);
  EXPECT_GT(j["fitted_prefill_efficiency"].get<double>(), 0);
  EXPECT_EQ(j["nodes"].size(), 4u);
  // `lattice run --json` of one rank: decode after its prompt.
  std::ofstream(dir + "/run.json") << nlohmann::json{{"n_prompt", 8}, {"n_gen", 16}, {"threads", 1},
                                                     {"decode_tok_s", 100.0}, {"prefill_tok_s", 500.0}}
                                          .dump();
  o = lattice("sim --preset llama-1.1b-q4 --json --hostfile " + topo + " --calibrate-from " + dir + "/run.json");
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_FALSE(nlohmann::json::parse(o.text, nullptr, false).contains("token_overhead_ms")) << o.text;
  // `run --nodes 1 --json` reports its forward steps' share of a token: the rest is kept whole.
  std::ofstream(dir + "/run1.json") << nlohmann::json{{"n_prompt", 8}, {"n_gen", 16}, {"threads", 1}, {"nodes", 1},
                                                      {"decode_tok_s", 100.0}, {"prefill_tok_s", 500.0},
                                                      {"ranks", {{{"decode_ms_per_token", 10.0}, {"step_ms_per_token", 9.4}}}}}
                                           .dump();
  o = lattice("sim --preset llama-1.1b-q4 --json --hostfile " + topo + " --calibrate-from " + dir + "/run1.json");
  ASSERT_EQ(o.code, 0) << o.text;
  j = nlohmann::json::parse(o.text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.text;
  EXPECT_NEAR(j["token_overhead_ms"].get<double>(), 0.6, 1e-9);
  // Errors: the figures of another model, two thread counts, a run of several ranks, no file.
  o = lattice("make-model --arch llama --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --type q4_0 -o " +
              dir + "/other.gguf");
  ASSERT_EQ(o.code, 0) << o.text;
  o = lattice("sim -m " + dir + "/other.gguf --hostfile " + topo + " --calibrate-from " + dir + "/bench.json");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("not " + dir + "/other.gguf"), std::string::npos) << o.text;
  auto mixed = rows;
  mixed[1]["threads"] = 2;
  std::ofstream(dir + "/mixed.json") << mixed.dump();
  o = lattice("sim --preset llama-1.1b-q4 --hostfile " + topo + " --calibrate-from " + dir + "/mixed.json");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("threads"), std::string::npos) << o.text;
  std::ofstream(dir + "/four.json") << nlohmann::json{{"nodes", 4}, {"n_prompt", 8}, {"n_gen", 16}, {"threads", 1},
                                                      {"decode_tok_s", 100.0}}
                                           .dump();
  o = lattice("sim --preset llama-1.1b-q4 --hostfile " + topo + " --calibrate-from " + dir + "/four.json");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("not one"), std::string::npos) << o.text;
  o = lattice("sim --preset llama-1.1b-q4 --hostfile " + topo + " --calibrate-from " + dir + "/none.json");
  EXPECT_EQ(o.code, 2) << o.text;
  o = lattice("sim --preset llama-1.1b-q4 --hostfile " + topo + " --fit 10@1 --calibrate-from " + dir + "/bench.json");
  EXPECT_EQ(o.code, 2) << o.text;
}

// What would end a calibration after its ten minutes is said before them: a model that is not
// a GGUF, a folder that is not there. Each exits 1 at once and writes nothing.
TEST(SimCliProcess, CalibrateRefusesABadModelOrFolderBeforeMeasuring) {
  const std::string dir = ::testing::TempDir() + "/calibrate-refuses";
  std::filesystem::create_directories(dir);
  const std::string not_gguf = dir + "/not.gguf";
  std::ofstream(not_gguf) << "not a gguf";
  const auto t0 = std::chrono::steady_clock::now();
  auto o = lattice("sim --calibrate -o " + dir + "/m.json -m " + not_gguf);
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("-m: "), std::string::npos) << o.text;
  o = lattice("sim --calibrate -o " + dir + "/m.json -m " + dir + "/missing.gguf");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("missing.gguf"), std::string::npos) << o.text;
  o = lattice("sim --calibrate -o " + dir + "/no/such/folder/m.json");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_NE(o.text.find("is not a folder this user can write"), std::string::npos) << o.text;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));  // no measuring first
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.json"));
}

TEST(SimCliProcess, CompareWritesTableAndSvg) {
  const std::string dir = testing::scratch_dir("cmp");
  auto o = lattice("sim --preset qwen3-235b-a22b-q8 --engine mlx --compare " + kExamples + "4x-m3-ultra-tb5.json," +
                   kExamples + "4x-m3-ultra-tcp.json:llamacpp-rpc:pp --svg " + dir + "/p.svg");
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("| 4x-m3-ultra-tb5 mlx auto |"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("| 4x-m3-ultra-tcp llamacpp-rpc pp |"), std::string::npos) << o.text;
  std::ifstream f(dir + "/p.svg");
  std::string svg((std::istreambuf_iterator<char>(f)), {});
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
}

TEST(Calibrate, MeasurementsAreSaneAndCheckTheirArguments) {
  auto bw = measure_read_gbs(1, 64u << 20, 2);
  ASSERT_TRUE(bw.ok()) << bw.status().to_string();
  EXPECT_GT(*bw, 0.1);
  EXPECT_LT(*bw, 1000);
  auto mm = measure_matmul_tflops(1, 256, 512, 16, 2);
  ASSERT_TRUE(mm.ok()) << mm.status().to_string();
  EXPECT_GT(*mm, 1e-4);
  EXPECT_FALSE(measure_read_gbs(0, 64u << 20, 1).ok());
  EXPECT_FALSE(measure_read_gbs(1, 1000, 1).ok());
  EXPECT_FALSE(measure_matmul_tflops(1, 256, 100, 16, 1).ok());  // not a whole number of blocks
  auto k = measure_decode_kernel_gbs(2, 8u << 20, 1);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_GT(*k, 0.01);
  EXPECT_LT(*k, 1000);
  EXPECT_FALSE(measure_decode_kernel_gbs(0, 8u << 20, 1).ok());
  // Prefill's matmul by separate workers at once: each its own rate, of the same order alone.
  auto w1 = measure_matmul_workers_tflops(1, 256, 512, 16, 2);
  auto w2 = measure_matmul_workers_tflops(2, 256, 512, 16, 2);
  ASSERT_TRUE(w1.ok()) << w1.status().to_string();
  ASSERT_TRUE(w2.ok()) << w2.status().to_string();
  EXPECT_GT(*w1, 1e-4);
  EXPECT_GT(*w2, 1e-4);
  EXPECT_FALSE(measure_matmul_workers_tflops(0, 256, 512, 16, 1).ok());
  EXPECT_FALSE(measure_matmul_workers_tflops(1, 256, 100, 16, 1).ok());
  EXPECT_FALSE(measure_decode_kernel_gbs(1, 1000, 1).ok());
  // A rank's share between two collectives: rows of a larger weight in turn.
  auto d = DecodeKernel::make(1u << 20, 8u << 20);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_GT((*d)->weight_bytes(), 0.9 * (1u << 20));
  EXPECT_LE((*d)->weight_bytes(), 1.0 * (1u << 20));
  for (int i = 0; i < 12; ++i) (*d)->run();  // wraps past the end of the 8 MiB
  auto c = (*d)->copy();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->weight_bytes(), (*d)->weight_bytes());
  EXPECT_FALSE(DecodeKernel::make(100).ok());
  EXPECT_FALSE(DecodeKernel::make(1u << 20, size_t{1} << 40).ok());
  // The work every tensor-parallel rank repeats whole: a few nanoseconds an element, not zero.
  auto rep = measure_replicated_ns(512, 8, 2);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  EXPECT_GT(*rep, 0.01);
  EXPECT_LT(*rep, 1000);
  EXPECT_FALSE(measure_replicated_ns(100, 8, 1).ok());
  EXPECT_FALSE(measure_replicated_ns(512, 0, 1).ok());
  // A mixture of experts' router and chosen rows: fractions of a nanosecond to a few, not zero.
  auto moe = measure_moe_replicated(512, 16, 4, 8, 2);
  ASSERT_TRUE(moe.ok()) << moe.status().to_string();
  EXPECT_GT(moe->router_ns, 1e-4);
  EXPECT_LT(moe->router_ns, 100);
  EXPECT_GT(moe->row_ns, 1e-3);
  EXPECT_LT(moe->row_ns, 1000);
  EXPECT_FALSE(measure_moe_replicated(100, 16, 4, 8, 1).ok());
  EXPECT_FALSE(measure_moe_replicated(512, 4, 8, 8, 1).ok());  // more experts a row than there are
  // A slice's rate against the whole's: a fraction near 1, and 1 part is the whole.
  auto sl = measure_slice_efficiency(2, 256, 512, 16, 2);
  ASSERT_TRUE(sl.ok()) << sl.status().to_string();
  EXPECT_GT(*sl, 0.2);
  EXPECT_LT(*sl, 5);
  EXPECT_FALSE(measure_slice_efficiency(3, 256, 512, 16, 1).ok());  // 256 rows are not 3 whole slices
  EXPECT_FALSE(measure_slice_efficiency(0, 256, 512, 16, 1).ok());
}

// A measurement's starts: more while they disagree, the transient outvoted, and never unbounded.
TEST(Calibrate, StartsThatDisagreeTakeMoreAndTheMedianOutvotesATransient) {
  EXPECT_FALSE(starts_disagree({}));
  EXPECT_FALSE(starts_disagree({1933}));
  EXPECT_FALSE(starts_disagree({9.2, 17.0, 16.8}));  // two placements of 3 ranks on 2 cores, both real
  EXPECT_TRUE(starts_disagree({1933, 2104, 10.3}));
  EXPECT_FALSE(starts_disagree({120, -40, 0, 130}));  // differences of 0 or below are not compared
  EXPECT_TRUE(starts_disagree({1, 2.5}, 2.0));
  // A host that read one regime in two of three starts and the other after: the loop of
  // tools/lattice/sim_calibrate.cc with the session's readings.
  const std::vector<double> host = {1933, 2104, 10.3, 10.4, 10.4, 9.9, 10.1, 10.2, 10.0, 10.3};
  std::vector<double> readings;
  for (int i = 0; another_start(i, 3, 6, {&readings}); ++i) readings.push_back(host[i]);
  EXPECT_EQ(readings.size(), 9u);  // the 3 first and all 6 more: the two high readings stay among them
  EXPECT_DOUBLE_EQ(median_of(readings), 10.3);  // of 9.9-10.4 and the two, where 3 starts gave 1933
  // Starts that agree take no more; nor do they with no more allowed (--quick).
  readings.clear();
  for (int i = 0; another_start(i, 3, 6, {&readings}); ++i) readings.push_back(host[2 + i]);
  EXPECT_EQ(readings.size(), 3u);
  readings.clear();
  for (int i = 0; another_start(i, 1, 0, {&readings}); ++i) readings.push_back(host[i]);
  EXPECT_EQ(readings.size(), 1u);
  // Any of the watched readings disagreeing is enough: the device's beside shm's.
  std::vector<double> shm = {300, 310, 305}, device = {700, 2900, 720};
  EXPECT_TRUE(another_start(3, 3, 6, {&shm, &device}));
  EXPECT_FALSE(another_start(9, 3, 6, {&shm, &device}));
  EXPECT_DOUBLE_EQ(median_of({}), 0);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 3);  // the upper middle of an even count
}

// Calibration runs bench fabric three times, bench coll at 2-4 ranks four times (in lockstep
// twice, as a pipeline's chain twice) and streams a 256 MiB buffer: tens of seconds.
TEST(SimSlow, CalibrateWritesAUsableMachineFile) {
  const std::string dir = testing::scratch_dir("cal");
  auto o = lattice("sim --calibrate --quick -o " + dir + "/here.json");
  ASSERT_EQ(o.code, 0) << o.text;
  auto m = load_machine(dir + "/here.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_GT(m->mem_bw_gbs, 0);
  EXPECT_GT(m->compute_tflops, 0);
  EXPECT_EQ(m->links.count("shm"), 1u);
  EXPECT_EQ(m->links.count("tcp"), 1u);
  EXPECT_EQ(m->links.count("verbs"), 1u);  // the emulated device
  // The all-reduce of 2 to 2x cores (at least 4) rank processes, over the three providers.
  for (const char* prov : {"shm", "tcp", "verbs"})
    for (int k : {2, 3, 4}) {
      ASSERT_EQ(m->links.at(prov).allreduce_us.count(k), 1u) << prov << " " << k;
      EXPECT_GT(m->links.at(prov).allreduce_us.at(k), 0.1) << prov << " " << k;
      EXPECT_LT(m->links.at(prov).allreduce_us.at(k), 1e5) << prov << " " << k;
    }
  // At 256 KiB too over shm and tcp (the simulator's colocated cost grows with a call's bytes),
  // more than the 8 KiB call; not over the device.
  for (const char* prov : {"shm", "tcp"})
    for (int k : {2, 3, 4}) {
      ASSERT_EQ(m->links.at(prov).allreduce_256k_us.count(k), 1u) << prov << " " << k;
      EXPECT_GT(m->links.at(prov).allreduce_256k_us.at(k), m->links.at(prov).allreduce_us.at(k)) << prov << " " << k;
    }
  EXPECT_EQ(m->links.at("verbs").allreduce_256k_us.size(), 0u);
  // The device's prefill step over shm's, at every rank count (microseconds, 0 where no
  // longer); the other providers have none.
  for (int k : {2, 3, 4}) {
    ASSERT_EQ(m->links.at("verbs").lockstep_256k_over_shm_us.count(k), 1u) << k;
    EXPECT_GE(m->links.at("verbs").lockstep_256k_over_shm_us.at(k), 0.0) << k;
    EXPECT_LT(m->links.at("verbs").lockstep_256k_over_shm_us.at(k), 1e5) << k;
  }
  EXPECT_EQ(m->links.at("shm").lockstep_256k_over_shm_us.size(), 0u);
  // The device's pace over shm's: a line through the two kernels' points, at every rank count.
  for (int k : {2, 3, 4}) {
    ASSERT_EQ(m->links.at("verbs").lockstep_over_shm_us.count(k), 1u) << k;
    ASSERT_EQ(m->links.at("verbs").lockstep_over_shm_slope.count(k), 1u) << k;
    EXPECT_LT(m->links.at("verbs").lockstep_over_shm_us.at(k), 1e5) << k;
    EXPECT_LT(m->links.at("verbs").lockstep_over_shm_slope.at(k), 10.0) << k;
  }
  // Prefill's matmul on every core against one (a fraction; 1 where it scales fully).
  EXPECT_GT(m->compute_scaling, 0.04);
  EXPECT_LE(m->compute_scaling, 1.0);
  std::ofstream(dir + "/t.json") << R"({"version": 1, "hosts": [
      {"name": "r0", "address": "127.0.0.1:7100", "machine": "here.json"},
      {"name": "r1", "address": "127.0.0.1:7101", "machine": "here.json"}],
      "links": [{"a": "r0", "b": "r1", "provider": "tcp"}]})";
  o = lattice("sim --preset llama-1.1b-q4 --hostfile " + dir + "/t.json --json");
  ASSERT_EQ(o.code, 0) << o.text;
  auto j = nlohmann::json::parse(o.text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.text;
  EXPECT_EQ(j["links"][0]["medium"], "tcp (measured)");
  EXPECT_EQ(j["colocated_allreduce_us"], m->links.at("tcp").allreduce_us.at(2));
  EXPECT_EQ(j["colocated_allreduce_256k_us"], m->links.at("tcp").allreduce_256k_us.at(2));
  // Ranks in lockstep, up to the cores (two or more here).
  ASSERT_EQ(m->lockstep_scaling.count(2), 1u);
  EXPECT_GT(m->lockstep_scaling.at(2), 0.05);
  EXPECT_LE(m->lockstep_scaling.at(2), 1.0);
  EXPECT_EQ(m->lockstep_scaling.count(m->cores + 1), 0u);
  // Over loopback tcp, its own figure on cores of their own (none beyond them), which
  // multiplies the machine's for ranks joined by tcp.
  ASSERT_EQ(m->links.at("tcp").lockstep_scaling.count(2), 1u);
  EXPECT_GT(m->links.at("tcp").lockstep_scaling.at(2), 0.05);
  EXPECT_LE(m->links.at("tcp").lockstep_scaling.at(2), 1.0);
  EXPECT_EQ(m->links.at("tcp").lockstep_scaling.count(m->cores + 1), 0u);
  EXPECT_DOUBLE_EQ(j["lockstep_scaling"].get<double>(),
                   m->lockstep_scaling.at(2) * m->links.at("tcp").lockstep_scaling.at(2));
  // The tcp link emulator's relays: their CPU a call at every count of the calls, more than the
  // relays of 2 ranks could take below a microsecond a message.
  for (int k : {2, 3, 4}) {
    ASSERT_EQ(m->links.at("tcp").emulator_cpu_us.count(k), 1u) << k;
    EXPECT_GT(m->links.at("tcp").emulator_cpu_us.at(k), 1.0) << k;
    EXPECT_LT(m->links.at("tcp").emulator_cpu_us.at(k), 1e5) << k;
  }
  EXPECT_EQ(m->links.at("shm").emulator_cpu_us.size(), 0u);
  // The emulated verbs device in lockstep against shm is its pace line above, at every count of
  // the calls; the share it replaced is no longer written.
  EXPECT_EQ(m->links.at("verbs").lockstep_scaling.size(), 0u);
  // Pipeline stages over the device against shm (bench coll --op chain), at every count.
  for (int k : {2, 3, 4}) {
    ASSERT_EQ(m->links.at("verbs").pipeline_scaling.count(k), 1u) << k;
    EXPECT_GT(m->links.at("verbs").pipeline_scaling.at(k), 0.04) << k;
    EXPECT_LE(m->links.at("verbs").pipeline_scaling.at(k), 1.0) << k;
  }
  EXPECT_EQ(m->links.at("shm").pipeline_scaling.size(), 0u);
}

}  // namespace
}  // namespace lattice::sim
