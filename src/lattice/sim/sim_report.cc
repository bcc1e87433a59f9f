// `lattice sim` output: JSON (one object) and text.
#include <cstdio>

#include "lattice/sim/sim.h"

namespace lattice::sim {
namespace {

nlohmann::json parts(const Breakdown& b) {
  return {{"compute_ms", b.compute_us / 1e3},     {"weight_reads_ms", b.weights_us / 1e3},
          {"link_latency_ms", b.latency_us / 1e3}, {"link_bandwidth_ms", b.bandwidth_us / 1e3},
          {"sync_ms", b.sync_us / 1e3}};
}

std::string fmt(const char* f, double v) {
  const int n = std::snprintf(nullptr, 0, f, v);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), f, v);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string gb(double bytes) { return fmt("%.2f GB", bytes / 1e9); }

}  // namespace

nlohmann::json to_json(const SimResult& r) {
  nlohmann::json j = {{"model", r.model},
                      {"engine", r.engine},
                      {"mode", std::string(to_string(r.mode))},
                      {"why", r.why},
                      {"nodes_count", r.world},
                      {"tp", r.tp},
                      {"pp", r.pp},
                      {"allreduce", r.allreduce},
                      {"colocated_allreduce_us", r.colocated_allreduce_us},
                      {"colocated_sync_us", r.colocated_sync_us},
                      {"colocated_allreduce_256k_us", r.colocated_allreduce_256k_us},
                      {"colocated_sync_us_per_kib", r.colocated_sync_us_per_kib},
                      {"lockstep_scaling", r.lockstep_scaling},
                      {"lockstep_256k_over_shm_us", r.lockstep_256k_over_shm_us},
                      {"lockstep_over_shm_us", r.lockstep_over_shm_us},
                      {"lockstep_over_shm_slope", r.lockstep_over_shm_slope},
                      {"core_turns", r.core_turns},
                      {"pipeline_scaling", r.pipeline_scaling},
                      {"emulator_cpu_us", r.emulator_cpu_us},
                      {"decode_tok_s", r.decode_tok_s},
                      {"prefill_tok_s", r.prefill_tok_s},
                      {"ttft_ms", r.ttft_ms},
                      {"token_ms", r.token_ms},
                      {"model_bytes", r.model_bytes},
                      {"weight_bytes_per_token", r.bytes_per_token},
                      {"energy_j_per_token", r.energy_j_per_token},
                      {"fits", r.fits},
                      {"missing_bytes", r.missing_bytes},
                      {"token_breakdown", parts(r.token)}};
  j["nodes"] = nlohmann::json::array();
  for (const NodeResult& n : r.nodes)
    j["nodes"].push_back({{"name", n.name},
                          {"machine", n.machine},
                          {"part", n.part},
                          {"weight_bytes", n.share.weight_bytes},
                          {"kv_bytes", n.share.kv_bytes},
                          {"total_bytes", n.share.total_bytes},
                          {"memory_bytes", n.share.memory_bytes},
                          {"read_gbs", n.read_gbs},
                          {"power_w", n.power_w},
                          {"throttles", n.throttles},
                          {"token_breakdown", parts(n.token)}});
  j["links"] = nlohmann::json::array();
  for (const LinkResult& l : r.links)
    j["links"].push_back({{"a", l.a},
                          {"b", l.b},
                          {"medium", l.medium},
                          {"latency_us", l.latency_us},
                          {"gbytes_s", l.gbytes_s},
                          {"bytes_per_token_ab", l.bytes_per_token_ab},
                          {"bytes_per_token_ba", l.bytes_per_token_ba},
                          {"busy_fraction", l.busy_fraction}});
  return j;
}

