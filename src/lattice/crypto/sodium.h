// Internal: libsodium initialisation, shared by every file of the crypto layer.
#pragma once

#include "lattice/core/status.h"

namespace lattice::crypto::detail {

// Calls sodium_init() once per process (thread-safe). Returns kUnavailable if libsodium
// cannot initialise (no usable random source), which no crypto call can survive.
Status ensure_sodium();

}  // namespace lattice::crypto::detail
