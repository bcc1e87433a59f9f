#include "lattice/sim/machine.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>

namespace lattice::sim {

double Machine::slice_rate(int parts) const {
  auto it = slice_efficiency.upper_bound(parts);
  return it == slice_efficiency.begin() ? 1.0 : std::prev(it)->second;
}

double Machine::read_gbs(int threads, int sharers) const {
  double share = mem_bw_gbs / std::max(1, sharers);
  if (core_bw_gbs > 0) share = std::min(share, core_bw_gbs * std::max(1, threads));
  return share;
}

namespace {
// Rounds in which `all` threads in lockstep get through one step of their work on `cores` cores:
// a thread runs its part to the next synchronisation whole, since that part is shorter than the
// scheduler's time slice (a layer's share is well under a millisecond).
int waves(int all, int cores) { return (all + cores - 1) / cores; }
}  // namespace

double Machine::cores_held(int threads, int sharers) const {
  const int t = std::max(1, threads), all = t * std::max(1, sharers);
  if (cores <= 0 || all <= cores) return t;
  return double(t) / waves(all, cores);
}

double Machine::engine_read_gbs(int threads, int sharers, double efficiency) const {
  const int t = std::max(1, threads), all = t * std::max(1, sharers);
  // The bus among the threads running at once, for the rounds this process's threads run in.
  const double bus = cores <= 0 || all <= cores ? mem_bw_gbs / std::max(1, sharers)
                                                : mem_bw_gbs * t / cores / waves(all, cores);
  if (core_bw_gbs <= 0) return bus * efficiency;
  return std::min(core_bw_gbs * cores_held(threads, sharers) * efficiency * busy_scale(kernel_scaling, threads, sharers),
                  bus);
}

double Machine::busy_scale(double fraction, int threads, int sharers) const {
  if (cores <= 1) return 1;
  const double busy = std::min<double>(cores, double(std::max(1, threads)) * std::max(1, sharers));
  return 1 - (1 - fraction) * (busy - 1) / (cores - 1);
}

namespace {

Result<double> num(const nlohmann::json& j, const char* key, bool required, double fallback, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return InvalidArgument(src + ": machine key '" + key + "' is missing");
    return fallback;
  }
  if (!it->is_number()) return InvalidArgument(src + ": machine key '" + key + "' must be a number");
  double v = it->get<double>();
  if (v < 0) return InvalidArgument(src + ": machine key '" + key + "' must not be negative");
  return v;
}

// j[key], if there, maps a rank count ("2") to a number in (0, most] ([0, most] with `zero`), `what`
// in errors; `at` prefixes the key in them.
Result<std::map<int, double>> rank_map(const nlohmann::json& j, const char* key, const std::string& at, double most,
                                       const char* what, bool zero = false) {
  std::map<int, double> out;
  auto it = j.find(key);
  if (it == j.end()) return out;
  const std::string where = at + key;
  if (!it->is_object()) return InvalidArgument(where + " maps a rank count (\"2\") to a number");
  for (auto k = it->begin(); k != it->end(); ++k) {
    int ranks = 0;
    const std::string& name = k.key();
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), ranks);
    if (ec != std::errc() || end != name.data() + name.size() || ranks < 2 || ranks > 4096)
      return InvalidArgument(where + ": key '" + name + "' is not a rank count in 2..4096");
    if (!k->is_number() || k->get<double>() < 0 || (k->get<double>() == 0 && !zero) || k->get<double>() > most)
      return InvalidArgument(where + "." + name + " must be " + what);
    out[ranks] = k->get<double>();
  }
  return out;
}

}  // namespace

