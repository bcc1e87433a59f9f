// What the operating system tells an unprivileged process about its machine: memory, CPU load,
// temperatures and power draw. `lattice serve` shows them per rank on its dashboard and in
// /metrics; `lattice doctor` judges the thermal zones against their trip points.
//
// Linux (every reader takes the root of the file system it reads, "/" normally, a fake tree
// in the tests):
//   memory       /proc/meminfo MemTotal and MemAvailable
//   CPU load     /proc/loadavg (1-minute average) and /proc/stat (busy share of every CPU
//                between two samples)
//   temperature  /sys/class/thermal/thermal_zone*/temp and /sys/class/hwmon/hwmon*/temp*_input
//                (millidegrees C); the hottest is reported, with its zone type or chip/label
//   power        RAPL powercap: /sys/class/powercap/intel-rapl:N/energy_uj (the packages, not
//                their sub-zones, which they include), watts from the energy between two
//                samples, wrapping at max_energy_range_uj; else hwmon power*_input or
//                power*_average (microwatts) of the first chip that has one
// Most kernels make energy_uj readable by root only: power is then unknown, as is anything a
// machine does not expose (containers, virtual machines often have no zones).
// macOS: memory (hw.memsize, the free and inactive pages of host_statistics64) and
// getloadavg(); temperature and power need root or private frameworks there: unknown.
//
// Thread safety: the free functions are independent; a HostSampler belongs to one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lattice {

struct ThermalZone {
  std::string name;  // e.g. "thermal_zone0"
  std::string type;  // e.g. "x86_pkg_temp", "acpitz"
  long milli_c = 0;
  struct Trip {
    std::string type;  // "critical", "hot", "passive", "active"
    long milli_c = 0;
  };
  std::vector<Trip> trips;
};
// The zones under root/sys/class/thermal with a readable temperature, by name.
std::vector<ThermalZone> thermal_zones(const std::string& root = "/");

struct HostStats {
  std::optional<uint64_t> mem_total, mem_available;  // bytes
  std::optional<double> load1;                       // 1-minute load average
  std::optional<double> cpu_busy;                    // 0..1 over every CPU since the last sample
  unsigned cpus = 0;
  std::optional<double> temp_c;  // the hottest sensor
  std::string temp_sensor;       // its zone type, or hwmon chip[/label]
  std::optional<double> power_w;
  std::string power_source;  // "rapl" or "hwmon:<chip>"
};

class HostSampler {
 public:
  explicit HostSampler(std::string root = "/") : root_(std::move(root)) {}
  // Reads everything; the rates (CPU busy, RAPL watts) are over the time since the previous
  // call and unknown at the first.
  HostStats sample(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

 private:
  std::string root_;
  std::optional<std::chrono::steady_clock::time_point> last_at_;
  std::optional<std::pair<uint64_t, uint64_t>> last_cpu_;  // busy, total jiffies
  std::vector<std::pair<std::string, uint64_t>> last_energy_;  // RAPL package, energy_uj
};

}  // namespace lattice
