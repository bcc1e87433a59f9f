// The shm provider's shared-memory layouts and limits: what each side maps of the other's
// segments. Host byte order (both sides are on one host); sizes pinned by static_assert.
// Everything read from a peer's segment is bounds-checked before use (see provider.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace lattice::fabric::shm {

constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
constexpr size_t kCacheLine = 64;
constexpr uint32_t kSlotBytes = 4096;
constexpr uint32_t kSlots = 128;  // power of two
constexpr size_t kSlotHeaderBytes = 32;
constexpr size_t kSlotPayload = kSlotBytes - kSlotHeaderBytes;
constexpr size_t kEagerMax = 32 * 1024;  // larger sends use rendezvous (single copy), except from
                                         // caller memory when the receiver cannot attach to us
constexpr uint32_t kMaxRndv = 64;        // rendezvous sends in flight per endpoint
constexpr uint32_t kDirEntries = 1024;   // regions per provider
constexpr size_t kMaxMsg = size_t{1} << 30;
constexpr size_t kMaxQueued = 8192;      // posted-but-unfinished ops per endpoint and direction
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 40;

// ---- Shared-memory layouts (host byte order: both sides are on one host) ----

enum SlotType : uint32_t { kSlotEager = 1, kSlotImm = 2, kSlotRndv = 3 };
enum SlotFlags : uint32_t { kFirstFragment = 1 };

struct SlotHeader {
  uint64_t seq;        // ring position + 1; stored last (release): the slot is ready
  uint32_t type;       // SlotType
  uint32_t frag_bytes; // payload bytes in this slot (eager)
  uint64_t msg_bytes;  // whole message (eager, rndv) or write length (imm)
  uint32_t imm;
  uint32_t flags;
};
static_assert(sizeof(SlotHeader) == kSlotHeaderBytes);

// Payload of a kSlotRndv slot: where the receiver reads the message from.
struct RndvPayload {
  uint64_t src_key;     // the sender's region, in the sender's directory
  uint64_t src_offset;
  uint64_t index;       // 0,1,2...: which ack entry the receiver fills
};

struct RndvAck {
  uint64_t bytes;  // bytes the receiver copied
  uint64_t code;   // 0 ok, 1 truncated
};

constexpr uint64_t kEndpointMagic = 0x31444e454d485354ull;  // "TSHMEND1"
struct EndpointHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_bytes;
  uint32_t n_slots;
  uint32_t max_rndv;
  int32_t pid;
  uint32_t pad0;
  uint64_t nonce;                         // random id of this endpoint
  alignas(kCacheLine) uint64_t rx_consumed;  // slots of the peer's ring this side consumed
  alignas(kCacheLine) uint64_t rndv_acked;   // rendezvous messages of the peer finished
  RndvAck acks[kMaxRndv];
  alignas(kCacheLine) uint32_t state;        // EndpointState
  uint32_t reason;                            // ErrorCode of the failure
  uint64_t peer_nonce;                        // the endpoint this one connected to
  uint32_t cma_ok;  // 1: this side can read the peer's memory with process_vm_readv (probed at connect)
};
static_assert(sizeof(EndpointHeader) <= kPage);
enum EndpointState : uint32_t { kStateOpen = 0, kStateClosed = 1, kStateFailed = 2 };
constexpr size_t kEndpointSegmentBytes = kPage + size_t{kSlots} * kSlotBytes;

constexpr uint64_t kProviderMagic = 0x31564f52504d4853ull;  // "SHMPROV1"
struct DoorbellPage {  // page 0, peer-writable
  alignas(kCacheLine) uint32_t doorbell;  // futex word; bumped by whoever wakes the owner
  alignas(kCacheLine) uint32_t sleepers;  // >0 while an owner thread sleeps on the doorbell
};
struct ProviderHeader {  // page 1, read-only for peers
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t nonce;
  uint32_t n_entries;
  uint32_t pad0;
  uint64_t probe_addr;  // address of `magic` in the owner's process: peers test cross-memory attach on it
  alignas(kCacheLine) uint64_t heartbeat;  // bumped by the watchdog every kHeartbeatTick
};
enum RegionKind : uint32_t { kKindFree = 0, kKindShm = 1, kKindUser = 2 };
struct DirEntry {   // a seqlock: seq is odd while the owner changes the entry
  uint64_t seq;
  uint64_t key;
  uint64_t size;
  uint64_t addr;    // kKindUser: address in the owner's process
  uint64_t ino;     // kKindShm: inode of the memfd, checked after opening it
  int32_t fd;       // kKindShm: fd in the owner's process
  uint32_t access;
  uint32_t kind;
  uint32_t pad[3];
};
static_assert(sizeof(DirEntry) == 64);
constexpr size_t kDirOffset = 2 * kPage;
constexpr size_t kProviderSegmentBytes = kDirOffset + size_t{kDirEntries} * sizeof(DirEntry);

// The address blob an endpoint hands to its peer (opaque to callers).
constexpr uint64_t kBlobMagic = 0x31424c424d485354ull;  // "TSHMBLB1"
struct AddressBlob {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t host_id;        // hash of the kernel boot id: both ends must share a host
  int32_t provider_fd;
  int32_t endpoint_fd;
  uint64_t provider_ino;
  uint64_t endpoint_ino;
  uint64_t provider_nonce;
  uint64_t endpoint_nonce;
};
static_assert(sizeof(AddressBlob) == 64);

constexpr auto kHeartbeatTick = std::chrono::milliseconds(20);
constexpr auto kMinPeerTimeout = std::chrono::milliseconds(100);

}  // namespace lattice::fabric::shm
