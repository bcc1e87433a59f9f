// Segments and address blobs of the shm provider: creating memfds, opening a peer's memfd
// through /proc/<pid>/fd, and the blob that names an endpoint's segments.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "lattice/fabric/shm/address.h"

namespace lattice::fabric::shm {

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

size_t round_up_page(size_t n) { return n == 0 ? kPage : (n + kPage - 1) / kPage * kPage; }

uint64_t host_id() {
  static const uint64_t id = [] {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(f, s);
    // FNV-1a: stable across processes (std::hash need not be).
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }();
  return id;
}

Result<OwnedSegment> create_segment(const char* name, size_t bytes) {
  bytes = round_up_page(bytes);
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    if (errno == ENOSYS) return Unavailable("shm: memfd_create is not supported by this kernel");
    // Each region and endpoint holds one fd (peers open it through /proc): say what to raise.
    if (errno == EMFILE || errno == ENFILE)
      return ResourceExhausted("shm: out of file descriptors for a segment (each region and endpoint holds one; "
                               "raise `ulimit -n`)");
    return ErrnoError("shm: memfd_create", errno);
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError("shm: ftruncate of a " + std::to_string(bytes) + "-byte segment", e);
  }
  // Sealed at its size: a peer that maps it can trust that it never shrinks under its
  // mapping (which would turn an access into SIGBUS).
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError("shm: sealing a segment", e);
  }
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError("shm: fstat", e);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    if (e == ENOMEM) return ResourceExhausted("shm: cannot map " + std::to_string(bytes) + " bytes");
    return ErrnoError("shm: mmap", e);
  }
  OwnedSegment s;
  s.fd = fd;
  s.ino = static_cast<uint64_t>(st.st_ino);
  s.map = std::make_unique<Mapping>(static_cast<std::byte*>(p), bytes);
  return s;
}

void close_segment(OwnedSegment& s) {
  s.map.reset();
  if (s.fd >= 0) close(s.fd);
  s.fd = -1;
}

Result<std::unique_ptr<Mapping>> map_peer_segment(int pid, int fd, uint64_t ino, size_t offset, size_t bytes,
                                                   bool writable, int peer_rank) {
  if (pid <= 0 || fd < 0) return Corrupt("shm: bad segment reference from peer", peer_rank);
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  int lfd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (lfd < 0) {
    int e = errno;
    if (e == ENOENT || e == ESRCH) return PeerLost(std::string("shm: peer segment ") + path + " is gone", peer_rank);
    if (e == EACCES || e == EPERM)
      return Unavailable(std::string("shm: not allowed to open the peer's segment ") + path +
                         " (different user, or ptrace restrictions)");
    return ErrnoError(std::string("shm: open ") + path, e, peer_rank);
  }
  // Only a memfd sealed against shrinking is mapped: otherwise a peer could truncate it and
  // make our next access fault.
  struct stat st{};
  int seals = fcntl(lfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(lfd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != ino ||
      static_cast<uint64_t>(st.st_size) < offset + bytes) {
    close(lfd);
    return Corrupt(std::string("shm: peer segment ") + path + " does not match its description", peer_rank);
  }
  void* p = mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, lfd,
                 static_cast<off_t>(offset));
  int e = errno;
  close(lfd);  // the mapping keeps the memory alive
  if (p == MAP_FAILED) return ErrnoError("shm: mmap of a peer segment", e, peer_rank);
  return std::make_unique<Mapping>(static_cast<std::byte*>(p), bytes);
}

std::vector<std::byte> encode_blob(const AddressBlob& blob) {
  std::vector<std::byte> out(sizeof blob);
  std::memcpy(out.data(), &blob, sizeof blob);
  return out;
}

Result<AddressBlob> decode_blob(std::span<const std::byte> bytes, int peer_rank) {
  AddressBlob b{};
  if (bytes.size() != sizeof b)
    return Corrupt("shm: peer address is " + std::to_string(bytes.size()) + " bytes, expected " +
                       std::to_string(sizeof b) + " (not an shm address?)",
                   peer_rank);
  std::memcpy(&b, bytes.data(), sizeof b);
  if (b.magic != kBlobMagic) return Corrupt("shm: peer address has a bad magic (not an shm address)", peer_rank);
  if (b.version != kVersion)
    return Corrupt("shm: peer speaks protocol version " + std::to_string(b.version) + ", this side " +
                       std::to_string(kVersion),
                   peer_rank);
  if (b.host_id != host_id()) return Unavailable("shm: the peer runs on another host (boot ids differ)");
  if (b.pid <= 0 || b.provider_fd < 0 || b.endpoint_fd < 0)
    return Corrupt("shm: peer address holds an invalid pid or fd", peer_rank);
  return b;
}

}  // namespace lattice::fabric::shm
