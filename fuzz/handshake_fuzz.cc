// Fuzz harness: the join handshake's state machine (crypto/handshake.h), both
// roles. The first input byte picks the mode and options, the rest is:
//   mode 0, responder: the messages a would-be initiator sends (M1, M3, more),
//   fed in the sizes
//           next_message_bytes() asks for, as a socket reader does;
//   mode 1, initiator: the messages a would-be responder answers with (M2 or a
//   reject, more); mode 2, a real pair in the middle of which the input XORs
//   masks onto M1, M2 and M3.
// Fresh bytes are deterministic (handshake_fixture.h), so captured transcripts
// (corpus/handshake) reach the states past the MACs. Invariants checked, beyond
// "no crash, no leak, no UB":
//   - nobody completes on a message that was changed in flight (mode 2: every
//   byte is covered
//     by a MAC or checked), and an untouched pair with compatible options
//     completes with the same session id and mirrored keys;
//   - a failed handshake stays failed (sticky) and asks for no more bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/handshake_fixture.h"
#include "lattice/crypto/handshake.h"

using namespace lattice;
using namespace lattice::crypto;

namespace {

void check_sticky(Handshake &hs) {
  if (hs.next_message_bytes() != 0 || hs.done()) std::abort();
  std::vector<uint8_t> more(Handshake::kHelloBytes, 0);
  if (hs.on_message(more).ok()) std::abort();
}

// Feeds `in` to `hs` in the sizes it asks for.
void feed(Handshake &hs, const uint8_t *data, size_t size) {
  size_t off = 0;
  for (int i = 0; i < 8; ++i) {
    size_t n = hs.next_message_bytes();
    if (n == 0 || off >= size) break;
    n = std::min(n,
                 size - off);  // a short last message, as a peer hanging up mid-message
    auto out = hs.on_message({data + off, n});
    off += n;
    if (!out.ok()) {
      (void)hs.take_reject();
      check_sticky(hs);
      return;
    }
  }
  if (hs.done() && !hs.session().ok()) std::abort();
}

void pair(uint8_t opt, const uint8_t *masks, size_t n_masks) {
  // Options: bits 0-3 the initiator's, 4-7 the responder's (context, insecure,
  // ciphers).
  auto ini = Handshake::create(Handshake::Role::kInitiator, fuzz::fixed_secret(), fuzz::options_from(opt & 15, 1));
  auto res = Handshake::create(Handshake::Role::kResponder, fuzz::fixed_secret(), fuzz::options_from(opt >> 4, 2));
  if (!ini.ok() || !res.ok()) std::abort();
  size_t used = 0;
  bool tampered_any = false;
  // Applies the next mask bytes to `msg`; true when any bit changed.
  auto tamper = [&](std::vector<uint8_t> &msg) {
    bool changed = false;
    for (size_t i = 0; i < msg.size() && used < n_masks; ++i, ++used) {
      msg[i] ^= masks[used];
      changed |= masks[used] != 0;
    }
    tampered_any |= changed;
    return changed;
  };
  auto m1 = ini->start();
  if (!m1.ok()) std::abort();
  bool t1 = tamper(*m1);
  auto m2 = res->on_message(*m1);
  if (t1 && m2.ok()) std::abort();  // a changed M1 must be refused
  if (!m2.ok()) {
    std::vector<uint8_t> reject = res->take_reject();
    if (!reject.empty()) (void)ini->on_message(reject);
    check_sticky(*res);
    return;
  }
  bool t2 = tamper(*m2);
  auto m3 = ini->on_message(*m2);
  if (t2 && m3.ok()) std::abort();
  if (!m3.ok()) {
    check_sticky(*ini);
    return;
  }
  bool t3 = tamper(*m3);
  auto end = res->on_message(*m3);
  if (t3 && end.ok()) std::abort();
  if (!end.ok()) {
    check_sticky(*res);
    return;
  }
  if (tampered_any || !ini->done() || !res->done()) std::abort();
  auto a = ini->session();
  auto b = res->session();
  if (!a.ok() || !b.ok()) std::abort();
  if (a->session_id != b->session_id || a->cipher != b->cipher || a->insecure != b->insecure ||
      a->keys.tx != b->keys.rx || a->keys.rx != b->keys.tx)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0] % 3;
  const uint8_t opt = data[1];
  data += 2;
  size -= 2;
  if (mode == 2) {
    pair(opt, data, size);
    return 0;
  }
  if (mode == 0) {
    auto res = Handshake::create(Handshake::Role::kResponder, fuzz::fixed_secret(), fuzz::options_from(opt >> 4, 2));
    if (!res.ok()) std::abort();
    feed(*res, data, size);
  } else {
    auto ini = Handshake::create(Handshake::Role::kInitiator, fuzz::fixed_secret(), fuzz::options_from(opt & 15, 1));
    if (!ini.ok()) std::abort();
    if (!ini->start().ok()) std::abort();
    feed(*ini, data, size);
  }
  return 0;
}
