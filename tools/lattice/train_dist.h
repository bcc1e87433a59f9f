// `lattice train` on one process or data parallel over --nodes local ranks (as `run --nodes`:
// cluster::run_local_job starts the ranks; each joins the cluster and trains as one rank).
#pragma once

#include <string>

#include "lattice/train/train.h"

namespace lattice::cli {

struct TrainArgs {
  train::TrainOptions options;
  std::string arch = "llama";
  int nodes = 1;
  std::string provider = "shm";
  std::string inject_fault;
  bool json = false, quiet = false;
  bool no_overlap = false;  // all-reduce after backward instead of during it
};

// Runs the job and prints the summary (or --json); the process exit code.
int run_train(const TrainArgs& args, const train::ProgressFn& progress);

}  // namespace lattice::cli
