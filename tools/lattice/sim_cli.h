// `lattice sim` pieces shared by its files: calibration (sim_calibrate.cc) and the what-if
// comparison (sim_compare.cc).
#pragma once

#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/sim/sim.h"

namespace lattice::cli {

struct CalibrateArgs {
  std::string out;     // machine file to write
  std::string model;   // optional: a GGUF whose one-node decode calibrates the engine efficiency
  std::string name = "this-machine";
  bool quick = false;  // smaller buffers and sweeps (tests)
};
// Measures this machine and writes the machine file; prints what it measured.
int run_calibrate(const CalibrateArgs& a);

// The one-node figures in a file `lattice bench engine --json` wrote (its first decode row of
// one sequence, decoding from an empty cache, and its first prefill row; of one thread count and,
// when the rows name it, of `model`: file names compared) or `lattice run --json` (one rank: its
// prompt's prefill, then decode after the prompt).
Result<sim::OneNodeFigures> read_bench_figures(const std::string& path, const std::string& model);

// Runs `argv` with a deadline, capturing its stdout; kTimeout (the child is killed) past it.
Result<std::string> run_capture(const std::vector<std::string>& argv, double timeout_s);

}  // namespace lattice::cli