std::string render_text(const SimResult& r) {
  std::string s;
  s += "model " + r.model + " (" + gb(r.model_bytes) + ", " + gb(r.bytes_per_token) + " read per token), engine " +
       r.engine + "\n";
  s += "layout: " + std::string(to_string(r.mode)) + " over " + std::to_string(r.world) + " nodes (" + r.why + ")";
  if (!r.allreduce.empty()) s += "; all-reduce " + r.allreduce;
  s += "\n";
  if (r.colocated_allreduce_us > 0)
    s += fmt("ranks on one machine: its measured %.1f us a small all-reduce", r.colocated_allreduce_us) +
         fmt(" adds %.1f us a collective to the wire model (sync)\n", r.colocated_sync_us);
  if (r.colocated_allreduce_us == 0 && r.colocated_allreduce_256k_us > 0)
    s += fmt("ranks on one machine over the emulated device: its 256 KiB step between prefill's kernels %.1f us longer "
             "than shm's, in place of its lockstep share",
             r.lockstep_256k_over_shm_us) +
         fmt(" (shm's call %.1f us)", r.colocated_allreduce_256k_us - r.lockstep_256k_over_shm_us) +
         fmt(": %.3f us more a KiB beyond 8 (sync)\n", r.colocated_sync_us_per_kib);
  else if (r.colocated_allreduce_256k_us > 0)
    s += fmt("  and at 256 KiB its measured %.1f us:", r.colocated_allreduce_256k_us) +
         fmt(" %.3f us more a KiB beyond 8 (sync)\n", r.colocated_sync_us_per_kib);
  if (r.core_turns > 1)
    s += std::string("ranks beyond the cores: pinned round them as `run --bind cores` does (the i-th on core i mod the cores), ") +
         "up to " + std::to_string(r.core_turns) + " a core, each core running its ranks' work in turn (the others' turns: sync)\n";
  if (r.lockstep_scaling < 1)
    s += "ranks in lockstep on one machine: each segment waits for its slowest rank, " +
         fmt("about %.1f%% of the work before each collective", 100 / r.lockstep_scaling - 100) +
         " (sync; a provider's own part of the work at its quiet pace)\n";
  if (r.lockstep_over_shm_us >= 0)
    s += "ranks on one machine over the emulated device: each collective " +
         fmt("%.0f us", r.lockstep_over_shm_us) + fmt(" plus %.3f x the step shm would take (sync)\n", r.lockstep_over_shm_slope);
  if (r.pipeline_scaling < 1)
    s += "pipeline stages on one machine over this provider: " +
         fmt("%.1f%% of each stage's work more than over shm (sync)\n", 100 / r.pipeline_scaling - 100);
  if (r.emulator_cpu_us > 0)
    s += "ranks holding every core over emulated tcp links: the relays' " + fmt("%.1f us of CPU", r.emulator_cpu_us) +
         " a small all-reduce hold every rank " + fmt("%.1f us a message (sync)\n", r.emulator_us_per_msg);
  s += fmt("decode  %.1f tok/s", r.decode_tok_s) + fmt(" (%.2f ms a token)", r.token_ms) +
       fmt("   prefill %.0f tok/s", r.prefill_tok_s) + fmt("   time to first token %.0f ms", r.ttft_ms) +
       fmt("   %.2f J/token\n", r.energy_j_per_token);
  const Breakdown& b = r.token;
  const double t = std::max(b.total(), 1e-9);
  s += "one token: compute " + fmt("%.2f ms", b.compute_us / 1e3) + fmt(" (%.0f%%)", 100 * b.compute_us / t) +
       ", weight reads " + fmt("%.2f ms", b.weights_us / 1e3) + fmt(" (%.0f%%)", 100 * b.weights_us / t) +
       ", link latency " + fmt("%.2f ms", b.latency_us / 1e3) + fmt(" (%.0f%%)", 100 * b.latency_us / t) +
       ", link bandwidth " + fmt("%.2f ms", b.bandwidth_us / 1e3) + fmt(" (%.0f%%)", 100 * b.bandwidth_us / t) +
       ", sync " + fmt("%.2f ms", b.sync_us / 1e3) + fmt(" (%.0f%%)\n", 100 * b.sync_us / t);
  s += "nodes:\n";
  for (const NodeResult& n : r.nodes) {
    char line[512];
    std::snprintf(line, sizeof line, "  %-10s %-12s %-44s weights %9s kv %9s total %9s of %9s  %6.1f GB/s%s\n",
                  n.name.c_str(), n.machine.c_str(), n.part.c_str(), gb(n.share.weight_bytes).c_str(),
                  gb(n.share.kv_bytes).c_str(), gb(n.share.total_bytes).c_str(), gb(n.share.memory_bytes).c_str(),
                  n.read_gbs, n.throttles ? "  (throttles when sustained)" : "");
    s += line;
  }
  if (!r.links.empty()) s += "links (bytes per token each way):\n";
  for (const LinkResult& l : r.links) {
    char line[256];
    std::snprintf(line, sizeof line, "  %s - %s  %-18s %7.1f us %6.2f GB/s   %10.0f / %10.0f B   busy %.1f%%\n",
                  l.a.c_str(), l.b.c_str(), l.medium.c_str(), l.latency_us, l.gbytes_s, l.bytes_per_token_ab,
                  l.bytes_per_token_ba, 100 * l.busy_fraction);
    s += line;
  }
  if (!r.fits) s += "does not fit: " + gb(r.missing_bytes) + " of memory missing\n";
  return s;
}

}  // namespace lattice::sim
