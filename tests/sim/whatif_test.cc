// What-if reports: the table and the SVG plot.
#include <gtest/gtest.h>

#include "lattice/sim/whatif.h"

namespace lattice::sim {
namespace {

std::vector<Series> two() {
  return {{"rdma <mesh>", {1, 2, 4}, {19.5, 26.1, 37.5}}, {"tcp", {1, 2, 4}, {19.5, 11.7, 0}}};
}

TEST(WhatIf, TableHasARowPerConfigurationAndAColumnPerNodeCount) {
  const std::string t = whatif_table(two());
  EXPECT_NE(t.find("| configuration | 1 node | 2 nodes | 4 nodes |"), std::string::npos) << t;
  EXPECT_NE(t.find("| rdma <mesh> | 19.5 | 26.1 | 37.5 |"), std::string::npos) << t;
  EXPECT_NE(t.find("| tcp | 19.5 | 11.7 | does not fit |"), std::string::npos) << t;
}

TEST(WhatIf, SvgHasOneLinePerSeriesAndEscapesLabels) {
  const std::string s = whatif_svg(two(), "a & b");
  EXPECT_EQ(s.rfind("<svg", 0), 0u);
  size_t lines = 0;
  for (size_t p = 0; (p = s.find("<polyline", p)) != std::string::npos; ++p) ++lines;
  EXPECT_EQ(lines, 2u);
  EXPECT_NE(s.find("rdma &lt;mesh&gt;"), std::string::npos);
  EXPECT_NE(s.find("a &amp; b"), std::string::npos);
  EXPECT_EQ(s.find("<mesh>"), std::string::npos);
  size_t points = 0;
  for (size_t p = 0; (p = s.find("<circle", p)) != std::string::npos; ++p) ++points;
  EXPECT_EQ(points, 5u);  // the point that does not fit is left out
}

}  // namespace
}  // namespace lattice::sim
