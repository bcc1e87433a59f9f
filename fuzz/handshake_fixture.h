// What the handshake harness and its seed writer (seeds/write_seeds.cc) share,
// so a transcript captured once replays exactly: the cluster secret, the
// options an input byte selects, and deterministic "fresh" bytes (a run's
// nonces and ephemeral keys follow from a seed byte), so the fuzzer can mutate
// around a handshake that would otherwise complete.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "lattice/crypto/handshake.h"

namespace lattice::fuzz {

inline std::function<void(std::span<uint8_t>)> fixed_entropy(uint8_t seed) {
  return [seed, n = uint32_t{0}](std::span<uint8_t> out) mutable {
    for (uint8_t &b : out) b = static_cast<uint8_t>(seed * 131u + (n++) * 29u + 7u);
  };
}

inline const crypto::ClusterSecret &fixed_secret() {
  static const crypto::ClusterSecret s = [] {
    crypto::ClusterSecret::Bytes b{};
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
    return crypto::ClusterSecret::from_bytes(b);
  }();
  return s;
}

// Four bits of options: bit 0 the context (a or b), bit 1 --insecure, bits 2-3
// the ciphers offered (default order, ChaCha20-Poly1305 only, AES-256-GCM only,
// both with ChaCha first).
inline crypto::HandshakeOptions options_from(uint8_t bits, uint8_t entropy_seed) {
  crypto::HandshakeOptions o;
  o.context = (bits & 1) ? "fuzz context b" : "fuzz context a";
  o.insecure = (bits & 2) != 0;
  switch ((bits >> 2) & 3) {
    case 1:
      o.ciphers = {crypto::Cipher::kChaCha20Poly1305};
      break;
    case 2:
      o.ciphers = {crypto::Cipher::kAes256Gcm};
      break;
    case 3:
      o.ciphers = {crypto::Cipher::kChaCha20Poly1305, crypto::Cipher::kAes256Gcm};
      break;
    default:
      break;  // the default order
  }
  o.entropy = fixed_entropy(entropy_seed);
  return o;
}

}  // namespace lattice::fuzz
