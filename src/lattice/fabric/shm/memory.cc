// Memory regions of the shm provider: allocation in memfds, registration of caller memory,
// the directory peers read them from, and the peer-side lookup with its checks.
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "lattice/core/random.h"
#include "lattice/fabric/shm/endpoint.h"

namespace lattice::fabric::shm {

namespace {

template <class T>
T load_relaxed(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_relaxed);
}
template <class T>
void store_relaxed(T& v, T x) {
  std::atomic_ref<T>(v).store(x, std::memory_order_relaxed);
}

DirEntry* dir_entries(std::byte* segment_base) { return reinterpret_cast<DirEntry*>(segment_base + kDirOffset); }

std::string hex_key(uint64_t key) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(key));
  return buf;
}

}  // namespace

ShmRegion::~ShmRegion() {
  provider_->unpublish_region(slot_);
  close_segment(segment_);
}

Result<uint32_t> ShmProvider::publish_region(uint64_t key, uint64_t size, uint64_t addr, const OwnedSegment* seg,
                                             uint32_t access, RegionKind kind) {
  std::lock_guard lock(dir_mu_);
  uint32_t slot = kDirEntries;
  for (uint32_t i = 0; i < kDirEntries; ++i) {
    if (!dir_used_[i]) {
      slot = i;
      break;
    }
  }
  if (slot == kDirEntries)
    return ResourceExhausted("shm: all " + std::to_string(kDirEntries) + " region slots of this provider are in use");
  dir_used_[slot] = true;
  DirEntry& e = dir_entries(segment_.map->base())[slot];
  uint64_t seq = load_relaxed(e.seq);
  store_relaxed(e.seq, seq + 1);  // odd: changing
  std::atomic_thread_fence(std::memory_order_release);
  store_relaxed(e.key, key);
  store_relaxed(e.size, size);
  store_relaxed(e.addr, addr);
  store_relaxed(e.ino, seg ? seg->ino : uint64_t{0});
  store_relaxed(e.fd, seg ? seg->fd : int32_t{-1});
  store_relaxed(e.access, access);
  store_relaxed(e.kind, static_cast<uint32_t>(kind));
  std::atomic_ref<uint64_t>(e.seq).store(seq + 2, std::memory_order_release);
  return slot;
}

void ShmProvider::unpublish_region(uint32_t slot) {
  std::lock_guard lock(dir_mu_);
  if (slot >= kDirEntries || !dir_used_[slot]) return;
  DirEntry& e = dir_entries(segment_.map->base())[slot];
  uint64_t seq = load_relaxed(e.seq);
  store_relaxed(e.seq, seq + 1);
  std::atomic_thread_fence(std::memory_order_release);
  store_relaxed(e.key, uint64_t{0});
  store_relaxed(e.kind, static_cast<uint32_t>(kKindFree));
  std::atomic_ref<uint64_t>(e.seq).store(seq + 2, std::memory_order_release);
  dir_used_[slot] = false;
}

Result<std::unique_ptr<MemoryRegion>> ShmProvider::allocate_memory(size_t n_bytes, uint32_t access) {
  if (n_bytes > kMaxRegionBytes) return InvalidArgument("shm: region of " + std::to_string(n_bytes) + " bytes is too large");
  LATTICE_ASSIGN_OR_RETURN(OwnedSegment seg, create_segment("lattice-shm-region", n_bytes));
  uint64_t key = 0;
  while (key == 0) key = secure_random_u64();
  auto slot = publish_region(key, n_bytes, 0, &seg, access, kKindShm);
  if (!slot.ok()) {
    close_segment(seg);
    return slot.status();
  }
  std::byte* data = seg.map->base();
  return std::unique_ptr<MemoryRegion>(new ShmRegion(this, data, n_bytes, key, access, *slot, std::move(seg), true));
}

