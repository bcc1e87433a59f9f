// Randomness from the kernel (getrandom(2)): for region keys, nonces and connection ids,
// anything a peer must not be able to guess. Thread-safe; never blocks after boot.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lattice {

// Fills `n` bytes at `out`. Aborts only if the kernel's generator is unusable.
void secure_random_bytes(void* out, size_t n);
uint64_t secure_random_u64();

}  // namespace lattice
