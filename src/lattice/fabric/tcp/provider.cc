// Placeholder until the tcp provider lands (same session); replaced by the real one.
#include "lattice/fabric/providers.h"

namespace lattice::fabric::detail {
Result<std::unique_ptr<Provider>> make_tcp_provider(std::string_view, const ProviderOptions&) {
  return Unavailable("tcp provider not built");
}
}  // namespace lattice::fabric::detail
