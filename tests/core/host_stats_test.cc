// The host readers against fake /proc and /sys trees written here (each test its own), and
// once against this machine's own (whatever it exposes, the readings are sane).
#include "lattice/core/host_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace lattice {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

class FakeRoot {
 public:
  FakeRoot() : dir_(fs::temp_directory_path() / ("lattice-host-" + std::to_string(::getpid()) + "-" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~FakeRoot() { fs::remove_all(dir_); }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((dir_ / rel).parent_path());
    std::ofstream(dir_ / rel) << text;
  }
  std::string root() const { return dir_.string(); }

 private:
  fs::path dir_;
};

TEST(HostStats, EmptyTreeIsUnknownNotZero) {
  FakeRoot r;
  HostSampler s(r.root());
  HostStats h = s.sample();
  h = s.sample(std::chrono::steady_clock::now() + seconds(1));
  EXPECT_FALSE(h.mem_total);
  EXPECT_FALSE(h.mem_available);
  EXPECT_FALSE(h.load1);
  EXPECT_FALSE(h.cpu_busy);
  EXPECT_FALSE(h.temp_c);
  EXPECT_FALSE(h.power_w);
  EXPECT_GE(h.cpus, 1u);
  EXPECT_TRUE(thermal_zones(r.root()).empty());
}

TEST(HostStats, MemoryLoadAndCpuBusyFromProc) {
  FakeRoot r;
  r.write("proc/meminfo", "MemTotal:       16384 kB\nMemFree:         1024 kB\nMemAvailable:    8192 kB\n");
  r.write("proc/loadavg", "1.50 0.80 0.40 2/300 12345\n");
  r.write("proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\n");
  HostSampler s(r.root());
  const auto t0 = std::chrono::steady_clock::now();
  HostStats h = s.sample(t0);
  EXPECT_EQ(h.mem_total, 16384u * 1024);
  EXPECT_EQ(h.mem_available, 8192u * 1024);
  EXPECT_DOUBLE_EQ(h.load1.value_or(-1), 1.5);
  EXPECT_FALSE(h.cpu_busy) << "a rate needs two samples";
  // 300 more jiffies, 150 of them busy (user + system), 150 idle + iowait.
  r.write("proc/stat", "cpu  200 0 150 800 150 0 0 0 0 0\n");
  h = s.sample(t0 + seconds(1));
  ASSERT_TRUE(h.cpu_busy);
  EXPECT_DOUBLE_EQ(*h.cpu_busy, 0.5);
}

TEST(HostStats, HottestOfThermalZonesAndHwmon) {
  FakeRoot r;
  r.write("sys/class/thermal/thermal_zone0/type", "acpitz\n");
  r.write("sys/class/thermal/thermal_zone0/temp", "41000\n");
  r.write("sys/class/thermal/thermal_zone0/trip_point_0_type", "critical\n");
  r.write("sys/class/thermal/thermal_zone0/trip_point_0_temp", "105000\n");
  r.write("sys/class/thermal/thermal_zone0/trip_point_1_type", "passive\n");
  r.write("sys/class/thermal/thermal_zone0/trip_point_1_temp", "95000\n");
  r.write("sys/class/thermal/thermal_zone1/type", "x86_pkg_temp\n");
  r.write("sys/class/thermal/thermal_zone1/temp", "57500\n");
  r.write("sys/class/thermal/thermal_zone2/type", "broken\n");
  r.write("sys/class/thermal/thermal_zone2/temp", "-273000\n");  // read, not believed
  r.write("sys/class/thermal/cooling_device0/type", "Processor\n");  // not a zone
  r.write("sys/class/hwmon/hwmon0/name", "nvme\n");
  r.write("sys/class/hwmon/hwmon0/temp1_input", "38850\n");
  r.write("sys/class/hwmon/hwmon0/temp1_label", "Composite\n");

  const auto zones = thermal_zones(r.root());
  ASSERT_EQ(zones.size(), 3u);
  EXPECT_EQ(zones[0].type, "acpitz");
  EXPECT_EQ(zones[0].milli_c, 41000);
  ASSERT_EQ(zones[0].trips.size(), 2u);
  EXPECT_EQ(zones[0].trips[0].type, "critical");
  EXPECT_EQ(zones[0].trips[0].milli_c, 105000);
  EXPECT_EQ(zones[0].trips[1].type, "passive");

  HostSampler s(r.root());
  HostStats h = s.sample();
  ASSERT_TRUE(h.temp_c);
  EXPECT_DOUBLE_EQ(*h.temp_c, 57.5);
  EXPECT_EQ(h.temp_sensor, "x86_pkg_temp");
  // An hwmon chip hotter than every zone wins, named chip/label.
  r.write("sys/class/hwmon/hwmon1/name", "k10temp\n");
  r.write("sys/class/hwmon/hwmon1/temp3_input", "71250\n");
  r.write("sys/class/hwmon/hwmon1/temp3_label", "Tctl\n");
  h = s.sample();
  EXPECT_DOUBLE_EQ(h.temp_c.value_or(0), 71.25);
  EXPECT_EQ(h.temp_sensor, "k10temp/Tctl");
}

TEST(HostStats, RaplWattsBetweenSamplesOverPackagesOnly) {
  FakeRoot r;
  r.write("sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
  r.write("sys/class/powercap/intel-rapl:0/max_energy_range_uj", "262143328850\n");
  r.write("sys/class/powercap/intel-rapl:0:0/energy_uj", "500000\n");  // a part of package 0
  r.write("sys/class/powercap/intel-rapl:1/energy_uj", "2000000\n");
  r.write("sys/class/powercap/intel-rapl:1/max_energy_range_uj", "262143328850\n");
  r.write("sys/class/hwmon/hwmon0/name", "other\n");
  r.write("sys/class/hwmon/hwmon0/power1_input", "9000000\n");  // not used while RAPL reads
  HostSampler s(r.root());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.sample(t0).power_w) << "watts need two samples";
  // Two seconds: package 0 used 30 J, package 1 10 J (its sub-zone's 99 J is inside them).
  r.write("sys/class/powercap/intel-rapl:0/energy_uj", "31000000\n");
  r.write("sys/class/powercap/intel-rapl:0:0/energy_uj", "99500000\n");
  r.write("sys/class/powercap/intel-rapl:1/energy_uj", "12000000\n");
  HostStats h = s.sample(t0 + seconds(2));
  ASSERT_TRUE(h.power_w);
  EXPECT_DOUBLE_EQ(*h.power_w, 20.0);
  EXPECT_EQ(h.power_source, "rapl");
  // Package 1's counter wraps: 262143328850 - 12000000 + 2000000 uJ, package 0 nothing, in 1 s.
  r.write("sys/class/powercap/intel-rapl:1/energy_uj", "2000000\n");
  h = s.sample(t0 + seconds(3));
  ASSERT_TRUE(h.power_w);
  EXPECT_NEAR(*h.power_w, (262143328850.0 - 10000000.0) / 1e6, 1e-6);
}

TEST(HostStats, HwmonPowerWhenNoRapl) {
  FakeRoot r;
  r.write("sys/class/hwmon/hwmon0/name", "coretemp\n");  // no power file
  r.write("sys/class/hwmon/hwmon1/name", "amdgpu\n");
  r.write("sys/class/hwmon/hwmon1/power1_average", "12500000\n");
  HostSampler s(r.root());
  HostStats h = s.sample();
  EXPECT_DOUBLE_EQ(h.power_w.value_or(0), 12.5);
  EXPECT_EQ(h.power_source, "hwmon:amdgpu");
}

TEST(HostStats, RaplUnreadableIsUnknown) {
  FakeRoot r;
  // The zone exists but energy_uj is not readable (as for a non-root user): a directory in
  // its place reads as nothing.
  r.write("sys/class/powercap/intel-rapl:0/name", "package-0\n");
  fs::create_directories(fs::path(r.root()) / "sys/class/powercap/intel-rapl:0/energy_uj");
  HostSampler s(r.root());
  (void)s.sample();
  EXPECT_FALSE(s.sample(std::chrono::steady_clock::now() + seconds(1)).power_w);
}

TEST(HostStats, ThisMachineReadsSanely) {
  HostSampler s;
  (void)s.sample();
  const HostStats h = s.sample(std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
#ifdef __linux__
  ASSERT_TRUE(h.mem_total && h.mem_available);
  EXPECT_LE(*h.mem_available, *h.mem_total);
  EXPECT_TRUE(h.load1);
#endif
  if (h.temp_c) {
    EXPECT_TRUE(*h.temp_c > -40 && *h.temp_c < 150);
  }
  if (h.power_w) {
    EXPECT_GE(*h.power_w, 0);
  }
  if (h.cpu_busy) {
    EXPECT_TRUE(*h.cpu_busy >= 0 && *h.cpu_busy <= 1);
  }
}

}  // namespace
}  // namespace lattice
