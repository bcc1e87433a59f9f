#include <cstdlib>
#include <cstring>

#include "lattice/core/log.h"
#include "lattice/fabric/providers.h"
#include "lattice/fabric/verbs/endpoint.h"

namespace lattice::fabric::verbs {

Device::~Device() {
  if (pd) api->dealloc_pd(pd);
  if (ctx) api->close_device(ctx);
}

namespace {

// Creating an RC QP is the probe: Apple's TB5 device refuses it (UC only).
bool rc_supported(const VerbsApi& api, ibv_context* ctx, ibv_pd* pd) {
  ibv_cq* cq = api.create_cq(ctx, 4, nullptr, nullptr, 0);
  if (cq == nullptr) return false;
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  ibv_qp* qp = api.create_qp(pd, &a);
  if (qp) api.destroy_qp(qp);
  api.destroy_cq(cq);
  return qp != nullptr;
}

}  // namespace

VerbsProvider::VerbsProvider(std::shared_ptr<Device> dev, std::string scheme)
    : dev_(std::move(dev)), scheme_(std::move(scheme)) {
  caps_.max_msg = size_t{1} << 30;  // fabric messages are chunked into slots
  caps_.max_inline = 0;
  caps_.frame_bytes = dev_->qp_type == IBV_QPT_UC ? kFrameBytes : 0;
  caps_.max_regions = 0;  // user regions are not device registrations on the staged path
  if (dev_->rma) {
    caps_.rma_write = caps_.rma_read = caps_.atomics = true;
    // A NIC places RC writes without the target's CPU; the emulator moves them only inside
    // the target's own post/poll calls.
    caps_.rma_write_passive = !dev_->emulated;
    caps_.needs_registration_for_send = false;
  }
}

namespace {
int verbs_access(uint32_t access) {
  int a = IBV_ACCESS_LOCAL_WRITE;
  if (access & kRemoteWrite) a |= IBV_ACCESS_REMOTE_WRITE;
  if (access & kRemoteRead) a |= IBV_ACCESS_REMOTE_READ;
  if (access & kRemoteAtomic) a |= IBV_ACCESS_REMOTE_ATOMIC;
  return a;
}
}  // namespace

Result<std::unique_ptr<MemoryRegion>> VerbsProvider::wrap_region(std::byte* data, size_t n_bytes, uint32_t access,
                                                                bool owned) {
  if (!dev_->rma || n_bytes == 0) return std::unique_ptr<MemoryRegion>(new HeapRegion(data, n_bytes, access, owned));
  ibv_mr* mr = dev_->api->reg_mr(dev_->pd, data, n_bytes, verbs_access(access));
  if (mr == nullptr) {
    if (owned) std::free(data);
    return ResourceExhausted("verbs: reg_mr of " + std::to_string(n_bytes) + " bytes on " + dev_->name +
                             " failed: " + std::strerror(errno));
  }
  return std::unique_ptr<MemoryRegion>(new HeapRegion(data, n_bytes, access, owned, dev_, mr));
}

Result<std::unique_ptr<VerbsProvider>> VerbsProvider::open(const VerbsApi* api, std::string_view device_name,
                                                           const emu::Faults* faults, const ProviderOptions& options,
                                                           std::string scheme,
                                                           std::optional<crypto::ClusterSecret> secret) {
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list) api->free_device_list(list);
    return Unavailable("verbs: " + api->library + " loaded but it lists no RDMA device (none installed, or RDMA "
                       "not enabled: rdma_ctl enable on macOS)");
  }
  ibv_device* chosen = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* nm = api->get_device_name(list[i]);
    names += (i ? ", " : "") + std::string(nm ? nm : "?");
    if (chosen == nullptr && (device_name.empty() || device_name == (nm ? nm : ""))) chosen = list[i];
  }
  if (chosen == nullptr) {
    api->free_device_list(list);
    return NotFound("verbs: no device '" + std::string(device_name) + "' (devices: " + names + ")");
  }
  auto dev = std::make_shared<Device>();
  dev->api = api;
  dev->name = api->get_device_name(chosen);
  dev->emulated = api->emulated;
  dev->busy_poll = options.busy_poll;
  dev->ctx = api->open_device(chosen);
  api->free_device_list(list);
  if (dev->ctx == nullptr) return Unavailable("verbs: cannot open device " + dev->name + ": " + std::strerror(errno));
  if (faults) emu::set_faults(dev->ctx, *faults);
  ibv_device_attr da{};
  if (int rc = api->query_device(dev->ctx, &da); rc != 0)
    return Unavailable("verbs: query_device(" + dev->name + ") failed: " + std::strerror(rc));
  dev->max_qp = da.max_qp;
  // The active port is not always 1 (Apple): probe them all.
  ibv_port_attr pa{};
  for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
    if (api->query_port(dev->ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
      dev->port = p;
      break;
    }
  }
  if (dev->port == 0) return Unavailable("verbs: device " + dev->name + " has no ACTIVE port (cable unplugged?)");
  dev->max_msg = pa.max_msg_sz;
  dev->gid_index = choose_gid(*api, dev->ctx, dev->port, pa.gid_tbl_len, &dev->gid);
  if (dev->gid_index < 0)
    return Unavailable("verbs: device " + dev->name + " port " + std::to_string(dev->port) + " has an empty GID table");
  dev->pd = api->alloc_pd(dev->ctx);
  if (dev->pd == nullptr) return Unavailable("verbs: alloc_pd on " + dev->name + " failed");
  if (dev->max_msg < kSlotBytes)
    return Unavailable("verbs: device " + dev->name + " max message " + std::to_string(dev->max_msg) +
                       " is below the " + std::to_string(kSlotBytes) + "-byte slot");
  dev->qp_type = rc_supported(*api, dev->ctx, dev->pd) ? IBV_QPT_RC : IBV_QPT_UC;
  if (options.secret) secret = crypto::ClusterSecret::from_bytes(*options.secret);
  dev->secret = std::move(secret);
  // Sealed: no one-sided operations, and no region registered for remote access.
  dev->rma = dev->qp_type == IBV_QPT_RC && dev->emulated && !dev->secret;
  LATTICE_LOG_DEBUG("verbs: {} port {} gid[{}] {} {} QPs{}", dev->name, dev->port, dev->gid_index,
                    gid_to_string(dev->gid), dev->qp_type == IBV_QPT_RC ? "RC" : "UC",
                    dev->secret ? ", sealed" : "");
  return std::unique_ptr<VerbsProvider>(new VerbsProvider(std::move(dev), std::move(scheme)));
}

