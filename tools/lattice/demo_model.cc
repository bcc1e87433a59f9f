// The demo model, embedded in the binary: a 1.4 M-parameter Llama that `lattice train` trained
// on the King James Bible (tools/lattice/data/kjv-demo.gguf; the command that made it is in
// docs/TRAIN.md). `run --demo` writes it once into the cache directory and runs it, so the
// README's first command needs no download and no make-model step.
#include "demo_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

// .incbin places the file's bytes in .rodata at assembly time (ELF; the build defines the path).
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".global lattice_demo_gguf_begin\n"
        "lattice_demo_gguf_begin:\n"
        ".incbin \"" LATTICE_DEMO_GGUF "\"\n"
        ".global lattice_demo_gguf_end\n"
        "lattice_demo_gguf_end:\n"
        ".previous\n");
extern "C" const unsigned char lattice_demo_gguf_begin[];
extern "C" const unsigned char lattice_demo_gguf_end[];

namespace lattice::cli {

std::span<const unsigned char> demo_model_bytes() {
  return {lattice_demo_gguf_begin, static_cast<size_t>(lattice_demo_gguf_end - lattice_demo_gguf_begin)};
}

std::string demo_model_path(std::string* error) {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir = xdg && *xdg ? fs::path(xdg) / "lattice" : home && *home ? fs::path(home) / ".cache" / "lattice"
                                                                            : fs::temp_directory_path() / "lattice";
  std::error_code ec;
  fs::create_directories(dir, ec);
  const auto bytes = demo_model_bytes();
  // The size names the file: a binary with another demo model never reads this one's.
  const fs::path path = dir / ("demo-kjv-" + std::to_string(bytes.size()) + ".gguf");
  if (fs::file_size(path, ec) == bytes.size() && !ec) return path.string();
  // Written under a temporary name and renamed: concurrent demos never see half a file.
  const fs::path tmp = dir / ("demo-" + std::to_string(::getpid()) + ".tmp.gguf");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
      *error = "demo model: cannot write " + tmp.string();
      fs::remove(tmp, ec);
      return "";
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    *error = "demo model: " + ec.message();
    return "";
  }
  return path.string();
}

}  // namespace lattice::cli