Result<std::unique_ptr<MemoryRegion>> ShmProvider::register_memory(void* data, size_t n_bytes, uint32_t access) {
  if (data == nullptr && n_bytes > 0) return InvalidArgument("shm: register_memory of a null pointer");
  if (n_bytes > kMaxRegionBytes) return InvalidArgument("shm: region of " + std::to_string(n_bytes) + " bytes is too large");
  uint64_t key = 0;
  while (key == 0) key = secure_random_u64();
  LATTICE_ASSIGN_OR_RETURN(uint32_t slot, publish_region(key, n_bytes, reinterpret_cast<uint64_t>(data), nullptr,
                                                         access, kKindUser));
  return std::unique_ptr<MemoryRegion>(
      new ShmRegion(this, static_cast<std::byte*>(data), n_bytes, key, access, slot, OwnedSegment{}, false));
}

// ---- Peer side ----

Result<PeerRegion*> ShmEndpoint::peer_region_locked(uint64_t key, uint64_t offset, uint64_t length, uint32_t need,
                                                    const char* what) {
  const int rank = options_.peer_rank;
  const DirEntry* entries = reinterpret_cast<const DirEntry*>(peer_dir_->base() + (kDirOffset - kPage));
  PeerRegion* r = nullptr;
  if (auto it = peer_regions_.find(key); it != peer_regions_.end()) {
    // Still the same registration? One acquire load on the fast path.
    uint64_t seq = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(entries[it->second.slot].seq))
                       .load(std::memory_order_acquire);
    if (seq == it->second.seq) {
      r = &it->second;
    } else {
      peer_regions_.erase(it);
    }
  }
  if (r == nullptr) {
    // Scan the peer's directory under its seqlock; copy each entry before trusting it.
    for (uint32_t i = 0; i < kDirEntries && r == nullptr; ++i) {
      const DirEntry& e = entries[i];
      for (int attempt = 0; attempt < 1000; ++attempt) {
        uint64_t s1 = std::atomic_ref<uint64_t>(const_cast<uint64_t&>(e.seq)).load(std::memory_order_acquire);
        if (s1 & 1) continue;
        DirEntry c{};
        c.key = load_relaxed(e.key);
        c.size = load_relaxed(e.size);
        c.addr = load_relaxed(e.addr);
        c.ino = load_relaxed(e.ino);
        c.fd = load_relaxed(e.fd);
        c.access = load_relaxed(e.access);
        c.kind = load_relaxed(e.kind);
        std::atomic_thread_fence(std::memory_order_acquire);
        uint64_t s2 = load_relaxed(e.seq);
        if (s1 != s2) continue;
        if (c.key != key || c.kind == kKindFree) break;
        if (c.size > kMaxRegionBytes || (c.kind != kKindShm && c.kind != kKindUser))
          return Corrupt(std::string("shm: ") + what + ": the peer's directory entry for key " + hex_key(key) +
                             " is malformed",
                         rank);
        PeerRegion pr;
        pr.slot = i;
        pr.seq = s1;
        pr.size = c.size;
        pr.addr = c.addr;
        pr.access = c.access;
        pr.kind = c.kind;
        if (c.kind == kKindShm) {
          bool writable = (c.access & (kRemoteWrite | kRemoteAtomic)) != 0;
          auto m = map_peer_segment(peer_pid_, c.fd, c.ino, 0, round_up_page(c.size), writable, rank);
          if (!m.ok()) {
            // The region may have been deregistered while we looked: recheck before failing.
            if (load_relaxed(e.seq) != s1) break;
            return m.status().with_context(std::string(what) + ": mapping region " + hex_key(key));
          }
          pr.map = std::shared_ptr<Mapping>(std::move(*m));
        }
        r = &peer_regions_.emplace(key, std::move(pr)).first->second;
        break;
      }
    }
  }
  if (r == nullptr)
    return AccessDenied(std::string("shm: ") + what + ": the peer has no region with key " + hex_key(key), rank);
  if (offset > r->size || length > r->size - offset)
    return AccessDenied(std::string("shm: ") + what + ": bytes [" + std::to_string(offset) + ", " +
                            std::to_string(offset) + "+" + std::to_string(length) + ") are outside region " +
                            hex_key(key) + " of " + std::to_string(r->size) + " bytes",
                        rank);
  if ((r->access & need) != need)
    return AccessDenied(std::string("shm: ") + what + ": region " + hex_key(key) + " does not grant " +
                            ((need & kRemoteAtomic)  ? "remote atomic"
                             : (need & kRemoteWrite) ? "remote write"
                                                     : "remote read") +
                            " access",
                        rank);
  return r;
}

