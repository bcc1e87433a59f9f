// Placeholder until the shm provider lands (same session); replaced by the real one.
#include "lattice/fabric/providers.h"

namespace lattice::fabric::detail {
Result<std::unique_ptr<Provider>> make_shm_provider(std::string_view, const ProviderOptions&) {
  return Unavailable("shm provider not built");
}
}  // namespace lattice::fabric::detail
