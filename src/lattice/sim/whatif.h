// What-if reports: one configuration (a topology file, an engine, a layout) per series, decode
// tok/s against node count; as a markdown table and as an SVG line plot.
#pragma once

#include <string>
#include <vector>

namespace lattice::sim {

struct Series {
  std::string label;
  std::vector<int> nodes;
  std::vector<double> tok_s;  // 0: does not fit (no point)
};

std::string whatif_table(const std::vector<Series>& series);
// A self-contained SVG (no scripts, no external fonts): axes, grid, one coloured line per series
// with its legend.
std::string whatif_svg(const std::vector<Series>& series, const std::string& title);

}  // namespace lattice::sim
