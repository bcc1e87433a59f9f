// AEAD throughput of the session cipher: seal + open in place (what one encrypted TCP frame
// costs its two ends), at 1 KiB, 32 KiB (a verbs slot), 64 KiB and 1 MiB, for both ciphers and both backends
// (OpenSSL EVP, libsodium). The fastest pair here is the default: AES-256-GCM where AES-NI
// exists, through OpenSSL when built with it. Bytes/s counts payload
// bytes once per seal+open pair; seal-only figures are there to compare with OpenSSL's
// `openssl speed -evp` (ANCHORS.md).
//
//   build/aead_bench --benchmark_min_time=0.5s
#include <benchmark/benchmark.h>
#include <sodium.h>

#include <vector>

#include "lattice/crypto/aead.h"

namespace {

using lattice::crypto::AeadBackend;
using lattice::crypto::Cipher;
using lattice::crypto::SessionCipher;
using lattice::crypto::SessionKeys;
using lattice::crypto::Tag;

SessionKeys keys(bool swap) {
  SessionKeys k;
  for (size_t i = 0; i < k.tx.size(); ++i) {
    k.tx[i] = static_cast<uint8_t>(i);
    k.rx[i] = static_cast<uint8_t>(255 - i);
  }
  if (swap) std::swap(k.tx, k.rx);
  return k;
}

void BM_SealOpen(benchmark::State& state, Cipher cipher, AeadBackend backend) {
  if (!lattice::crypto::cipher_available(cipher, backend)) {
    state.SkipWithError("cipher not available on this CPU");
    return;
  }
  auto tx = SessionCipher::create(cipher, keys(false), backend);
  auto rx = SessionCipher::create(cipher, keys(true), backend);
  std::vector<std::byte> buf(static_cast<size_t>(state.range(0)), std::byte{0x5a});
  std::byte header[16] = {};
  Tag tag{};
  for (auto _ : state) {
    auto seq = tx->seal(buf, header, tag);
    if (!seq.ok() || !rx->open(*seq, buf, header, tag).ok()) {
      state.SkipWithError("seal/open failed");
      return;
    }
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void BM_Seal(benchmark::State& state, Cipher cipher, AeadBackend backend) {
  if (!lattice::crypto::cipher_available(cipher, backend)) {
    state.SkipWithError("cipher not available on this CPU");
    return;
  }
  auto tx = SessionCipher::create(cipher, keys(false), backend);
  std::vector<std::byte> buf(static_cast<size_t>(state.range(0)), std::byte{0x5a});
  std::byte header[16] = {};
  Tag tag{};
  for (auto _ : state) {
    auto seq = tx->seal(buf, header, tag);
    benchmark::DoNotOptimize(seq);
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

#define LATTICE_AEAD_BENCH(fn, name, cipher, backend) \
  BENCHMARK_CAPTURE(fn, name, cipher, backend)->Arg(1 << 10)->Arg(32 << 10)->Arg(64 << 10)->Arg(1 << 20)
LATTICE_AEAD_BENCH(BM_SealOpen, aes256gcm_openssl, Cipher::kAes256Gcm, AeadBackend::kOpenSsl);
LATTICE_AEAD_BENCH(BM_SealOpen, chacha20poly1305_openssl, Cipher::kChaCha20Poly1305, AeadBackend::kOpenSsl);
LATTICE_AEAD_BENCH(BM_SealOpen, aes256gcm_sodium, Cipher::kAes256Gcm, AeadBackend::kSodium);
LATTICE_AEAD_BENCH(BM_SealOpen, chacha20poly1305_sodium, Cipher::kChaCha20Poly1305, AeadBackend::kSodium);
LATTICE_AEAD_BENCH(BM_Seal, aes256gcm_openssl, Cipher::kAes256Gcm, AeadBackend::kOpenSsl);
LATTICE_AEAD_BENCH(BM_Seal, chacha20poly1305_openssl, Cipher::kChaCha20Poly1305, AeadBackend::kOpenSsl);
LATTICE_AEAD_BENCH(BM_Seal, aes256gcm_sodium, Cipher::kAes256Gcm, AeadBackend::kSodium);
LATTICE_AEAD_BENCH(BM_Seal, chacha20poly1305_sodium, Cipher::kChaCha20Poly1305, AeadBackend::kSodium);

}  // namespace

BENCHMARK_MAIN();
