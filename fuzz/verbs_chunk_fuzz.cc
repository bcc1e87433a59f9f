// Fuzz harness: the verbs provider's staged receive path (fabric/verbs/chunk_rx.cc, the code
// endpoint.cc hands every completed receive to): slot checks (length, magic, session, payload
// size, crc32c), a sealed session's admission (header tag, replay window), the in-order
// go-back-N window and the reassembly of chunks into user receives, opening sealed payloads.
// The endpoint around it only posts slots and completions; here the harness plays both the
// peer (building slots, sealing them with the peer's half of a fixed session, as
// LinkSeal::seal_payload/seal_header do on the sender) and the endpoint (slot and receive
// bookkeeping, as VerbsEndpoint::handle_recv and deliver_held do).
//
// Input: byte 0 sets up the session (bit 0: sealed; bit 1: ChaCha20-Poly1305 instead of
// AES-256-GCM; bit 2: still connecting; bit 3: the endpoint's cipher backends, libsodium for
// small frames and OpenSSL for large AES ones, instead of libsodium alone). Then records of a 16-byte descriptor and payload bytes:
//   d[0] type, d[1] flags (as the chunk header), d[2] how the slot is made:
//     bit 0 authentic: right magic, session, length and crc, and sealed by the peer in a sealed
//           session (payload_bytes clamped to the capacity); otherwise bits 1-3 say what is right
//     bit 1 crc, bit 2 magic and session, bit 3 whole slot length
//     bit 4 tamper: xor d[12] | 1 into byte d[14..15] of the slot after sealing, before the crc
//     bit 5 post a user receive of d[13] * 512 bytes first
//     bit 6 seq is the receiver's expected one plus (int8) d[5]; otherwise d[5] raw
//     bit 7 payload_bytes is d[3..4]; otherwise d[3] (most chunks stay small: a full 32 KiB
//           slot costs its crc, cipher and copies, and reaches no code a small one does not,
//           but its size checks)
//   d[6..8] offset, d[9..11] msg_bytes (24 bits each), d[12] imm;
//   then up to 64 bytes of the payload from the input (the rest one repeated byte).
// A sealed data chunk whose seq the peer sealed already (its cipher refuses a number twice; a
// real peer resends the old ciphertext) goes out with its payload unsealed under a valid
// header: a forgery, which must fail its delivery.
// Invariants: an authentic, untampered frame is admitted and never fails its delivery; a
// frame tampered in its header or seal block is never admitted in a sealed session, and a
// tampered sealed payload is never delivered; what is delivered into a receive is the payload
// the peer sent; the window never holds more slots than it may.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "lattice/fabric/verbs/chunk_rx.h"
#include "lattice/fabric/verbs/seal.h"
#include "lattice/fabric/verbs/wire.h"

using namespace lattice;
using namespace lattice::fabric::verbs;

namespace {

constexpr uint32_t kPeerSession = 0x5eed0001u;
constexpr size_t kRecvBuffers = 8;
constexpr size_t kRecvBufferBytes = 255 * 512;

struct Slots {
  alignas(4096) std::byte mem[kRecvSlots][kSlotBytes];
  std::vector<std::byte> plain[kRecvSlots];  // what the peer put in each slot's payload
  bool authentic[kRecvSlots] = {};
  bool tampered_payload[kRecvSlots] = {};
  std::byte recv[kRecvBuffers][kRecvBufferBytes];
};

Slots& slots() {
  static Slots* s = new Slots();
  return *s;
}

crypto::Session session_for(bool sender, bool chacha) {
  crypto::Session s;
  s.cipher = chacha ? crypto::Cipher::kChaCha20Poly1305 : crypto::Cipher::kAes256Gcm;
  crypto::Key a{}, b{};
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i * 3 + 1);
    b[i] = static_cast<uint8_t>(i * 5 + 2);
  }
  s.keys.tx = sender ? a : b;
  s.keys.rx = sender ? b : a;
  return s;
}

uint32_t u24(const uint8_t* p) { return p[0] | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16); }

