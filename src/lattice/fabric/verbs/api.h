// The verbs function table: every call the verbs provider makes into an RDMA library goes
// through a VerbsApi, so one binary runs with or without RDMA and the build links no RDMA
// library (only Debian's libibverbs-dev headers are needed).
//
// Two backends fill the table:
//   - load_system_verbs(): dlopen("libibverbs.so.1") (macOS: "librdma.dylib") and dlsym. The
//     data-path calls (post_send, post_recv, poll_cq) are inline in verbs.h and dispatch
//     through the context's ops; the table wraps them the same way.
//   - emu::api(): the emulated device of emu/emu.h, shared memory between processes.
//
// Thread safety: the table is immutable once built. The calls themselves have verbs'
// threading rules (the provider serialises everything on one QP under its endpoint lock).
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "lattice/core/status.h"

namespace lattice::fabric::verbs {

struct VerbsApi {
  std::string library;     // "libibverbs.so.1", "emulator"
  bool emulated = false;
  ibv_device** (*get_device_list)(int* n) = nullptr;
  void (*free_device_list)(ibv_device** list) = nullptr;
  const char* (*get_device_name)(ibv_device* dev) = nullptr;
  ibv_context* (*open_device)(ibv_device* dev) = nullptr;
  int (*close_device)(ibv_context* ctx) = nullptr;
  int (*query_device)(ibv_context* ctx, ibv_device_attr* attr) = nullptr;
  int (*query_port)(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) = nullptr;
  int (*query_gid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context* ctx) = nullptr;
  int (*dealloc_pd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  int (*dereg_mr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*create_cq)(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel,
                       int comp_vector) = nullptr;
  int (*destroy_cq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*destroy_qp)(ibv_qp* qp) = nullptr;
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) = nullptr;
  int (*post_recv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) = nullptr;
  int (*poll_cq)(ibv_cq* cq, int n, ibv_wc* wc) = nullptr;
  // Blocking for an idle progress thread (optional; null: the provider naps and polls).
  // wait_cq sleeps until the CQ may have work to poll, wake_cq is called, or timeout_ns
  // passed; it returns 0 and the caller polls. wake_cq ends a wait from another thread (or makes
  // the next one return at once). The emulator fills them (a futex doorbell in each QP's
  // segment). For the system library they would be a completion channel
  // (ibv_req_notify_cq, ibv_get_cq_event) polled with an eventfd for the local wake: not
  // built, since this machine has no RDMA device to prove it on; hardware providers still nap.
  int (*wait_cq)(ibv_cq* cq, int64_t timeout_ns) = nullptr;
  int (*wake_cq)(ibv_cq* cq) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status status) = nullptr;
};

// The system's verbs library, loaded once (never unloaded). kUnavailable, with the dlopen
// error, when the library is missing or lacks a symbol.
Result<const VerbsApi*> load_system_verbs();

// "ACTIVE", "DOWN", ...
const char* port_state_name(ibv_port_state s);
// "fe80::1", "::ffff:10.0.0.2" (RFC 5952-ish, via inet_ntop).
std::string gid_to_string(const ibv_gid& gid);
bool gid_is_ipv4_mapped(const ibv_gid& gid);
bool gid_is_zero(const ibv_gid& gid);

}  // namespace lattice::fabric::verbs
