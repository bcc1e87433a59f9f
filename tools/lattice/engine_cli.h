// Shared by `lattice run` and `lattice bench engine`: loading a model with a progress bar,
// and describing the build (commit, flags, ISA) for benchmark records.
#pragma once

#include <memory>
#include <string>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"

namespace lattice::cli {

// Opens and binds the model, then reads its pages in once. A progress bar goes to stderr
// when stderr is a terminal; otherwise one line for files of 1 GiB or more, none for smaller.
Result<std::unique_ptr<engine::Model>> load_model_with_progress(const std::string& path, bool pack, bool quiet);

// "Q4_0", "1.10 B", "636.2 MiB"
std::string human_params(uint64_t n);
std::string human_bytes(uint64_t n);

// The git commit (LATTICE_COMMIT, else `git rev-parse --short HEAD` in the working
// directory, else "unknown"), compiler and flags, and the matmul ISA in use.
std::string build_commit();
std::string build_flags();
std::string build_isa();

}  // namespace lattice::cli