[[noreturn]] void die(const char* what, const Status& st = Status()) {
  std::fprintf(stderr, "verbs_chunk: %s %s\n", what, st.ok() ? "" : st.to_string().c_str());
  std::abort();
}

struct Recv {
  size_t buffer;
  size_t bytes;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Slots& S = slots();
  const bool sealed = data[0] & 1, chacha = data[0] & 2;
  bool connecting = data[0] & 4;  // until a data chunk, an ack or a hello that heard us
  std::optional<LinkSeal> rx_seal, tx_seal;
  if (sealed) {
    const auto backend = (data[0] & 8) ? crypto::AeadBackend::kAuto : crypto::AeadBackend::kSodium;
    auto r = LinkSeal::with_session(false, session_for(false, chacha), backend);
    auto t = LinkSeal::with_session(true, session_for(true, chacha), backend);
    if (!r.ok() || !t.ok()) die("no session:", r.ok() ? t.status() : r.status());
    rx_seal.emplace(std::move(*r));
    tx_seal.emplace(std::move(*t));
  }
  LinkSeal* seal = sealed ? &*rx_seal : nullptr;
  ChunkReceiver rx(1);
  uint64_t held_mask = 0;  // slots the receiver holds
  std::deque<Recv> recvs;
  size_t next_buffer = 0;
  uint64_t next_data_seq = 0;  // the peer's cipher seals each data seq once

