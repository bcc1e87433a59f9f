#include "lattice/crypto/sodium.h"

#include <sodium.h>

namespace lattice::crypto::detail {

Status ensure_sodium() {
  // sodium_init() is itself thread-safe and idempotent; caching its answer avoids the lock.
  static const int rc = sodium_init();
  if (rc < 0) return Unavailable("libsodium failed to initialise (sodium_init returned -1)");
  return Status::Ok();
}

}  // namespace lattice::crypto::detail