Result<std::unique_ptr<MemoryRegion>> VerbsProvider::allocate_memory(size_t n_bytes, uint32_t access) {
  size_t n = n_bytes == 0 ? 1 : n_bytes;
  void* p = std::aligned_alloc(kFrameBytes, (n + kFrameBytes - 1) / kFrameBytes * kFrameBytes);
  if (p == nullptr) return ResourceExhausted("verbs: cannot allocate " + std::to_string(n_bytes) + " bytes");
  std::memset(p, 0, n);
  return wrap_region(static_cast<std::byte*>(p), n_bytes, access, true);
}

Result<std::unique_ptr<MemoryRegion>> VerbsProvider::register_memory(void* data, size_t n_bytes, uint32_t access) {
  if (data == nullptr && n_bytes != 0) return InvalidArgument("verbs: register_memory of a null pointer");
  return wrap_region(static_cast<std::byte*>(data), n_bytes, access, false);
}

Result<std::unique_ptr<CompletionQueue>> VerbsProvider::create_cq(size_t depth) {
  if (depth == 0) return InvalidArgument("verbs: completion queue depth 0");
  return std::unique_ptr<CompletionQueue>(new VerbsCompletionQueue(dev_->busy_poll));
}

Result<std::unique_ptr<Endpoint>> VerbsProvider::create_endpoint(CompletionQueue* send_cq, CompletionQueue* recv_cq,
                                                                 const EndpointOptions& options) {
  auto* s = dynamic_cast<VerbsCompletionQueue*>(send_cq);
  auto* r = dynamic_cast<VerbsCompletionQueue*>(recv_cq);
  if (s == nullptr || r == nullptr) return InvalidArgument("verbs: completion queues of another provider");
  return make_endpoint(dev_, s, r, options);
}

