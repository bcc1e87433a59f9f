#include "lattice/fabric/verbs/api.h"

#include <arpa/inet.h>
#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace lattice::fabric::verbs {
namespace {

// The data-path calls are inline in verbs.h: they dispatch through the context's ops table,
// which the library filled in when it opened the device.
int system_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
int system_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return qp->context->ops.post_recv(qp, wr, bad);
}
int system_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) { return cq->context->ops.poll_cq(cq, n, wc); }

template <typename Fn>
bool bind(void* lib, const char* name, Fn& out, std::string& missing) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  out = reinterpret_cast<Fn>(sym);
  return true;
}

Result<const VerbsApi*> load_once() {
#ifdef __APPLE__
  const char* kLib = "librdma.dylib";
#else
  const char* kLib = "libibverbs.so.1";
#endif
  void* lib = dlopen(kLib, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return Unavailable(std::string("verbs: cannot load ") + kLib + " (" + (err ? err : "unknown error") +
                       "); install rdma-core/libibverbs (Linux) or enable RDMA with rdma_ctl (macOS 26.2+)");
  }
  static VerbsApi api;
  api.library = kLib;
  std::string missing;
  bind(lib, "ibv_get_device_list", api.get_device_list, missing);
  bind(lib, "ibv_free_device_list", api.free_device_list, missing);
  bind(lib, "ibv_get_device_name", api.get_device_name, missing);
  bind(lib, "ibv_open_device", api.open_device, missing);
  bind(lib, "ibv_close_device", api.close_device, missing);
  bind(lib, "ibv_query_device", api.query_device, missing);
  bind(lib, "ibv_query_port", api.query_port, missing);
  bind(lib, "ibv_query_gid", api.query_gid, missing);
  bind(lib, "ibv_alloc_pd", api.alloc_pd, missing);
  bind(lib, "ibv_dealloc_pd", api.dealloc_pd, missing);
  bind(lib, "ibv_reg_mr", api.reg_mr, missing);
  bind(lib, "ibv_dereg_mr", api.dereg_mr, missing);
  bind(lib, "ibv_create_cq", api.create_cq, missing);
  bind(lib, "ibv_destroy_cq", api.destroy_cq, missing);
  bind(lib, "ibv_create_qp", api.create_qp, missing);
  bind(lib, "ibv_modify_qp", api.modify_qp, missing);
  bind(lib, "ibv_destroy_qp", api.destroy_qp, missing);
  bind(lib, "ibv_wc_status_str", api.wc_status_str, missing);
  if (!missing.empty()) {
    dlclose(lib);
    return Unavailable(std::string("verbs: ") + kLib + " lacks " + missing);
  }
  api.post_send = system_post_send;
  api.post_recv = system_post_recv;
  api.poll_cq = system_poll_cq;
  return &api;
}

}  // namespace

Result<const VerbsApi*> load_system_verbs() {
  static std::once_flag once;
  static Result<const VerbsApi*> loaded = Unavailable("not loaded");
  std::call_once(once, [] { loaded = load_once(); });
  return loaded;
}

const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  }
  return "UNKNOWN";
}

std::string gid_to_string(const ibv_gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.raw, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

bool gid_is_ipv4_mapped(const ibv_gid& gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, 12) == 0;
}

bool gid_is_zero(const ibv_gid& gid) {
  for (uint8_t b : gid.raw)
    if (b != 0) return false;
  return true;
}

}  // namespace lattice::fabric::verbs
