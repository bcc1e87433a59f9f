// Node checks of RDMA: enabled at all, devices, port states, a protection domain and queue
// pair made and destroyed on each, GID index 1, MTU. The devices are
// fabric::list_devices()'s (what the verbs provider sees), the emulated ones too with --emulated.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "lattice/doctor/checks.h"
#include "lattice/fabric/verbs/emu/emu.h"

namespace lattice::doctor::detail {
namespace {

namespace fs = std::filesystem;

// The devices the checks look at: those the topology names for this host, else all listed.
std::vector<const fabric::DeviceInfo*> used_devices(const Context& c) {
  std::vector<const fabric::DeviceInfo*> out;
  for (const auto& d : c.devices.devices) {
    bool named = c.named_devices.empty();
    for (const auto& n : c.named_devices) named = named || n == d.name;
    if (named) out.push_back(&d);
  }
  return out;
}

bool emu_fault_set() {
  const char* v = std::getenv(fabric::verbs::emu::kMachineFaultEnv);
  return v != nullptr && *v != 0;
}

// A fix line for an emulated device when the emulator was told to fail (the real fix after).
std::string emu_hint(bool emulated) {
  return emulated && emu_fault_set() ? std::string("unset ") + fabric::verbs::emu::kMachineFaultEnv +
                                           "   (the emulator's injected fault); on real hardware: "
                                     : std::string();
}

#ifdef __APPLE__
// `rdma_ctl status` prints "enabled" or "disabled" (macOS 26.2+; rdma_ctl enable runs only
// from Recovery). Not run by this project's CI (Linux): written from Apple's documentation.
Check rdma_enabled(const Context& c) {
  std::string out;
  if (FILE* p = ::popen("rdma_ctl status 2>&1", "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  const std::string fix = "boot into Recovery (hold the power button), open Terminal, run: rdma_ctl enable; restart";
  if (out.find("enabled") != std::string::npos && out.find("disabled") == std::string::npos)
    return make("rdma", "RDMA enabled", Level::kOk, "rdma_ctl status: enabled");
  if (c.options.emulated)
    return make("rdma", "RDMA enabled", Level::kOk, "emulated verbs (verbs-emu) stand in; rdma_ctl status: " + out);
  return make("rdma", "RDMA enabled", c.rdma_expected ? Level::kFail : Level::kWarn,
              "rdma_ctl status: " + (out.empty() ? std::string("no output (macOS older than 26.2?)") : out), fix);
}
#else
// Linux: the verbs library (rdma-core's libibverbs) and the kernel side (ib_uverbs loaded,
// devices under /sys/class/infiniband).
Check rdma_enabled(const Context& c) {
  std::error_code ec;
  int kernel_devices = 0;
  for (const auto& e : fs::directory_iterator("/sys/class/infiniband", ec)) (void)e, ++kernel_devices;
  const bool uverbs = fs::exists("/sys/module/ib_uverbs", ec);
  const bool lib = c.devices.system.ok();
  std::string seen = std::string("libibverbs ") + (lib ? "loaded (" + c.devices.system_library + ")" : "missing") +
                     ", ib_uverbs " + (uverbs ? "loaded" : "not loaded") + ", " + std::to_string(kernel_devices) +
                     " device(s) in /sys/class/infiniband";
  if (c.options.emulated)
    return make("rdma", "RDMA enabled", Level::kOk, "emulated verbs (verbs-emu) stand in for the system's; " + seen);
  if (lib && uverbs && kernel_devices > 0) return make("rdma", "RDMA enabled", Level::kOk, seen);
  std::string fix = !lib ? "sudo apt-get install rdma-core ibverbs-providers libibverbs1"
                    : !uverbs ? "sudo modprobe ib_uverbs"
                              : "load the NIC's RDMA driver (e.g. sudo modprobe mlx5_ib), or soft RoCE: "
                                "sudo rdma link add rxe0 type rxe netdev <interface>";
  if (!c.rdma_expected) seen += "; no verbs link in the topology needs it (links use TCP)";
  return make("rdma", "RDMA enabled", c.rdma_expected ? Level::kFail : Level::kWarn, seen, fix);
}
#endif

Check verbs_devices(const Context& c) {
  std::string names;
  for (const auto& d : c.devices.devices) names += (names.empty() ? "" : ", ") + d.name + (d.emulated ? " (emulated)" : "");
  std::string missing, broken;
  for (const auto& n : c.named_devices) {
    bool found = false;
    for (const auto& d : c.devices.devices) found = found || d.name == n;
    if (!found) missing += (missing.empty() ? "" : ", ") + n;
  }
  for (const auto* d : used_devices(c))
    if (!d->error.empty()) broken += (broken.empty() ? "" : "; ") + d->name + ": " + d->error;
#ifdef __APPLE__
  const std::string real_fix = "enable RDMA (rdma_ctl enable, from Recovery) and check the Thunderbolt 5 cable; ibv_devices lists them";
#else
  const std::string real_fix =
      "sudo modprobe ib_uverbs && sudo modprobe <the NIC's RDMA driver, e.g. mlx5_ib>   (ibv_devices lists what verbs sees)";
#endif
  const std::string fix = emu_hint(c.options.emulated) + real_fix;
  if (c.devices.devices.empty())
    return make("verbs-devices", "verbs devices", c.rdma_expected ? Level::kFail : Level::kWarn, "no RDMA device", fix);
  if (!missing.empty())
    return make("verbs-devices", "verbs devices", Level::kFail,
                "the topology names " + missing + " on this host, not present (present: " + names + ")", fix);
  if (!broken.empty())
    return make("verbs-devices", "verbs devices", Level::kFail, broken,
                "sudo chmod 666 /dev/infiniband/uverbs* or add the user to the rdma group; " + real_fix);
  return make("verbs-devices", "verbs devices", Level::kOk, names);
}

Check verbs_ports(const Context& c) {
  auto used = used_devices(c);
  if (used.empty()) return make("verbs-ports", "verbs ports", c.rdma_expected ? Level::kWarn : Level::kOk, "no device to look at");
  std::string seen, down;
  bool emulated_down = false;
  for (const auto* d : used) {
    if (!d->error.empty()) continue;
    bool active = false;
    std::string ports;
    for (const auto& p : d->ports) {
      ports += (ports.empty() ? "" : ", ") + std::string("port ") + std::to_string(p.number) + " " +
               (p.error.empty() ? p.state : p.error);
      active = active || p.active;
    }
    seen += (seen.empty() ? "" : "; ") + d->name + ": " + ports;
    if (!active) {
      down += (down.empty() ? "" : ", ") + d->name;
      emulated_down = emulated_down || d->emulated;
    }
  }
  if (down.empty()) return make("verbs-ports", "verbs ports", Level::kOk, seen);
  std::string real;
  for (const auto* d : used) {
    if (!d->error.empty() || down.find(d->name) == std::string::npos) continue;
#ifdef __APPLE__
    real += (real.empty() ? "" : "; ") + std::string("check the Thunderbolt 5 cable at both ends of ") + d->name +
            " (ibv_devinfo -d " + d->name + " shows the port)";
#else
    real += (real.empty() ? "" : "; ") + std::string("check the cable at ") + d->name +
            " and bring its interface up: sudo ip link set dev $(ls /sys/class/infiniband/" + d->name +
            "/device/net) up   (ibv_devinfo -d " + d->name + ")";
#endif
  }
  return make("verbs-ports", "verbs ports", Level::kFail, "no ACTIVE port on " + down + " (" + seen + ")",
              emu_hint(emulated_down) + real);
}

// What the verbs provider does first, tried for real (fabric/device_queues.h): a protection
// domain, a completion queue and a queue pair moved to INIT on each ACTIVE port. A null
// protection domain is named here instead of crashing whatever dereferences it later.
Check verbs_queues(const Context& c) {
  auto used = used_devices(c);
  const char* title = "protection domain and queue pair";
  if (used.empty()) return make("verbs-queues", title, c.rdma_expected ? Level::kWarn : Level::kOk, "no device to look at");
  std::string seen, failed, fix;
  bool emulated_failed = false;
  for (const auto* d : used) {
    if (!d->error.empty()) continue;  // verbs-devices reports it
    for (const auto& q : c.queues) {
      if (q.device != d->name || q.emulated != d->emulated) continue;
      if (q.error.empty()) {
        seen += (seen.empty() ? "" : "; ") + q.device + ": " + q.done;
        continue;
      }
      failed += (failed.empty() ? "" : "; ") + q.device + ": " + q.error;
      emulated_failed = emulated_failed || q.emulated;
#ifdef __APPLE__
      const std::string real = "RDMA must be enabled for this Mac: boot into Recovery, run rdma_ctl enable, restart; "
                               "then check ibv_devinfo -d " + q.device + " as the user that runs lattice";
#else
      const std::string real = "check the user may use " + q.device +
                               ": sudo chmod 666 /dev/infiniband/uverbs* (or add the user to the rdma group), and the "
                               "locked-memory limit: ulimit -l unlimited (/etc/security/limits.conf: * - memlock unlimited)";
#endif
      if (fix.empty()) fix = real;
    }
  }
  if (failed.empty()) return make("verbs-queues", title, Level::kOk, seen.empty() ? "no device could be opened" : seen);
  return make("verbs-queues", title, Level::kFail, failed, emu_hint(emulated_failed) + fix);
}

Check gid1(const Context& c) {
  auto used = used_devices(c);
  if (used.empty()) return make("gid1", "GID index 1 (IPv4)", c.rdma_expected ? Level::kWarn : Level::kOk, "no device to look at");
  std::string seen, empty;
  bool emulated_empty = false;
  for (const auto* d : used) {
    if (!d->error.empty()) continue;
    bool any_active = false;
    for (const auto& p : d->ports) any_active = any_active || p.active;
    for (const auto& p : d->ports) {
      if (any_active && !p.active) continue;  // the port a QP would use
      bool ok = false;
      std::string addr;
      for (const auto& g : p.gids)
        if (g.index == 1 && !g.empty && g.ipv4_mapped) ok = true, addr = g.address;
      const std::string where = d->name + " port " + std::to_string(p.number);
      seen += (seen.empty() ? "" : "; ") + where + ": " + (ok ? addr : "gid[1] empty");
      if (!ok) {
        empty += (empty.empty() ? "" : ", ") + where;
        emulated_empty = emulated_empty || d->emulated;
      }
    }
  }
  if (empty.empty()) return make("gid1", "GID index 1 (IPv4)", Level::kOk, seen);
#ifdef __APPLE__
  const std::string real = "give the paired Thunderbolt interface an IPv4 address: sudo ifconfig <en interface> inet 10.0.0.1/30";
#else
  const std::string real = "give the paired interface an IPv4 address: sudo ip addr add 10.0.0.1/30 dev <interface>";
#endif
  return make("gid1", "GID index 1 (IPv4)", Level::kFail, "no IPv4 GID at index 1 on " + empty + " (" + seen + ")",
              emu_hint(emulated_empty) + real);
}

Check mtu(const Context& c) {
  std::string seen;
  for (const auto* d : used_devices(c))
    for (const auto& p : d->ports)
      if (p.active) seen += (seen.empty() ? "" : ", ") + d->name + " port " + std::to_string(p.number) + " " +
                            std::to_string(p.mtu_bytes);
  std::vector<std::string> listed;
  for (const auto& e : c.ends) {
    if (e.ifname.empty() || std::find(listed.begin(), listed.end(), e.ifname) != listed.end()) continue;
    listed.push_back(e.ifname);
    seen += (seen.empty() ? "" : ", ") + e.ifname + " " + std::to_string(e.mtu);
  }
  // An interface MTU below IPv6's minimum cannot carry our frames well (and breaks IPv6).
  for (const auto& e : c.ends)
    if (!e.ifname.empty() && e.mtu > 0 && e.mtu < 1280)
      return make("mtu", "MTU", Level::kWarn, e.ifname + " has MTU " + std::to_string(e.mtu) + " (" + seen + ")",
                  fix_mtu(e.ifname, 1500));
  return make("mtu", "MTU", Level::kOk, seen.empty() ? "no cable interface or active port" : seen);
}

}  // namespace

const std::vector<NodeCheckEntry>& rdma_checks() {
  static const std::vector<NodeCheckEntry> table = {
      {"rdma", "RDMA enabled", rdma_enabled},
      {"verbs-devices", "verbs devices", verbs_devices},
      {"verbs-ports", "verbs ports", verbs_ports},
      {"verbs-queues", "protection domain and queue pair", verbs_queues},
      {"gid1", "GID index 1 (IPv4)", gid1},
      {"mtu", "MTU", mtu},
  };
  return table;
}

}  // namespace lattice::doctor::detail
