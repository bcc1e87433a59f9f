// lattice/core/build_info.h is generated at build time from the source tree's git state.
#include "lattice/core/build_info.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace lattice {
namespace {

TEST(BuildInfoProcess, CommitIsOneTheSourceTreeKnows) {
  const std::string commit = build_info::kCommit;
  ASSERT_FALSE(commit.empty());
  if (commit == "unknown") GTEST_SKIP() << "built outside a git checkout";
  EXPECT_GE(commit.size(), 7u);
  EXPECT_EQ(commit.find_first_not_of("0123456789abcdef"), std::string::npos) << commit;
  // Asked of the source tree, not of the directory the test runs in.
  const std::string cmd = "git -C '" + std::string(LATTICE_SOURCE_DIR) + "' cat-file -e " + commit + "^{commit} 2>/dev/null";
  const int st = std::system(cmd.c_str());
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127) GTEST_SKIP() << "no git here";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << commit << " is not a commit of " << LATTICE_SOURCE_DIR;
}

}  // namespace
}  // namespace lattice