Result<Machine> machine_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return InvalidArgument(source + ": a machine file holds one JSON object");
  static const char* known[] = {"name", "source", "mem_bw_gbs", "core_bw_gbs", "cores", "compute_tflops", "memory_gb",
                                "decode_efficiency", "prefill_efficiency", "kernel_scaling", "compute_scaling", "replicated_ns", "moe_router_ns", "moe_row_ns", "slice_efficiency", "lockstep_scaling", "power_load_w", "power_idle_w", "throttles", "sustained_factor",
                                "tb5_ports", "tb5_controllers", "links", "measured", "comment"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return it.key() == k; }) == std::end(known))
      return InvalidArgument(source + ": unknown machine key '" + it.key() + "'");
  Machine m;
  m.name = j.value("name", source);
  m.source = j.value("source", source);
  LATTICE_ASSIGN_OR_RETURN(m.mem_bw_gbs, num(j, "mem_bw_gbs", true, 0, source));
  LATTICE_ASSIGN_OR_RETURN(m.compute_tflops, num(j, "compute_tflops", true, 0, source));
  LATTICE_ASSIGN_OR_RETURN(m.memory_gb, num(j, "memory_gb", true, 0, source));
  if (m.mem_bw_gbs <= 0 || m.compute_tflops <= 0 || m.memory_gb <= 0)
    return InvalidArgument(source + ": mem_bw_gbs, compute_tflops and memory_gb must be positive");
  LATTICE_ASSIGN_OR_RETURN(m.core_bw_gbs, num(j, "core_bw_gbs", false, 0, source));
  LATTICE_ASSIGN_OR_RETURN(double cores, num(j, "cores", false, 0, source));
  m.cores = static_cast<int>(cores);
  LATTICE_ASSIGN_OR_RETURN(m.decode_efficiency, num(j, "decode_efficiency", false, 0, source));
  if (m.decode_efficiency > 1) return InvalidArgument(source + ": decode_efficiency is a fraction in (0, 1]");
  LATTICE_ASSIGN_OR_RETURN(m.prefill_efficiency, num(j, "prefill_efficiency", false, 0, source));
  if (m.prefill_efficiency > 1) return InvalidArgument(source + ": prefill_efficiency is a fraction in (0, 1]");
  LATTICE_ASSIGN_OR_RETURN(m.kernel_scaling, num(j, "kernel_scaling", false, 1, source));
  if (m.kernel_scaling <= 0 || m.kernel_scaling > 1)
    return InvalidArgument(source + ": kernel_scaling is a fraction in (0, 1]");
  LATTICE_ASSIGN_OR_RETURN(m.compute_scaling, num(j, "compute_scaling", false, 1, source));
  if (m.compute_scaling <= 0 || m.compute_scaling > 1)
    return InvalidArgument(source + ": compute_scaling is a fraction in (0, 1]");
  LATTICE_ASSIGN_OR_RETURN(m.replicated_ns, num(j, "replicated_ns", false, 0, source));
  if (m.replicated_ns < 0 || m.replicated_ns > 1e3)
    return InvalidArgument(source + ": replicated_ns is nanoseconds an element in [0, 1000]");
  LATTICE_ASSIGN_OR_RETURN(m.moe_router_ns, num(j, "moe_router_ns", false, 0, source));
  LATTICE_ASSIGN_OR_RETURN(m.moe_row_ns, num(j, "moe_row_ns", false, 0, source));
  if (m.moe_router_ns < 0 || m.moe_router_ns > 1e3 || m.moe_row_ns < 0 || m.moe_row_ns > 1e3)
    return InvalidArgument(source + ": moe_router_ns and moe_row_ns are nanoseconds in [0, 1000]");
  LATTICE_ASSIGN_OR_RETURN(m.slice_efficiency, rank_map(j, "slice_efficiency", source + ": ", 4.0, "a ratio in (0, 4]"));
  LATTICE_ASSIGN_OR_RETURN(m.lockstep_scaling, rank_map(j, "lockstep_scaling", source + ": ", 1.0, "a fraction in (0, 1]"));
  LATTICE_ASSIGN_OR_RETURN(m.power_load_w, num(j, "power_load_w", false, 0, source));
  LATTICE_ASSIGN_OR_RETURN(m.power_idle_w, num(j, "power_idle_w", false, 0, source));
  LATTICE_ASSIGN_OR_RETURN(m.sustained_factor, num(j, "sustained_factor", false, 1, source));
  if (m.sustained_factor <= 0 || m.sustained_factor > 1)
    return InvalidArgument(source + ": sustained_factor is a fraction in (0, 1]");
  m.throttles = j.value("throttles", false);
  LATTICE_ASSIGN_OR_RETURN(double ports, num(j, "tb5_ports", false, 0, source));
  LATTICE_ASSIGN_OR_RETURN(double ctrls, num(j, "tb5_controllers", false, ports, source));
  m.tb5_ports = static_cast<int>(ports);
  m.tb5_controllers = static_cast<int>(ctrls);
  if (auto it = j.find("links"); it != j.end()) {
    if (!it->is_object()) return InvalidArgument(source + ": 'links' maps a provider to {latency_us, gbytes_s}");
    for (auto l = it->begin(); l != it->end(); ++l) {
      LATTICE_ASSIGN_OR_RETURN(double lat, num(*l, "latency_us", true, 0, source + " links." + l.key()));
      LATTICE_ASSIGN_OR_RETURN(double bw, num(*l, "gbytes_s", true, 0, source + " links." + l.key()));
      if (lat <= 0 || bw <= 0) return InvalidArgument(source + ": links." + l.key() + " needs positive figures");
      MeasuredLink& ml = m.links[l.key()];
      ml.latency_us = lat;
      ml.gbytes_s = bw;
      LATTICE_ASSIGN_OR_RETURN(ml.allreduce_us, rank_map(*l, "allreduce_8k_us", source + ": links." + l.key() + ".", 1e6,
                                                         "microseconds in (0, 1e6]"));
      LATTICE_ASSIGN_OR_RETURN(ml.allreduce_256k_us, rank_map(*l, "allreduce_256k_us", source + ": links." + l.key() + ".",
                                                              1e6, "microseconds in (0, 1e6]"));
      LATTICE_ASSIGN_OR_RETURN(ml.lockstep_scaling, rank_map(*l, "lockstep_scaling", source + ": links." + l.key() + ".",
                                                             1.0, "a fraction in (0, 1]"));
      LATTICE_ASSIGN_OR_RETURN(ml.lockstep_256k_over_shm_us,
                               rank_map(*l, "lockstep_256k_over_shm_us", source + ": links." + l.key() + ".", 1e6,
                                        "microseconds in [0, 1e6]", true));
      LATTICE_ASSIGN_OR_RETURN(ml.lockstep_over_shm_us,
                               rank_map(*l, "lockstep_over_shm_us", source + ": links." + l.key() + ".", 1e6,
                                        "microseconds in [0, 1e6]", true));
      LATTICE_ASSIGN_OR_RETURN(ml.lockstep_over_shm_slope,
                               rank_map(*l, "lockstep_over_shm_slope", source + ": links." + l.key() + ".", 10.0,
                                        "a ratio in [0, 10]", true));
      LATTICE_ASSIGN_OR_RETURN(ml.emulator_cpu_us, rank_map(*l, "emulator_cpu_8k_us", source + ": links." + l.key() + ".",
                                                            1e6, "microseconds in (0, 1e6]"));
      LATTICE_ASSIGN_OR_RETURN(ml.pipeline_scaling, rank_map(*l, "pipeline_scaling", source + ": links." + l.key() + ".",
                                                             1.0, "a fraction in (0, 1]"));
    }
  }
  return m;
}

