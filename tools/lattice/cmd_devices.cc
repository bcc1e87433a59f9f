// `lattice devices`: RDMA devices, their ports, states and GIDs, through the same function
// table the verbs provider uses; the first diagnostic on a newly cabled Mac. Emulated devices
// (verbs-emu) are listed too, marked "(emulated)".
#include <cstdio>
#include <cstring>
#include <string>

#include "command.h"
#include "lattice/fabric/verbs/api.h"
#include "lattice/fabric/verbs/emu/emu.h"

namespace lattice::cli {
namespace {

namespace v = lattice::fabric::verbs;

int mtu_bytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

// Prints every device of `api`; returns how many.
int list_devices(const v::VerbsApi& api, const char* mark) {
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) return 0;
  for (int i = 0; i < n; ++i) {
    const char* name = api.get_device_name(list[i]);
    ibv_context* ctx = api.open_device(list[i]);
    if (ctx == nullptr) {
      std::printf("%s%s: cannot open (%s)\n", name ? name : "?", mark, std::strerror(errno));
      continue;
    }
    ibv_device_attr da{};
    if (api.query_device(ctx, &da) != 0) {
      std::printf("%s%s: query_device failed\n", name ? name : "?", mark);
      api.close_device(ctx);
      continue;
    }
    std::printf("%s%s  fw %s  ports %u  max QPs %d  max MRs %d  max WRs %d  atomics %s\n", name, mark, da.fw_ver,
                da.phys_port_cnt, da.max_qp, da.max_mr, da.max_qp_wr, da.atomic_cap == IBV_ATOMIC_NONE ? "no" : "yes");
    for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (api.query_port(ctx, p, &pa) != 0) {
        std::printf("  port %u: query failed\n", p);
        continue;
      }
      std::printf("  port %u: %-6s mtu %d  max msg %u  link %s\n", p, v::port_state_name(pa.state),
                  mtu_bytes(pa.active_mtu), pa.max_msg_sz,
                  pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "ethernet" : "infiniband");
      for (int g = 0; g < pa.gid_tbl_len && g < 16; ++g) {
        ibv_gid gid{};
        if (api.query_gid(ctx, p, g, &gid) != 0) continue;
        if (v::gid_is_zero(gid)) {
          std::printf("    gid[%d] (empty%s)\n", g, g == 1 ? ": no IPv4 address on the paired interface?" : "");
          continue;
        }
        std::printf("    gid[%d] %s%s\n", g, v::gid_to_string(gid).c_str(),
                    v::gid_is_ipv4_mapped(gid) ? "  (IPv4-mapped)" : "");
      }
    }
    api.close_device(ctx);
  }
  api.free_device_list(list);
  return n;
}

Registrar devices_cmd{{"devices", "list RDMA devices, ports, states and GIDs (emulated ones marked)", [](CLI::App& app) {
                         auto emulated = std::make_shared<bool>(true);
                         app.add_flag("!--no-emulated", *emulated, "hide the emulated (verbs-emu) devices");
                         return [emulated] {
                           auto api = v::load_system_verbs();
                           if (!api.ok()) {
                             std::printf("no RDMA: %s\n", api.status().to_string().c_str());
                           } else if (list_devices(**api, "") == 0) {
                             std::printf("no RDMA devices: %s loaded but lists none (no NIC, or on macOS RDMA "
                                         "not enabled: rdma_ctl enable in Recovery)\n",
                                         (*api)->library.c_str());
                           }
                           if (*emulated) {
                             std::printf("\n");
                             list_devices(v::emu::api(), " (emulated)");
                             std::printf("(emulated devices: verbs-emu://apple-tb5 -> emu_tb5_0, "
                                         "verbs-emu://linux-rc -> emu_rc_0)\n");
                           }
                           return 0;
                         };
                       }}};

}  // namespace
}  // namespace lattice::cli
