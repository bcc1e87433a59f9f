// Deterministic "fresh" bytes for the handshake harness and its seed writer: a run's nonces and
// ephemeral keys follow from a seed byte, so a transcript captured once (fuzz/seeds.cc) replays
// exactly, and the fuzzer can mutate around a handshake that would otherwise complete.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace lattice::fuzz {

inline std::function<void(std::span<uint8_t>)> fixed_entropy(uint8_t seed) {
  return [seed, n = uint32_t{0}](std::span<uint8_t> out) mutable {
    for (uint8_t& b : out) b = static_cast<uint8_t>(seed * 131u + (n++) * 29u + 7u);
  };
}

}  // namespace lattice::fuzz