nlohmann::json machine_to_json(const Machine& m) {
  nlohmann::json j = {{"name", m.name},
                      {"source", m.source},
                      {"mem_bw_gbs", m.mem_bw_gbs},
                      {"core_bw_gbs", m.core_bw_gbs},
                      {"cores", m.cores},
                      {"compute_tflops", m.compute_tflops},
                      {"memory_gb", m.memory_gb},
                      {"decode_efficiency", m.decode_efficiency},
                      {"prefill_efficiency", m.prefill_efficiency},
                      {"kernel_scaling", m.kernel_scaling},
                      {"compute_scaling", m.compute_scaling},
                      {"replicated_ns", m.replicated_ns},
                      {"moe_router_ns", m.moe_router_ns},
                      {"moe_row_ns", m.moe_row_ns},
                      {"power_load_w", m.power_load_w},
                      {"power_idle_w", m.power_idle_w},
                      {"throttles", m.throttles},
                      {"sustained_factor", m.sustained_factor},
                      {"tb5_ports", m.tb5_ports},
                      {"tb5_controllers", m.tb5_controllers}};
  for (const auto& [ranks, f] : m.lockstep_scaling) j["lockstep_scaling"][std::to_string(ranks)] = f;
  for (const auto& [ranks, f] : m.slice_efficiency) j["slice_efficiency"][std::to_string(ranks)] = f;
  for (const auto& [k, l] : m.links) {
    j["links"][k] = {{"latency_us", l.latency_us}, {"gbytes_s", l.gbytes_s}};
    for (const auto& [ranks, us] : l.allreduce_us) j["links"][k]["allreduce_8k_us"][std::to_string(ranks)] = us;
    for (const auto& [ranks, us] : l.allreduce_256k_us) j["links"][k]["allreduce_256k_us"][std::to_string(ranks)] = us;
    for (const auto& [ranks, f] : l.lockstep_scaling) j["links"][k]["lockstep_scaling"][std::to_string(ranks)] = f;
    for (const auto& [ranks, us] : l.lockstep_256k_over_shm_us)
      j["links"][k]["lockstep_256k_over_shm_us"][std::to_string(ranks)] = us;
    for (const auto& [ranks, us] : l.lockstep_over_shm_us) j["links"][k]["lockstep_over_shm_us"][std::to_string(ranks)] = us;
    for (const auto& [ranks, f] : l.lockstep_over_shm_slope)
      j["links"][k]["lockstep_over_shm_slope"][std::to_string(ranks)] = f;
    for (const auto& [ranks, us] : l.emulator_cpu_us) j["links"][k]["emulator_cpu_8k_us"][std::to_string(ranks)] = us;
    for (const auto& [ranks, f] : l.pipeline_scaling) j["links"][k]["pipeline_scaling"][std::to_string(ranks)] = f;
  }
  return j;
}

Result<Machine> load_machine(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFound("machine file '" + path + "' cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  return machine_from_json(j, path);
}

Result<Machine> resolve_machine(const std::string& name_or_path, const std::string& base_dir) {
  const bool path_like = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
  if (!path_like) return machine_preset(name_or_path);
  std::string p = name_or_path;
  if (p[0] != '/' && !base_dir.empty()) p = base_dir + "/" + p;
  return load_machine(p);
}

}  // namespace lattice::sim
