#include "lattice/core/random.h"

#include <sys/random.h>

#include <cerrno>

#include "lattice/core/check.h"

namespace lattice {

void secure_random_bytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    LATTICE_CHECK(got > 0);
    p += got;
    n -= static_cast<size_t>(got);
  }
}

uint64_t secure_random_u64() {
  uint64_t v;
  secure_random_bytes(&v, sizeof v);
  return v;
}

}  // namespace lattice
