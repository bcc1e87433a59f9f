// list_devices() (fabric.h): the machine's RDMA devices, read through the same function table
// the verbs provider opens them with, so what `lattice devices` shows is what the provider sees.
#include <cerrno>
#include <cstring>

#include "lattice/fabric/device_queues.h"
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

std::string call_failed(const char* what) {
  return std::string(what) + " (" + (errno ? std::strerror(errno) : "no errno") + ")";
}

// The provider's first steps on an opened device, undone at once (device_queues.h).
void try_queues(const VerbsApi& api, ibv_context* ctx, const std::vector<uint8_t>& active_ports, DeviceQueues* dev) {
  errno = 0;
  ibv_pd* pd = api.alloc_pd(ctx);
  if (pd == nullptr) {
    dev->error = call_failed("ibv_alloc_pd returned no protection domain");
    return;
  }
  errno = 0;
  ibv_cq* cq = api.create_cq(ctx, 4, nullptr, nullptr, 0);
  if (cq == nullptr) {
    dev->error = call_failed("ibv_create_cq failed");
    api.dealloc_pd(pd);
    return;
  }
  std::string done = "pd, cq";
  for (uint8_t port : active_ports) {
    ibv_qp* qp = nullptr;
    const char* kind = "rc";
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC}) {
      ibv_qp_init_attr ia{};
      ia.send_cq = ia.recv_cq = cq;
      ia.qp_type = type;
      ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      errno = 0;
      qp = api.create_qp(pd, &ia);
      if (qp != nullptr) break;
      kind = "uc";
    }
    if (qp == nullptr) {
      dev->error = call_failed(("port " + std::to_string(port) + ": ibv_create_qp failed (RC and UC)").c_str());
      break;
    }
    ibv_qp_attr qa{};
    qa.qp_state = IBV_QPS_INIT;
    qa.port_num = port;
    qa.pkey_index = 0;
    const int rc = api.modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    api.destroy_qp(qp);
    if (rc != 0) {
      errno = rc;
      dev->error = call_failed(("port " + std::to_string(port) + ": ibv_modify_qp to INIT failed").c_str());
      break;
    }
    done += std::string(", ") + kind + " qp INIT on port " + std::to_string(port);
  }
  api.destroy_cq(cq);
  api.dealloc_pd(pd);
  if (dev->error.empty()) dev->done = done;
}

void append_queues(const VerbsApi& api, std::vector<DeviceQueues>* out) {
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) return;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = api.open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr da{};
    if (api.query_device(ctx, &da) == 0) {
      DeviceQueues dev;
      const char* name = api.get_device_name(list[i]);
      dev.device = name ? name : "?";
      dev.emulated = api.emulated;
      std::vector<uint8_t> active;
      for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (api.query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) active.push_back(p);
      }
      try_queues(api, ctx, active, &dev);
      out->push_back(std::move(dev));
    }
    api.close_device(ctx);
  }
  api.free_device_list(list);
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

namespace lattice::fabric {

std::vector<DeviceQueues> try_device_queues(bool include_emulated) {
  std::vector<DeviceQueues> out;
  if (auto api = verbs::load_system_verbs(); api.ok()) verbs::append_queues(**api, &out);
  if (include_emulated) verbs::append_queues(verbs::emu::api(), &out);
  return out;
}

}  // namespace lattice::fabric
