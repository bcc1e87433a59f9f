#include "lattice/core/host_stats.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#ifdef __APPLE__
#include <mach/mach.h>
#include <stdlib.h>
#include <sys/sysctl.h>
#endif

namespace lattice {
namespace {

namespace fs = std::filesystem;

std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

// A whole decimal number, the file's first line; nullopt when absent or not a number.
std::optional<long long> read_int(const fs::path& p) {
  const std::string s = read_line(p);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str()) return std::nullopt;
  return v;
}

// Directory entries whose name starts with `prefix`, sorted by name (a stable choice).
std::vector<fs::path> entries(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A temperature a sensor can honestly report (a disconnected one reads 0 or -273 C, a broken
// one thousands).
bool plausible_milli_c(long long m) { return m > -40000 && m < 150000 && m != 0; }

}  // namespace

std::vector<ThermalZone> thermal_zones(const std::string& root) {
  std::vector<ThermalZone> zones;
  for (const fs::path& z : entries(fs::path(root) / "sys/class/thermal", "thermal_zone")) {
    const auto t = read_int(z / "temp");
    if (!t) continue;
    ThermalZone zone;
    zone.name = z.filename().string();
    zone.type = read_line(z / "type");
    zone.milli_c = static_cast<long>(*t);
    for (int i = 0; i < 32; ++i) {
      const std::string type = read_line(z / ("trip_point_" + std::to_string(i) + "_type"));
      if (type.empty()) break;
      zone.trips.push_back({type, static_cast<long>(read_int(z / ("trip_point_" + std::to_string(i) + "_temp")).value_or(0))});
    }
    zones.push_back(std::move(zone));
  }
  return zones;
}

namespace {

#ifdef __APPLE__
void read_memory(const std::string&, HostStats* s) {
  uint64_t total = 0;
  size_t len = sizeof total;
  if (sysctlbyname("hw.memsize", &total, &len, nullptr, 0) == 0) s->mem_total = total;
  vm_statistics64_data_t vm{};
  mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
  vm_size_t page = 0;
  if (host_page_size(mach_host_self(), &page) == KERN_SUCCESS &&
      host_statistics64(mach_host_self(), HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&vm), &count) == KERN_SUCCESS)
    s->mem_available = (uint64_t{vm.free_count} + vm.inactive_count) * page;
}
void read_load(const std::string&, HostStats* s) {
  double l[1];
  if (getloadavg(l, 1) == 1) s->load1 = l[0];
}
std::optional<std::pair<uint64_t, uint64_t>> read_cpu_jiffies(const std::string&) { return std::nullopt; }
#else
void read_memory(const std::string& root, HostStats* s) {
  std::ifstream f(fs::path(root) / "proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (f >> key >> kib) {
    std::getline(f, unit);  // " kB"
    if (key == "MemTotal:") s->mem_total = kib * 1024;
    else if (key == "MemAvailable:") s->mem_available = kib * 1024;
  }
}
void read_load(const std::string& root, HostStats* s) {
  std::ifstream f(fs::path(root) / "proc/loadavg");
  double l1 = 0;
  if (f >> l1 && l1 >= 0) s->load1 = l1;
}
// The "cpu" line of /proc/stat: busy and total jiffies (idle and iowait are not busy).
std::optional<std::pair<uint64_t, uint64_t>> read_cpu_jiffies(const std::string& root) {
  std::istringstream line(read_line(fs::path(root) / "proc/stat"));
  std::string cpu;
  if (!(line >> cpu) || cpu != "cpu") return std::nullopt;
  uint64_t v = 0, total = 0, idle = 0;
  for (int i = 0; i < 8 && line >> v; ++i) {  // user nice system idle iowait irq softirq steal
    total += v;
    if (i == 3 || i == 4) idle += v;
  }
  if (total == 0) return std::nullopt;
  return std::make_pair(total - idle, total);
}
#endif

void read_temperature(const std::string& root, HostStats* s) {
  long long best = 0;
  bool any = false;
  auto consider = [&](long long m, std::string sensor) {
    if (!plausible_milli_c(m) || (any && m <= best)) return;
    best = m, any = true, s->temp_sensor = std::move(sensor);
  };
  for (const ThermalZone& z : thermal_zones(root)) consider(z.milli_c, z.type.empty() ? z.name : z.type);
  for (const fs::path& chip : entries(fs::path(root) / "sys/class/hwmon", "hwmon")) {
    const std::string name = read_line(chip / "name");
    for (int i = 1; i < 32; ++i) {
      const std::string base = "temp" + std::to_string(i);
      const auto t = read_int(chip / (base + "_input"));
      if (!t) continue;
      const std::string label = read_line(chip / (base + "_label"));
      consider(*t, (name.empty() ? chip.filename().string() : name) + (label.empty() ? "" : "/" + label));
    }
  }
  if (any) s->temp_c = static_cast<double>(best) / 1000.0;
}

std::optional<double> hwmon_power_w(const std::string& root, std::string* source) {
  for (const fs::path& chip : entries(fs::path(root) / "sys/class/hwmon", "hwmon"))
    for (int i = 1; i < 8; ++i)
      for (const char* kind : {"_input", "_average"}) {
        const auto uw = read_int(chip / ("power" + std::to_string(i) + kind));
        if (!uw || *uw < 0) continue;
        const std::string name = read_line(chip / "name");
        *source = "hwmon:" + (name.empty() ? chip.filename().string() : name);
        return static_cast<double>(*uw) / 1e6;
      }
  return std::nullopt;
}

}  // namespace

HostStats HostSampler::sample(std::chrono::steady_clock::time_point now) {
  HostStats s;
  s.cpus = std::max(1u, std::thread::hardware_concurrency());
  read_memory(root_, &s);
  read_load(root_, &s);
  read_temperature(root_, &s);
  const double dt = last_at_ ? std::chrono::duration<double>(now - *last_at_).count() : 0;

  const auto cpu = read_cpu_jiffies(root_);
  if (cpu && last_cpu_ && cpu->second > last_cpu_->second && cpu->first >= last_cpu_->first)
    s.cpu_busy = std::clamp(static_cast<double>(cpu->first - last_cpu_->first) / (cpu->second - last_cpu_->second), 0.0, 1.0);
  last_cpu_ = cpu;

  // RAPL packages: intel-rapl:N (intel-rapl:N:M are their parts; intel-rapl-mmio repeats them).
  std::vector<std::pair<std::string, uint64_t>> energy;
  for (const fs::path& z : entries(fs::path(root_) / "sys/class/powercap", "intel-rapl:")) {
    const std::string name = z.filename().string();
    if (std::count(name.begin(), name.end(), ':') != 1) continue;
    const auto uj = read_int(z / "energy_uj");
    if (uj && *uj >= 0) energy.emplace_back(name, static_cast<uint64_t>(*uj));
  }
  if (!energy.empty() && dt > 0 && energy.size() == last_energy_.size()) {
    double joules = 0;
    bool same = true;
    for (size_t i = 0; i < energy.size() && same; ++i) {
      same = energy[i].first == last_energy_[i].first;
      uint64_t d = energy[i].second - last_energy_[i].second;
      if (energy[i].second < last_energy_[i].second) {  // the counter wrapped
        const auto range = read_int(fs::path(root_) / "sys/class/powercap" / energy[i].first / "max_energy_range_uj");
        if (!range || *range <= 0) same = false;
        else d = static_cast<uint64_t>(*range) - last_energy_[i].second + energy[i].second;
      }
      joules += static_cast<double>(d) / 1e6;
    }
    if (same) s.power_w = joules / dt, s.power_source = "rapl";
  }
  last_energy_ = std::move(energy);
  if (!s.power_w && last_energy_.empty()) s.power_w = hwmon_power_w(root_, &s.power_source);
  last_at_ = now;
  return s;
}

}  // namespace lattice
