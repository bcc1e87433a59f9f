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
constexpr uint8_t kModeSealed = 0x80;  // or-ed into `mode`: the endpoint seals (it holds the cluster secret)

// Header at the start of every staged message; the verbs send always spans the whole slot
// (a whole number of 4 KB frames, the same on both sides). crc32c covers the header (with
// crc = 0) and the payload. Unsequenced control messages (hello, ack, bye) are idempotent.
enum class ChunkType : uint8_t { kData = 1, kAck = 2, kHello = 3, kBye = 4 };
constexpr uint8_t kFlagFirst = 1;     // kData: first chunk of a message
constexpr uint8_t kFlagLast = 2;      // kData: last chunk of a message
constexpr uint8_t kFlagNack = 4;      // kAck: the receiver saw a gap, a duplicate or a bad checksum
constexpr uint8_t kFlagHeard = 8;     // kHello: the sender has heard our hello
constexpr uint8_t kFlagImm = 32;      // kData: the immediate of a write-with-imm (0 bytes, in `imm`)
// (16 is kHello's "done", private to endpoint.cc.)
constexpr uint8_t kFlagSealed = 64;      // any type: a sealed session's frame; a SealBlock follows the header
constexpr uint8_t kFlagHandshake = 128;  // kHello before the keys exist: payload = a handshake message

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

// Sealed sessions (a provider given the cluster secret; seal.h has the protocol). A sealed
// chunk is
//
//   ChunkHeader (flags | kFlagSealed) | SealBlock (48) | payload ciphertext (payload_bytes)
//
// `nonce` numbers transmissions (lane 1, strictly increasing per direction: a resent chunk
// gets a fresh one), `header_tag` authenticates the header (crc 0), `nonce` and `payload_tag`;
// a kData chunk's payload is sealed once, under its data sequence number (lane 2), with the
// header's unchanging fields as associated data, so go-back-N resends the same ciphertext.
// crc32c still covers every byte (header with crc 0, seal block, payload): a failed checksum is
// line noise (dropped, resent), a good checksum with a bad tag is tampering (kAuthFailed).
struct SealBlock {
  uint64_t nonce;
  uint8_t payload_tag[16];
  uint8_t header_tag[16];
  uint64_t reserved;  // 0
};
static_assert(sizeof(SealBlock) == 48);

// CRC-32C (Castagnoli), our own implementation: SSE4.2 instruction when the CPU has it,
// a table otherwise. `seed` chains calls (pass the previous result).
uint32_t crc32c(const void* data, size_t n, uint32_t seed = 0);

// Staging geometry of the staged (UC) protocol: every staged verbs message is one slot.
constexpr size_t kFrameBytes = 4096;
constexpr size_t kSlotBytes = 32 * 1024;  // 8 frames; every staged verbs message is exactly this
constexpr size_t kChunkPayload = kSlotBytes - sizeof(ChunkHeader);
constexpr size_t kSealedChunkPayload = kChunkPayload - sizeof(SealBlock);
constexpr uint32_t kDataSlots = 32;       // send window (chunks in flight awaiting ack)
constexpr uint32_t kCtrlSlots = 8;        // acks, hellos, byes
constexpr uint32_t kRecvSlots = 48;
constexpr uint32_t kRecvReserve = 8;      // receive slots never promised to data: control always fits
constexpr uint32_t kAckEveryChunks = 8;   // a receiver acks after this many data chunks, and a message's
                                          // end with the next slot it sends back (at most kTailAckDelay later)

// Where a chunk's payload starts in its slot, and how much it may hold.
inline size_t chunk_body_offset(const ChunkHeader& h) {
  return sizeof(ChunkHeader) + ((h.flags & kFlagSealed) ? sizeof(SealBlock) : 0);
}
inline size_t chunk_capacity(const ChunkHeader& h) {
  return (h.flags & kFlagSealed) ? kSealedChunkPayload : kChunkPayload;
}
// The checksum of the chunk in `slot` (kSlotBytes long): the header with crc 0, the seal block
// of a sealed chunk, the payload. payload_bytes is clamped to the capacity (a receiver checks it).
uint32_t chunk_crc(const std::byte* slot);

}  // namespace lattice::fabric::verbs
