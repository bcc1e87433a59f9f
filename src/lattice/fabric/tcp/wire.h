// Wire format of the tcp provider (protocol version 1). Everything is little-endian; every
// field a peer sends is validated before use (see endpoint.cc, Conn::begin_frame).
//
// A connection starts with one Hello each way (dialer first), then carries frames:
//
//   Frame = FrameHeader (64 bytes) | payload (payload_len bytes) | trailer (trailer_len bytes)
//
// One-sided requests (write, write-imm, read, atomics) carry a request id that the target
// echoes in its response (ack, read response, atomic response). The target serves requests in
// order, so responses arrive in request order; the id is checked against the oldest pending
// request and any mismatch is a protocol violation (kCorrupt).
//
// Sealed sessions (a provider given the cluster secret), still version 1: both Hellos carry
// flags bit 0 (kHelloFlagSealed; a mismatch is refused), then the 104/104/40-byte handshake of
// crypto/handshake.h runs on the socket (dialer = initiator, context names both endpoint
// nonces), then every frame is
//
//   FrameHeader (flags = kFlagSealed, trailer_len = 16, seal_seq = n)
//   | header tag (16)                     AEAD seq n,   data empty, AD = the 64-byte header
//   | payload ciphertext (payload_len)    AEAD seq n+1, AD = the header (only if payload_len > 0)
//   | payload tag (16)                    (only if payload_len > 0)
//
// so the header is authenticated before it is acted on, and a payload lands as ciphertext and
// is decrypted in place only once its tag verified (a failure wipes it and fails the
// endpoint with kAuthFailed). Sequence numbers are counted on both ends (SessionCipher):
// a replayed, reordered or dropped frame fails to open. Plain peers send flags = 0,
// trailer_len = 0, seal_seq = 0 and reject anything else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lattice::fabric::tcp {

inline constexpr uint8_t kWireVersion = 1;

// ---- Hello: the first 48 bytes each way on a new connection ------------------------------
//   0  magic[8]      "LTCPHELO"
//   8  u16 version   kWireVersion of the sender
//  10  u16 size      sizeof(Hello) = 48 (a later version may append fields)
//  12  u32 flags     bit 0 (kHelloFlagSealed) = "sealed session"; other bits 0
//  16  from[16]      the sender's endpoint nonce
//  32  to[16]        the nonce of the endpoint the sender wants (from its address blob)
inline constexpr char kHelloMagic[8] = {'L', 'T', 'C', 'P', 'H', 'E', 'L', 'O'};
struct Hello {
  char magic[8];
  uint16_t version;
  uint16_t size;
  uint32_t flags;
  uint8_t from[16];
  uint8_t to[16];
};
static_assert(sizeof(Hello) == 48);
inline constexpr uint32_t kHelloFlagSealed = 1u << 0;

// ---- Frames ---------------------------------------------------------------------------------
enum class FrameType : uint8_t {
  kSend = 1,         // payload = message; consumes a posted receive at the target
  kWrite = 2,        // payload -> region `key` at `offset`; target answers kAck
  kWriteImm = 3,     // as kWrite, plus `imm` delivered to a posted receive; answers kAck
  kReadReq = 4,      // no payload; arg0 = length; target answers kReadResp with the bytes
  kFetchAdd = 5,     // no payload; arg0 = addend; target answers kAtomicResp
  kCompareSwap = 6,  // no payload; arg0 = expected, arg1 = desired; target answers kAtomicResp
  kAck = 7,          // no payload; req_id = the write being acknowledged
  kReadResp = 8,     // payload = the bytes read; req_id = the read
  kAtomicResp = 9,   // no payload; arg0 = the old value; req_id = the atomic
  kHeartbeat = 10,   // no payload; sent when the link is idle
  kError = 11,       // payload = reason text (<= kMaxErrorText); imm = ErrorCode; then the sender closes
};

//   0  u8  version       kWireVersion
//   1  u8  type          FrameType
//   2  u8  flags         0 in v1 (bit 0 kFlagSealed reserved for AEAD)
//   3  u8  trailer_len   0 in v1 (AEAD tag length later)
//   4  u32 imm           kWriteImm: immediate value; kError: ErrorCode
//   8  u64 payload_len   bytes following the header (before the trailer)
//  16  u64 req_id        one-sided requests and their responses
//  24  u64 key           region key (one-sided requests)
//  32  u64 offset        byte offset in the region
//  40  u64 arg0          read length / addend / expected / old value
//  48  u64 arg1          desired (compare-swap)
//  56  u64 seal_seq      0 in v1 (AEAD frame counter later)
struct FrameHeader {
  uint8_t version;
  uint8_t type;
  uint8_t flags;
  uint8_t trailer_len;
  uint32_t imm;
  uint64_t payload_len;
  uint64_t req_id;
  uint64_t key;
  uint64_t offset;
  uint64_t arg0;
  uint64_t arg1;
  uint64_t seal_seq;
};
static_assert(sizeof(FrameHeader) == 64);
static_assert(offsetof(FrameHeader, payload_len) == 8 && offsetof(FrameHeader, seal_seq) == 56);

inline constexpr uint8_t kFlagSealed = 1u << 0;  // sealed session frames (see the top)
inline constexpr size_t kSealTagBytes = 16;
inline constexpr size_t kMaxErrorText = 1024;

// The structs above are laid out in host order; this provider is built for little-endian
// hosts only (x86-64, arm64), which is what the static_assert pins.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tcp wire format assumes a little-endian host");

inline FrameHeader make_header(FrameType type) {
  FrameHeader h;
  std::memset(&h, 0, sizeof h);
  h.version = kWireVersion;
  h.type = static_cast<uint8_t>(type);
  return h;
}

inline Hello make_hello(const uint8_t from[16], const uint8_t to[16]) {
  Hello h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kHelloMagic, sizeof h.magic);
  h.version = kWireVersion;
  h.size = sizeof(Hello);
  std::memcpy(h.from, from, 16);
  std::memcpy(h.to, to, 16);
  return h;
}

}  // namespace lattice::fabric::tcp