namespace {

// A peer's allocate_memory region, mapped: holds the mapping (and the peer's directory, to
// tell whether the registration still stands) alive on its own.
class ShmRemoteMapping final : public RemoteMapping {
 public:
  ShmRemoteMapping(std::shared_ptr<Mapping> region, std::shared_ptr<Mapping> dir, uint32_t slot, uint64_t seq,
                   uint64_t offset, uint64_t length, std::shared_ptr<LinkCounter> link)
      : region_(std::move(region)), dir_(std::move(dir)), slot_(slot), seq_(seq), offset_(offset), length_(length),
        link_(std::move(link)) {}
  std::byte* data() const override { return region_->base() + offset_; }
  size_t size() const override { return length_; }
  bool live() const override {
    const auto* entries = reinterpret_cast<const DirEntry*>(dir_->base() + (kDirOffset - kPage));
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(entries[slot_].seq)).load(std::memory_order_acquire) == seq_;
  }
  void count_loaded(size_t bytes) override { link_->add_received(bytes); }
  void count_stored(size_t bytes) override { link_->add_sent(bytes); }

 private:
  std::shared_ptr<Mapping> region_, dir_;
  uint32_t slot_;
  uint64_t seq_, offset_, length_;
  std::shared_ptr<LinkCounter> link_;  // the endpoint's (the mapping may outlive it)
};

}  // namespace

Result<std::unique_ptr<RemoteMapping>> ShmEndpoint::map_remote(RemoteSlice slice, uint32_t access) {
  if ((access & ~uint32_t(kRemoteRead | kRemoteWrite)) != 0 || access == 0)
    return InvalidArgument("shm: map_remote: access must be kRemoteRead and/or kRemoteWrite");
  std::lock_guard lock(mu_);
  LATTICE_RETURN_IF_ERROR(check_usable_locked());
  LATTICE_ASSIGN_OR_RETURN(PeerRegion * r, peer_region_locked(slice.key, slice.offset, slice.length, access, "map_remote"));
  if (r->kind != kKindShm)
    return Unavailable("shm: map_remote: region " + hex_key(slice.key) +
                       " is caller-registered memory of the peer (only allocate_memory regions map)");
  return std::unique_ptr<RemoteMapping>(
      new ShmRemoteMapping(r->map, peer_dir_, r->slot, r->seq, slice.offset, slice.length, link_));
}

Status ShmEndpoint::remote_copy_locked(PeerRegion* r, uint64_t offset, std::byte* local, size_t length,
                                       bool to_remote) {
  if (length == 0) return Status::Ok();
  if (r->kind == kKindShm) {
    std::byte* remote = r->map->base() + offset;
    if (to_remote) {
      std::memcpy(remote, local, length);
    } else {
      std::memcpy(local, remote, length);
    }
    return Status::Ok();
  }
  // Caller-registered memory of the peer: cross-memory attach, one copy by the kernel.
  if (!provider_->cma_allowed())
    return Unavailable(
        "shm: cross-memory attach is disabled (cma=0); remote access to the peer's caller-registered memory "
        "needs it: use allocate_memory regions");
  size_t done = 0;
  while (done < length) {
    iovec l{local + done, length - done};
    iovec rv{reinterpret_cast<void*>(r->addr + offset + done), length - done};
    ssize_t n = to_remote ? process_vm_writev(peer_pid_, &l, 1, &rv, 1, 0)
                          : process_vm_readv(peer_pid_, &l, 1, &rv, 1, 0);
    if (n < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == EPERM || e == ENOSYS)
        return Unavailable(
            "shm: cross-memory attach (process_vm_readv/writev) refused; use allocate_memory regions on "
            "this host or allow ptrace between the ranks");
      if (e == ESRCH) return PeerLost("shm: the peer process is gone", options_.peer_rank);
      if (e == EFAULT)
        return AccessDenied("shm: the peer's registered memory is no longer mapped at its registered address",
                            options_.peer_rank);
      return ErrnoError("shm: process_vm_readv/writev", e, options_.peer_rank);
    }
    if (n == 0) return AccessDenied("shm: cross-memory copy made no progress", options_.peer_rank);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace lattice::fabric::shm
