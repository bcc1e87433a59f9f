#include "gguf_testlib.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace lattice::engine::testing {

std::vector<std::byte> small_valid_file() {
  GgufBytes g;
  g.header(3, 2, 2);
  g.kv_str("general.name", "small");
  g.str("test.values").u32(9).u32(4).u64(3).u32(1).u32(2).u32(3);
  g.tensor_info("a", {8}, 0, 0);
  g.tensor_info("b", {4, 2}, 0, 32);
  g.pad(32);
  g.fill(32, 0x11).fill(32, 0x22);
  return g.b;
}

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string make_temp_dir(std::string_view tag) {
  const char* base = std::getenv("TMPDIR");
  std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") /
                            ("lattice-gguf-" + std::string(tag) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace lattice::engine::testing
