// Skips that may not hide. A test that cannot run because a capability is missing (the
// llama.cpp oracle, network namespaces) skips with its reason, unless the run requires that
// capability: LATTICE_REQUIRE=oracle,netns,ipv6 (set by .ci/run) turns the skip into a failure, so CI
// cannot pass with its external checks silently off.
//
//   LATTICE_SKIP_OR_FAIL("oracle", "tests/node/node_modules absent (run scripts/setup.sh)");
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace lattice::testing {

// True when `capability` is in the comma-separated LATTICE_REQUIRE.
inline bool required(std::string_view capability) {
  const char* env = std::getenv("LATTICE_REQUIRE");
  if (!env) return false;
  std::string_view list(env);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == capability) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace lattice::testing

#define LATTICE_SKIP_OR_FAIL(capability, why)                                                           \
  do {                                                                                                  \
    if (::lattice::testing::required(capability)) {                                                     \
      GTEST_FAIL() << "LATTICE_REQUIRE has '" << (capability) << "', but it is missing: " << why;       \
    } else {                                                                                            \
      GTEST_SKIP() << why;                                                                              \
    }                                                                                                   \
  } while (0)
