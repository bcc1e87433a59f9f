// Fuzz harness: topology files, ours and MLX hostfiles (parse_topology tells them apart as a
// user's file would be told), then what `lattice topo` does with an accepted one: classify the
// shape and render it as text, Graphviz and normalized JSON. The normalized JSON must parse
// again to the same hosts and links (render_json is what `topo --json` hands other tools).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "lattice/cluster/topology.h"

using namespace lattice::cluster;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto topo = parse_topology(text, "fuzz.json");
  if (!topo.ok()) return 0;
  Classification c = classify(*topo);
  (void)render_text(*topo, c);
  (void)render_dot(*topo);
  std::string normalized = render_json(*topo);
  auto again = parse_topology(normalized, "normalized.json");
  if (!again.ok() || again->hosts.size() != topo->hosts.size() || again->links.size() != topo->links.size()) {
    std::fprintf(stderr, "normalized topology does not parse back: %s\n%s\n",
                 again.ok() ? "different hosts/links" : again.status().to_string().c_str(), normalized.c_str());
    std::abort();
  }
  return 0;
}
