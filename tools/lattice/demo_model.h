// The model `lattice run --demo` runs: embedded in the binary (demo_model.cc).
#pragma once

#include <span>
#include <string>

namespace lattice::cli {

// The embedded GGUF file's bytes.
std::span<const unsigned char> demo_model_bytes();
// The demo model as a file in the cache directory (written on first use); "" and *error set
// when it cannot be written.
std::string demo_model_path(std::string* error);

}  // namespace lattice::cli
