// list_devices() (fabric.h): the machine's RDMA devices, read through the same function table
// the verbs provider opens them with, so what `lattice devices` shows is what the provider sees.
#include <cerrno>
#include <cstring>

#include "lattice/fabric/providers.h"
#include "lattice/fabric/verbs/api.h"
#include "lattice/fabric/verbs/emu/emu.h"

namespace lattice::fabric::verbs {
namespace {

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

DevicePort read_port(const VerbsApi& api, ibv_context* ctx, uint8_t number) {
  DevicePort port;
  port.number = number;
  ibv_port_attr pa{};
  if (api.query_port(ctx, number, &pa) != 0) {
    port.error = "query failed";
    return port;
  }
  port.state = port_state_name(pa.state);
  port.active = pa.state == IBV_PORT_ACTIVE;
  port.mtu_bytes = mtu_bytes(pa.active_mtu);
  port.max_msg_bytes = pa.max_msg_sz;
  port.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "ethernet" : "infiniband";
  for (int g = 0; g < pa.gid_tbl_len && g < kMaxListedGids; ++g) {
    ibv_gid gid{};
    if (api.query_gid(ctx, number, g, &gid) != 0) continue;
    DeviceGid out;
    out.index = g;
    out.empty = gid_is_zero(gid);
    if (!out.empty) {
      out.address = gid_to_string(gid);
      out.ipv4_mapped = gid_is_ipv4_mapped(gid);
    }
    port.gids.push_back(std::move(out));
  }
  return port;
}

void append_devices(const VerbsApi& api, std::vector<DeviceInfo>* out) {
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) return;
  for (int i = 0; i < n; ++i) {
    DeviceInfo dev;
    const char* name = api.get_device_name(list[i]);
    dev.name = name ? name : "?";
    dev.emulated = api.emulated;
    ibv_context* ctx = api.open_device(list[i]);
    if (ctx == nullptr) {
      dev.error = std::string("cannot open (") + std::strerror(errno) + ")";
      out->push_back(std::move(dev));
      continue;
    }
    ibv_device_attr da{};
    if (api.query_device(ctx, &da) != 0) {
      dev.error = "query_device failed";
    } else {
      dev.firmware = da.fw_ver;
      dev.max_qp = da.max_qp;
      dev.max_mr = da.max_mr;
      dev.max_qp_wr = da.max_qp_wr;
      dev.atomics = da.atomic_cap != IBV_ATOMIC_NONE;
      for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) dev.ports.push_back(read_port(api, ctx, p));
    }
    api.close_device(ctx);
    out->push_back(std::move(dev));
  }
  api.free_device_list(list);
}

}  // namespace
}  // namespace lattice::fabric::verbs

namespace lattice::fabric::detail {

DeviceList list_verbs_devices(bool include_emulated) {
  DeviceList list;
  auto api = verbs::load_system_verbs();
  if (api.ok()) {
    list.system_library = (*api)->library;
    verbs::append_devices(**api, &list.devices);
  } else {
    list.system = api.status();
  }
  if (include_emulated) verbs::append_devices(verbs::emu::api(), &list.devices);
  return list;
}

}  // namespace lattice::fabric::detail
