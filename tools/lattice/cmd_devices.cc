// `lattice devices`: RDMA devices, their ports, states and GIDs, as the fabric's verbs provider
// sees them (fabric::list_devices); the first diagnostic on a newly cabled Mac. Emulated devices
// (verbs-emu) are listed too, marked "(emulated)".
#include <cstdio>
#include <string>

#include "command.h"
#include "lattice/fabric/fabric.h"

namespace lattice::cli {
namespace {

void print_device(const fabric::DeviceInfo& d) {
  const char* mark = d.emulated ? " (emulated)" : "";
  if (!d.error.empty()) {
    std::printf("%s%s: %s\n", d.name.c_str(), mark, d.error.c_str());
    return;
  }
  std::printf("%s%s  fw %s  ports %zu  max QPs %d  max MRs %d  max WRs %d  atomics %s\n", d.name.c_str(), mark,
              d.firmware.c_str(), d.ports.size(), d.max_qp, d.max_mr, d.max_qp_wr, d.atomics ? "yes" : "no");
  for (const auto& p : d.ports) {
    if (!p.error.empty()) {
      std::printf("  port %u: %s\n", p.number, p.error.c_str());
      continue;
    }
    std::printf("  port %u: %-6s mtu %d  max msg %u  link %s\n", p.number, p.state.c_str(), p.mtu_bytes,
                p.max_msg_bytes, p.link_layer.c_str());
    for (const auto& g : p.gids) {
      if (g.empty) {
        std::printf("    gid[%d] (empty%s)\n", g.index, g.index == 1 ? ": no IPv4 address on the paired interface?" : "");
        continue;
      }
      std::printf("    gid[%d] %s%s\n", g.index, g.address.c_str(), g.ipv4_mapped ? "  (IPv4-mapped)" : "");
    }
  }
}

int show_devices(bool emulated) {
  fabric::DeviceList list = fabric::list_devices(emulated);
  size_t n_system = 0;
  for (const auto& d : list.devices)
    if (!d.emulated) {
      print_device(d);
      ++n_system;
    }
  if (!list.system.ok()) {
    std::printf("no RDMA: %s\n", list.system.to_string().c_str());
  } else if (n_system == 0) {
    std::printf("no RDMA devices: %s loaded but lists none (no NIC, or on macOS RDMA not enabled: rdma_ctl "
                "enable in Recovery)\n",
                list.system_library.c_str());
  }
  if (emulated) {
    std::printf("\n");
    for (const auto& d : list.devices)
      if (d.emulated) print_device(d);
    std::printf("(emulated devices: verbs-emu://apple-tb5 -> emu_tb5_0, verbs-emu://linux-rc -> emu_rc_0)\n");
  }
  return 0;
}

Registrar devices_cmd{{"devices", "list RDMA devices, ports, states and GIDs (emulated ones marked)", [](CLI::App& app) {
                         auto emulated = std::make_shared<bool>(true);
                         app.add_flag("!--no-emulated", *emulated, "hide the emulated (verbs-emu) devices");
                         return [emulated] { return show_devices(*emulated); };
                       }}};

}  // namespace
}  // namespace lattice::cli