emu::Stats emulator_stats(const Provider* provider) {
  auto* p = dynamic_cast<const VerbsProvider*>(provider);
  if (p == nullptr || !p->device().emulated) return {};
  return emu::stats(p->device().ctx);
}

}  // namespace lattice::fabric::verbs

namespace lattice::fabric::detail {

namespace {
bool parse_flag(std::string_view query, std::string_view key) {
  size_t pos = query.find(key);
  return pos != std::string_view::npos && query.substr(pos + key.size()).starts_with("=1");
}

// "secure=1" (or true) in a verbs URI: seal with the secret from the environment, as tcp does.
Result<std::optional<crypto::ClusterSecret>> secret_for(bool secure, const ProviderOptions& options) {
  if (!secure || options.secret) return std::optional<crypto::ClusterSecret>{};
  auto secret = crypto::load_secret("");
  if (!secret.ok()) return secret.status().with_context("verbs URI asks for secure=1");
  return std::optional<crypto::ClusterSecret>(*secret);
}
bool is_secure_kv(std::string_view kv) { return kv == "secure=1" || kv == "secure=true"; }
bool is_plain_kv(std::string_view kv) { return kv == "secure=0" || kv == "secure=false"; }
}  // namespace

// "verbs" or "verbs://<device>[?secure=1]": the system's verbs library.
Result<std::unique_ptr<Provider>> make_verbs_provider(std::string_view params, const ProviderOptions& options) {
  LATTICE_ASSIGN_OR_RETURN(const verbs::VerbsApi* api, verbs::load_system_verbs());
  size_t q = params.find('?');
  std::string_view device = params.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view{} : params.substr(q + 1);
  bool secure = false;
  for (size_t start = 0; start < query.size();) {
    size_t amp = query.find('&', start);
    std::string_view kv = query.substr(start, amp == std::string_view::npos ? std::string_view::npos : amp - start);
    if (is_secure_kv(kv)) secure = true;
    else if (!is_plain_kv(kv) && !kv.empty())
      return InvalidArgument("verbs URI: unknown option '" + std::string(kv) + "' (known: secure=0|1)");
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  LATTICE_ASSIGN_OR_RETURN(auto secret, secret_for(secure, options));
  LATTICE_ASSIGN_OR_RETURN(auto p, verbs::VerbsProvider::open(api, device, nullptr, options, "verbs", std::move(secret)));
  return std::unique_ptr<Provider>(std::move(p));
}

// "verbs-emu://apple-tb5?drop=17&secure=1&..." or "verbs-emu://linux-rc": the emulated device.
Result<std::unique_ptr<Provider>> make_verbs_emu_provider(std::string_view params, const ProviderOptions& options) {
  size_t q = params.find('?');
  std::string_view profile = params.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view{} : params.substr(q + 1);
  if (profile.empty()) profile = "apple-tb5";
  std::string_view device = verbs::emu::device_for_profile(profile);
  if (device.empty())
    return InvalidArgument("verbs-emu: unknown profile '" + std::string(profile) + "' (known: apple-tb5, linux-rc)");
  // busy_poll=1 is a provider option, not a fault.
  ProviderOptions opts = options;
  std::string faults_query;
  bool secure = false;
  for (size_t start = 0; start <= query.size();) {
    size_t amp = query.find('&', start);
    std::string_view kv = query.substr(start, amp == std::string_view::npos ? std::string_view::npos : amp - start);
    if (kv.starts_with("busy_poll=")) {
      opts.busy_poll = parse_flag(kv, "busy_poll");
    } else if (is_secure_kv(kv) || is_plain_kv(kv)) {
      secure = is_secure_kv(kv);
    } else if (!kv.empty()) {
      if (!faults_query.empty()) faults_query += '&';
      faults_query += kv;
    }
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  LATTICE_ASSIGN_OR_RETURN(verbs::emu::Faults faults, verbs::emu::parse_faults(faults_query));
  LATTICE_ASSIGN_OR_RETURN(auto secret, secret_for(secure, options));
  LATTICE_ASSIGN_OR_RETURN(auto p, verbs::VerbsProvider::open(&verbs::emu::api(), device, &faults, opts, "verbs-emu",
                                                              std::move(secret)));
  return std::unique_ptr<Provider>(std::move(p));
}

}  // namespace lattice::fabric::detail
