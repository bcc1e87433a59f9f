// Node checks of the machine: free memory against the plan's need, thermal state, power
// source, and the cluster secret's file permissions.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "lattice/core/host_stats.h"
#include "lattice/doctor/checks.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/parallel/plan.h"

namespace lattice::doctor::detail {
namespace {

namespace fs = std::filesystem;

std::string gib(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1ull << 20));
  return buf;
}

std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

Check memory(const Context& c) {
  const std::string have = "available " + gib(c.mem_available);
  if (c.options.model.empty()) return make("memory", "free memory", Level::kOk, have + " (no -m model: nothing to plan)");
  auto file = engine::GgufFile::open(c.options.model);
  if (!file.ok()) return make("memory", "free memory", Level::kWarn, have + "; cannot plan: " + file.status().to_string());
  // As `lattice plan` does: the hosts' memory_gb, else this machine's available memory; local
  // ranks without a topology share it.
  std::vector<engine::parallel::NodeSpec> nodes;
  int me = 0;
  if (c.topology) {
    for (const auto& h : c.topology->hosts)
      nodes.push_back({h.name, h.memory_gb ? static_cast<uint64_t>(*h.memory_gb * (1ull << 30)) : c.mem_available});
    me = c.self < 0 ? 0 : c.self;
  } else {
    for (int r = 0; r < c.world_size; ++r) nodes.push_back({"rank" + std::to_string(r), c.mem_available / c.world_size});
    me = c.rank;
  }
  auto plan = engine::parallel::plan_placement(**file, nodes, engine::parallel::ParallelMode::kAuto, 0);
  if (!plan.ok()) return make("memory", "free memory", Level::kWarn, have + "; cannot plan: " + plan.status().to_string());
  if (me >= static_cast<int>(plan->nodes.size())) return make("memory", "free memory", Level::kOk, have);
  const uint64_t need = plan->nodes[static_cast<size_t>(me)].total_bytes;
  const uint64_t share = c.topology ? c.mem_available : c.mem_available / c.world_size;
  const std::string seen = "the plan needs " + gib(need) + " here (" + plan->nodes[static_cast<size_t>(me)].part +
                           "), " + have + (c.topology ? "" : ", this rank's share " + gib(share));
  const std::string fix = "free memory (quit other programs) or add nodes; lattice plan -m " + c.options.model +
                          (c.options.topology.empty() ? " --nodes N" : " --hostfile " + c.options.topology) +
                          " shows the layout";
  if (!plan->fits || need > share) return make("memory", "free memory", Level::kFail, seen, fix);
  if (need > share / 10 * 9) return make("memory", "free memory", Level::kWarn, seen + " (over 90%)", fix);
  return make("memory", "free memory", Level::kOk, seen);
}

