// Machine presets. Sources:
//  [apple-m3u]  Apple, Mac Studio (2025) tech specs: M3 Ultra, 819 GB/s memory bandwidth, up to 512 GB,
//               80-core GPU, six Thunderbolt 5 ports (apple.com/mac-studio/specs).
//  [apple-m2u]  Apple, Mac Studio (2023) tech specs: M2 Ultra, 800 GB/s, up to 192 GB, 76-core GPU,
//               Thunderbolt 4 only (no RDMA over Thunderbolt: TN3205 needs Thunderbolt 5).
//  [apple-m4]   Apple, Mac mini (2024) and MacBook Pro (2024) specs: M4 Pro 273 GB/s, up to 64 GB, 20-core
//               GPU; M4 Max 546 GB/s, up to 128 GB, 40-core GPU; three Thunderbolt 5 ports each.
//  [apple-m5]   Apple newsroom, 3 March 2026 (M5 Pro / M5 Max): M5 Max 614 GB/s, up to 128 GB, 40-core GPU
//               with a Neural Accelerator per core, "over 4x peak GPU compute for AI" over M4 Max.
//  [power]      Apple support "Mac Studio power consumption and thermal output": maximum 295 W (M2 Ultra),
//               480 W (M3 Ultra); "Mac mini power consumption": 140 W maximum (M4 Pro). Load figures while
//               decoding: Jeff Geerling measured 290.4 W on one M3 Ultra running llama-bench on DeepSeek R1
//               (github.com/geerlingguy/beowulf-ai-cluster issue 17) and "under 250 watts" per Mac Studio
//               running exo (jeffgeerling.com/blog/2025/15-tb-vram-on-mac-studio-rdma-over-thunderbolt-5).
//  [gpu-flops]  Peak FP16/FP32 of Apple GPUs: 128 ALUs per core x 2 FLOP x clock (about 1.4 GHz M2/M3, 1.58
//               GHz M4): M2 Ultra 27, M3 Ultra 28.7, M4 Pro 8.1, M4 Max 16.2 TFLOPS; M5 Max taken as 4x M4 Max
//               for matrix work per [apple-m5]. Engines reach a fraction of it (engine_profile.cc).
//  [tb-bus]     OWC (eshop.macsales.com/blog/68484): on Apple silicon every Thunderbolt port has its own bus
//               (System Report lists one bus per port), unlike Intel Macs where two ports share one
//               controller. exo issue 1293: on the M3 Ultra Mac Studio one of the six ports (beside the
//               Ethernet port) is not usable for the RDMA mesh, so five are modelled.
//  [throttle]   Laptops (MacBook Pro) lower clocks under sustained load; 0.85 of burst speed is an estimate
//               (no published decode figure), flagged by `throttles`.
#include <map>

#include "lattice/sim/machine.h"

namespace lattice::sim {
namespace {

Machine mk(const char* name, double bw, double tflops, double mem, double load_w, double idle_w, bool laptop,
           int tb5_ports, const char* src) {
  Machine m;
  m.name = name;
  m.source = src;
  m.mem_bw_gbs = bw;
  m.compute_tflops = tflops;
  m.memory_gb = mem;
  m.power_load_w = load_w;
  m.power_idle_w = idle_w;
  m.throttles = laptop;
  m.sustained_factor = laptop ? 0.85 : 1.0;
  m.tb5_ports = tb5_ports;
  m.tb5_controllers = tb5_ports;
  return m;
}

const std::map<std::string, Machine>& table() {
  static const std::map<std::string, Machine> t = {
      {"m2-ultra", mk("m2-ultra", 800, 27.2, 192, 200, 11, false, 0, "[apple-m2u] [power] [gpu-flops]")},
      {"m3-ultra", mk("m3-ultra", 819, 28.7, 512, 250, 12, false, 5, "[apple-m3u] [power] [gpu-flops] [tb-bus]")},
      {"m3-ultra-256", mk("m3-ultra-256", 819, 28.7, 256, 250, 12, false, 5, "[apple-m3u] [power] [gpu-flops] [tb-bus]")},
      {"m4-pro", mk("m4-pro", 273, 8.1, 64, 80, 5, false, 3, "[apple-m4] [power] [gpu-flops]")},
      {"m4-max", mk("m4-max", 546, 16.2, 128, 110, 7, true, 3, "[apple-m4] [gpu-flops] [throttle] (MacBook Pro)")},
      {"m5-max", mk("m5-max", 614, 64.8, 128, 120, 7, true, 3, "[apple-m5] [gpu-flops] [throttle] (MacBook Pro)")},
  };
  return t;
}

}  // namespace

std::vector<std::string> machine_preset_names() {
  std::vector<std::string> v;
  for (const auto& [k, m] : table()) v.push_back(k);
  return v;
}

Result<Machine> machine_preset(const std::string& name) {
  auto it = table().find(name);
  if (it != table().end()) return it->second;
  std::string all;
  for (const auto& n : machine_preset_names()) all += (all.empty() ? "" : ", ") + n;
  return NotFound("no machine preset '" + name + "' (presets: " + all + "; or a machine file path)");
}

}  // namespace lattice::sim
