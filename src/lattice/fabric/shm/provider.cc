// The shm provider: its segment (doorbell, heartbeat, region directory), the factory, and the
// watchdog thread that beats the heartbeat and watches peers. The watchdog sleeps in poll(2)
// on the peers' pidfds, so a peer killed with SIGKILL is noticed at once; a stopped peer is
// noticed when its heartbeat has been silent for the endpoint's peer_timeout.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lattice/core/random.h"
#include "lattice/fabric/providers.h"
#include "lattice/fabric/shm/endpoint.h"

namespace lattice::fabric::shm {

Result<std::unique_ptr<ShmProvider>> ShmProvider::create(const ProviderOptions& options, bool cma) {
  if (access("/proc/self/fd", R_OK | X_OK) != 0)
    return Unavailable("shm: /proc is not mounted (peers open each other's segments through /proc/<pid>/fd)");
  std::unique_ptr<ShmProvider> p(new ShmProvider(options, cma));
  p->pid_ = getpid();
  while (p->nonce_ == 0) p->nonce_ = secure_random_u64();
  LATTICE_ASSIGN_OR_RETURN(p->segment_, create_segment("lattice-shm-provider", kProviderSegmentBytes));
  auto* h = reinterpret_cast<ProviderHeader*>(p->segment_.map->base() + kPage);
  h->magic = kProviderMagic;
  h->version = kVersion;
  h->pid = p->pid_;
  h->nonce = p->nonce_;
  h->n_entries = kDirEntries;
  h->probe_addr = reinterpret_cast<uint64_t>(&h->magic);
  p->dir_used_.assign(kDirEntries, false);
  p->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->wake_fd_ < 0) return ErrnoError("shm: eventfd", errno);
  p->caps_.max_msg = kMaxMsg;
  p->caps_.max_inline = kSlotPayload;
  p->caps_.rma_write = true;
  p->caps_.rma_write_passive = true;  // a write is a memcpy into the peer's mapping at post time
  p->caps_.rma_read = true;
  p->caps_.atomics = true;
  p->caps_.map_remote = true;  // allocate_memory regions (memfds) map into peers
  p->caps_.frame_bytes = 0;
  p->caps_.max_regions = kDirEntries;
  p->caps_.needs_registration_for_send = true;
  p->watchdog_ = std::thread([raw = p.get()] { raw->watchdog(); });
  return p;
}

ShmProvider::~ShmProvider() {
  stop_.store(true);
  poke_watchdog();
  if (watchdog_.joinable()) watchdog_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
  close_segment(segment_);
}

void ShmProvider::poke_watchdog() {
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
}

void ShmProvider::register_endpoint(ShmEndpoint* ep) {
  std::lock_guard lock(registry_mu_);
  endpoints_.push_back(ep);
}

void ShmProvider::unregister_endpoint(ShmEndpoint* ep) {
  std::lock_guard lock(registry_mu_);
  endpoints_.erase(std::remove(endpoints_.begin(), endpoints_.end(), ep), endpoints_.end());
}

void ShmProvider::watchdog() {
  auto* h = reinterpret_cast<ProviderHeader*>(segment_.map->base() + kPage);
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    std::atomic_ref<uint64_t>(h->heartbeat).fetch_add(1, std::memory_order_release);
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    {
      std::lock_guard lock(registry_mu_);
      for (ShmEndpoint* ep : endpoints_)
        if (int fd = ep->peer_pidfd(); fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(kHeartbeatTick.count()));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    if (stop_.load()) break;
    auto now = Clock::now();
    std::lock_guard lock(registry_mu_);
    for (ShmEndpoint* ep : endpoints_) ep->check_peer(now, false);
  }
}

Result<std::unique_ptr<CompletionQueue>> ShmProvider::create_cq(size_t depth) {
  if (depth == 0) return InvalidArgument("shm: create_cq with depth 0");
  return std::unique_ptr<CompletionQueue>(new ShmCq(this, depth));
}

Result<std::unique_ptr<Endpoint>> ShmProvider::create_endpoint(CompletionQueue* send_cq, CompletionQueue* recv_cq,
                                                               const EndpointOptions& options) {
  auto* s = dynamic_cast<ShmCq*>(send_cq);
  auto* r = dynamic_cast<ShmCq*>(recv_cq);
  if (s == nullptr || r == nullptr)
    return InvalidArgument("shm: create_endpoint needs completion queues created by an shm provider");
  auto ep = std::make_unique<ShmEndpoint>(this, s, r, options);
  LATTICE_RETURN_IF_ERROR(ep->init());
  return std::unique_ptr<Endpoint>(std::move(ep));
}

}  // namespace lattice::fabric::shm

namespace lattice::fabric::detail {

Result<std::unique_ptr<Provider>> make_shm_provider(std::string_view params, const ProviderOptions& options) {
  ProviderOptions opts = options;
  bool cma = true;
  // "shm" or "shm://?busy_poll=1&cma=0"
  std::string_view p = params;
  if (!p.empty() && p.front() == '?') p.remove_prefix(1);
  while (!p.empty()) {
    auto amp = p.find('&');
    std::string_view kv = p.substr(0, amp);
    if (kv == "busy_poll=1") {
      opts.busy_poll = true;
    } else if (kv == "busy_poll=0") {
      opts.busy_poll = false;
    } else if (kv == "cma=0" || kv == "cma=1") {
      cma = kv == "cma=1";
    } else if (!kv.empty()) {
      return InvalidArgument("shm: unknown option '" + std::string(kv) + "' (known: busy_poll=0|1, cma=0|1)");
    }
    if (amp == std::string_view::npos) break;
    p.remove_prefix(amp + 1);
  }
  LATTICE_ASSIGN_OR_RETURN(auto provider, shm::ShmProvider::create(opts, cma));
  return std::unique_ptr<Provider>(std::move(provider));
}

}  // namespace lattice::fabric::detail