#ifdef __APPLE__
// macOS: `pmset -g therm` (CPU_Speed_Limit below 100 is throttling) and `pmset -g batt`
// ("'AC Power'" or "'Battery Power'"); ProcessInfo.thermalState is the Objective-C view of the
// same. Not run by this project's CI (Linux).
std::string run(const char* cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd, "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  return out;
}
Check thermal(const Context&) {
  const std::string out = run("pmset -g therm 2>&1");
  const std::string key = "CPU_Speed_Limit";
  const size_t at = out.find(key);
  const size_t eq = at == std::string::npos ? at : out.find('=', at);
  const long limit = eq == std::string::npos ? 100 : std::strtol(out.c_str() + eq + 1, nullptr, 10);
  if (limit < 100)
    return make("thermal", "thermal state", Level::kWarn, "throttled: CPU_Speed_Limit " + std::to_string(limit),
                "cool the machine (airflow, lid open); a throttled node slows the whole cluster");
  return make("thermal", "thermal state", Level::kOk, out.empty() ? "pmset -g therm: no output" : "no throttling");
}
Check power(const Context&) {
  const std::string out = run("pmset -g batt 2>&1");
  if (out.find("Battery Power") != std::string::npos)
    return make("power", "power source", Level::kWarn, "on battery: " + out, "plug in the power adapter");
  return make("power", "power source", Level::kOk, out.find("AC Power") != std::string::npos ? "AC power" : "no battery");
}
#else
// Linux: /sys/class/thermal zones (core/host_stats.h reads them) against their own trip
// points (critical: fail; hot or passive, i.e. throttling: warn).
Check thermal(const Context&) {
  std::string seen;
  Level level = Level::kOk;
  const std::vector<ThermalZone> all = thermal_zones();
  const size_t zones = all.size();
  for (const ThermalZone& z : all) {
    const long milli = z.milli_c;
    seen += (seen.empty() ? "" : ", ") + z.type + " " + std::to_string(milli / 1000) + " C";
    for (const ThermalZone::Trip& t : z.trips) {
      if (t.milli_c <= 0 || milli < t.milli_c) continue;
      if (t.type == "critical") level = Level::kFail;
      else if ((t.type == "hot" || t.type == "passive") && level == Level::kOk) level = Level::kWarn;
      seen += " (at its " + t.type + " trip point)";
    }
  }
  if (zones == 0) return make("thermal", "thermal state", Level::kOk, "no thermal zone exposed (/sys/class/thermal)");
  return make("thermal", "thermal state", level, seen,
              level == Level::kOk ? "" : "cool the machine (airflow, fans); a throttled node slows the whole cluster");
}

// /sys/class/power_supply: a battery discharging (no mains online) is a warning.
Check power(const Context&) {
  std::error_code ec;
  bool battery = false, discharging = false, mains_online = false;
  for (const auto& s : fs::directory_iterator("/sys/class/power_supply", ec)) {
    const std::string type = read_line(s.path() / "type");
    if (type == "Battery") {
      battery = true;
      discharging = discharging || read_line(s.path() / "status") == "Discharging";
    } else if (type == "Mains" || type == "USB") {
      mains_online = mains_online || read_line(s.path() / "online") == "1";
    }
  }
  if (!battery) return make("power", "power source", Level::kOk, mains_online ? "mains" : "no battery (desktop or server)");
  if (discharging && !mains_online)
    return make("power", "power source", Level::kWarn, "on battery (discharging)",
                "plug in the power adapter (on battery the CPU and GPU clock down)");
  return make("power", "power source", Level::kOk, "battery, on mains");
}
#endif

// Group or other may read (or write) the file: anyone on the machine could join the cluster.
Check secret(const Context& c) {
  if (c.secret_source == "env")
    return make("secret", "cluster secret", Level::kOk, "from the environment (LATTICE_SECRET): no file to check");
  if (c.secret_source.empty())
    return make("secret", "cluster secret", c.launched ? Level::kFail : Level::kOk,
                "none given (--secret-file, LATTICE_SECRET_FILE)", c.launched ? "lattice keygen -o ~/.lattice/secret" : "");
  struct stat st{};
  if (::stat(c.secret_path.c_str(), &st) != 0)
    return make("secret", "cluster secret", Level::kFail, c.secret_path + ": cannot stat",
                "lattice keygen -o " + c.secret_path + "   (and copy it to every node)");
  if (!S_ISREG(st.st_mode))
    return make("secret", "cluster secret", Level::kFail, c.secret_path + " is not a regular file",
                "lattice keygen -o " + c.secret_path + " --force");
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return make("secret", "cluster secret", Level::kFail,
                c.secret_path + " has mode " + mode + ": group or others can read it", "chmod 600 " + c.secret_path);
  return make("secret", "cluster secret", Level::kOk, c.secret_path + " mode " + mode);
}

}  // namespace

const std::vector<NodeCheckEntry>& host_checks() {
  static const std::vector<NodeCheckEntry> table = {
      {"memory", "free memory", memory},
      {"thermal", "thermal state", thermal},
      {"power", "power source", power},
      {"secret", "cluster secret", secret},
  };
  return table;
}

}  // namespace lattice::doctor::detail
