// Wire formats of the verbs provider: the address blob exchanged out of band, and the header
// of every staged message (Apple/UC path). Little-endian hosts only (both ends are
// x86-64 or Apple silicon); sizes pinned by static_assert.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattice::fabric::verbs {

// The address blob: what a peer needs to bring its QP to RTR against ours.
struct AddressBlob {
  uint32_t magic;       // kAddressMagic
  uint16_t version;     // 1
  uint8_t mode;         // Mode
  uint8_t port;         // our active port (for logs; the peer addresses us by GID)
  uint8_t gid[16];      // our source GID
  uint32_t qpn;         // our QP number (24 bits)
  uint32_t psn;         // our first send PSN (24 bits)
  uint32_t session;     // random per endpoint: traffic of an older endpoint is rejected
  uint32_t slot_bytes;  // size of every staged message (frames must match on both sides)
  uint32_t recv_slots;  // how many receives we keep posted
  uint32_t crc;         // crc32c of the bytes before it
};
static_assert(sizeof(AddressBlob) == 48);
constexpr uint32_t kAddressMagic = 0x4c56524au;  // "LVRJ"

enum class Mode : uint8_t { kStaged = 1, kRc = 2 };

// Header at the start of every staged message; the verbs send always spans the whole slot
// (a whole number of 4 KB frames, the same on both sides). crc32c covers the header (with
// crc = 0) and the payload. Unsequenced control messages (hello, ack, bye) are idempotent.
enum class ChunkType : uint8_t { kData = 1, kAck = 2, kHello = 3, kBye = 4 };
constexpr uint8_t kFlagFirst = 1;     // kData: first chunk of a message
constexpr uint8_t kFlagLast = 2;      // kData: last chunk of a message
constexpr uint8_t kFlagNack = 4;      // kAck: the receiver saw a gap, a duplicate or a bad checksum
constexpr uint8_t kFlagHeard = 8;     // kHello: the sender has heard our hello
constexpr uint8_t kFlagImm = 32;      // kData: the immediate of a write-with-imm (0 bytes, in `imm`)

struct ChunkHeader {
  uint32_t magic;         // kChunkMagic
  uint32_t session;       // sender's session (from its address blob)
  uint8_t type;           // ChunkType
  uint8_t flags;
  uint16_t reserved;
  uint32_t payload_bytes;
  uint64_t seq;           // kData: sequence number, from 0
  uint64_t ack;           // every kData with seq < ack has been received in order
  uint64_t credit_limit;  // the sender of this header accepts kData with seq < credit_limit
  uint64_t msg_bytes;     // kData: total bytes of the message
  uint64_t offset;        // kData: offset of this chunk in the message
  uint32_t crc;
  uint32_t imm;           // kFlagImm only
};
static_assert(sizeof(ChunkHeader) == 64);
constexpr uint32_t kChunkMagic = 0x4c564348u;  // "LVCH"

// CRC-32C (Castagnoli), our own implementation: SSE4.2 instruction when the CPU has it,
// a table otherwise. `seed` chains calls (pass the previous result).
uint32_t crc32c(const void* data, size_t n, uint32_t seed = 0);

// Staging geometry of the staged (UC) protocol: every staged verbs message is one slot.
constexpr size_t kFrameBytes = 4096;
constexpr size_t kSlotBytes = 32 * 1024;  // 8 frames; every staged verbs message is exactly this
constexpr size_t kChunkPayload = kSlotBytes - sizeof(ChunkHeader);
constexpr uint32_t kDataSlots = 32;       // send window (chunks in flight awaiting ack)
constexpr uint32_t kCtrlSlots = 8;        // acks, hellos, byes
constexpr uint32_t kRecvSlots = 48;
constexpr uint32_t kRecvReserve = 8;      // receive slots never promised to data: control always fits

}  // namespace lattice::fabric::verbs
