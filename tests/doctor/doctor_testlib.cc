#include "doctor_testlib.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lattice/engine/gguf/make_model.h"

namespace lattice::doctor::testing {

namespace fs = std::filesystem;

ScratchDir::ScratchDir(const std::string& tag) {
  path_ = (fs::temp_directory_path() / ("lattice_doctor_" + tag + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

bool write_model(const std::string& path, int layers, uint64_t seed) {
  engine::MakeModelOptions o;
  o.dim = 64;
  o.layers = layers;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 300;
  o.type = "q8_0";
  o.seed = seed;
  o.threads = 1;
  return engine::make_model(o, path).ok();
}

void write_local_topology(const std::string& path, int n, int port, bool verbs) {
  // (a, b) -> the devices at each end, no host using one device twice.
  auto devices = [](int a, int b) -> std::pair<const char*, const char*> {
    if (a == 0 && b == 1) return {"emu_tb5_0", "emu_tb5_0"};
    if (a == 0 && b == 2) return {"emu_rc_0", "emu_tb5_0"};
    return {"emu_rc_0", "emu_rc_0"};
  };
  std::ofstream f(path);
  f << "{\"version\": 1, \"hosts\": [";
  for (int i = 0; i < n; ++i)
    f << (i ? "," : "") << "{\"name\": \"h" << i << "\", \"address\": \"127.0.0." << i + 1 << ":" << port << "\"}";
  f << "], \"links\": [";
  bool first = true;
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      f << (first ? "" : ",") << "{\"a\": \"h" << a << "\", \"b\": \"h" << b << "\", ";
      if (verbs && n == 3)
        f << "\"provider\": \"verbs\", \"a_device\": \"" << devices(a, b).first << "\", \"b_device\": \""
          << devices(a, b).second << "\", \"a_addr\": \"127.0.0." << a + 1 << "\", \"b_addr\": \"127.0.0." << b + 1
          << "\"}";
      else
        f << "\"provider\": \"tcp\"}";
      first = false;
    }
  f << "]}\n";
}

std::vector<std::string> failures(const Report& r) {
  std::vector<std::string> out;
  for (const auto& n : r.nodes)
    for (const auto& c : n.checks)
      if (c.level == Level::kFail) out.push_back(std::to_string(n.rank) + ":" + c.id);
  for (const auto& c : r.cluster)
    if (c.level == Level::kFail) out.push_back("-1:" + c.id);
  return out;
}

}  // namespace lattice::doctor::testing