  size_t pos = 1;
  while (pos + 16 <= size) {
    const uint8_t* d = data + pos;
    pos += 16;
    const uint8_t how = d[2];
    const bool authentic = how & 1;
    if ((how & 32) && recvs.size() < kRecvBuffers) recvs.push_back({next_buffer++ % kRecvBuffers, size_t{d[13]} * 512});

    uint32_t j = 0;
    while (held_mask & (uint64_t{1} << j)) ++j;  // the window holds at most 40 of the 48
    std::byte* slot = S.mem[j];
    ChunkHeader h{};
    h.magic = (authentic || (how & 4)) ? kChunkMagic : 0x4c564300u | d[0];
    h.session = (authentic || (how & 4)) ? kPeerSession : kPeerSession ^ d[1];
    h.type = d[0];
    h.flags = d[1];
    if (authentic) h.flags = sealed ? (h.flags | kFlagSealed) : (h.flags & ~(kFlagSealed | kFlagHandshake));
    h.payload_bytes = (how & 128) ? d[3] | (uint32_t{d[4]} << 8) : d[3];
    if (authentic && h.payload_bytes > chunk_capacity(h)) h.payload_bytes = static_cast<uint32_t>(chunk_capacity(h));
    h.seq = (how & 64) ? rx.expected() + static_cast<int8_t>(d[5]) : d[5];
    h.offset = u24(d + 6);
    h.msg_bytes = u24(d + 9);
    h.imm = d[12];
    h.ack = 0;
    h.credit_limit = 0;
    const size_t body = chunk_body_offset(h);
    const size_t n = std::min<size_t>(h.payload_bytes, chunk_capacity(h));
    std::vector<std::byte>& plain = S.plain[j];
    plain.resize(n);
    const size_t from_input = std::min<size_t>({n, size - pos, 64});
    if (from_input) std::memcpy(plain.data(), data + pos, from_input);
    pos += from_input;
    if (n > from_input) std::memset(plain.data() + from_input, static_cast<int>(h.seq * 31 + 7), n - from_input);
    std::memset(slot, 0, body);
    std::memcpy(slot, &h, sizeof h);
    const bool seal_it = authentic && sealed;
    bool tampered_header = false, tampered_payload = false;
    if (seal_it && static_cast<ChunkType>(h.type) == ChunkType::kData && h.seq >= next_data_seq &&
        h.seq != ~uint64_t{0}) {
      if (Status st = tx_seal->seal_payload(slot, plain.data()); !st.ok()) die("the peer cannot seal:", st);
      next_data_seq = h.seq + 1;
    } else {
      if (n) std::memcpy(slot + body, plain.data(), n);
      if (seal_it && static_cast<ChunkType>(h.type) == ChunkType::kData) tampered_payload = true;  // forged
    }
    if (seal_it) {
      if (Status st = tx_seal->seal_header(slot); !st.ok()) die("the peer cannot seal a header:", st);
    }
    if (how & 16) {
      const size_t at = d[14] | (size_t{d[15]} << 8);
      if (at < body + n && !(at >= offsetof(ChunkHeader, crc) && at < offsetof(ChunkHeader, crc) + 4)) {
        slot[at] ^= static_cast<std::byte>(d[12] | 1);
        (at < body ? tampered_header : tampered_payload) = true;
      }
    }
    if (authentic || (how & 2)) {
      ChunkHeader w;
      std::memcpy(&w, slot, sizeof w);
      w.crc = chunk_crc(slot);
      std::memcpy(slot, &w, sizeof w);
    } else {
      ChunkHeader w;
      std::memcpy(&w, slot, sizeof w);
      w.crc = u24(d + 12);
      std::memcpy(slot, &w, sizeof w);
    }
    const uint32_t byte_len = (authentic || (how & 8)) ? uint32_t{kSlotBytes} : d[13] * 128u;
    S.authentic[j] = authentic && !tampered_header && !tampered_payload;
    S.tampered_payload[j] = tampered_payload;

    ChunkReceiver::Admitted a = rx.admit(slot, byte_len, kPeerSession, seal, connecting);
    if (S.authentic[j] && a.what != ChunkReceiver::Arrival::kChunk) {
      std::fprintf(stderr, "an authentic frame was not admitted: %s\n", a.error.to_string().c_str());
      std::abort();
    }
    if (sealed && tampered_header && a.what == ChunkReceiver::Arrival::kChunk) {
      std::fprintf(stderr, "a frame tampered in its header or seal block was admitted\n");
      std::abort();
    }
    if (a.what == ChunkReceiver::Arrival::kFailed) return 0;  // the link fails
    if (a.what != ChunkReceiver::Arrival::kChunk) continue;
    const auto type = static_cast<ChunkType>(a.h.type);
    if (type == ChunkType::kData || type == ChunkType::kAck || (type == ChunkType::kHello && (a.h.flags & kFlagHeard)))
      connecting = false;
    if (type == ChunkType::kData) {
      if (rx.take_data(a.h, j)) held_mask |= uint64_t{1} << j;
    } else if (type == ChunkType::kBye) {
      return 0;  // the peer closed: the link fails
    } else if (type != ChunkType::kAck && type != ChunkType::kHello) {
      rx.unknown_type();
    }
    if (rx.held() > kRecvSlots - kRecvReserve || rx.credit_limit() < rx.expected()) die("the window overflowed");

    // deliver_held: in order, into the posted receives.
    while (rx.has_held() && !connecting) {
      if (!rx.message_open() && recvs.empty()) break;
      const uint32_t k = rx.front_slot();
      ChunkHeader hh;
      std::memcpy(&hh, S.mem[k], sizeof hh);
      const Recv& r = recvs.front();
      std::byte* dst = S.recv[r.buffer];
      auto got = rx.deliver(S.mem[k], dst, r.bytes, seal);
      if (!got.ok()) {
        if (S.authentic[k] && got.status().code() == ErrorCode::kAuthFailed) {
          std::fprintf(stderr, "an authentic payload failed: %s\n", got.status().to_string().c_str());
          std::abort();
        }
        return 0;  // the link fails
      }
      if (sealed && S.tampered_payload[k]) {
        std::fprintf(stderr, "a tampered sealed payload was delivered\n");
        std::abort();
      }
      held_mask &= ~(uint64_t{1} << k);
      if (!got->imm && S.authentic[k] && hh.offset < r.bytes) {
        const size_t m = std::min<uint64_t>(hh.payload_bytes, r.bytes - hh.offset);
        if (std::memcmp(dst + hh.offset, S.plain[k].data(), m) != 0) {
          std::fprintf(stderr, "delivered bytes differ from the peer's payload\n");
          std::abort();
        }
      }
      if (got->imm || got->last) recvs.pop_front();
    }
  }
  return 0;
}
