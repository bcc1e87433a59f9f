// `lattice topo FILE`: validate a topology file (ours or an MLX hostfile), say its shape,
// print its graph. Exit codes: 0 valid, 2 invalid or unusable (message with file:line).
#include <cstdio>
#include <string>

#include "command.h"
#include "lattice/cluster/topology.h"

namespace lattice::cli {
namespace {

struct TopoArgs {
  std::string file;
  bool dot = false;
  bool json = false;
};

int run_topo(const TopoArgs& args) {
  auto topo = cluster::load_topology(args.file);
  if (!topo.ok()) {
    // One line per problem, each already "file:line: ..." (compiler style, so editors jump to it).
    std::fprintf(stderr, "%s\n", topo.status().message().c_str());
    return 2;
  }
  auto shape = cluster::classify(*topo);
  if (args.dot) {
    std::fputs(cluster::render_dot(*topo).c_str(), stdout);
  } else if (args.json) {
    std::fputs(cluster::render_json(*topo).c_str(), stdout);
  } else {
    std::fputs(cluster::render_text(*topo, shape).c_str(), stdout);
  }
  for (const auto& w : topo->warnings) std::fprintf(stderr, "lattice topo: warning: %s\n", w.c_str());
  if (shape.shape == cluster::Shape::kDisconnected) {
    std::string groups;
    for (const auto& comp : shape.components) {
      groups += " {";
      for (size_t k = 0; k < comp.size(); ++k)
        groups += (k ? ", " : "") + topo->hosts[static_cast<size_t>(comp[k])].name;
      groups += "}";
    }
    std::fprintf(stderr, "lattice topo: %s: the topology is disconnected:%s; no job can span it\n", args.file.c_str(),
                 groups.c_str());
    return 2;
  }
  return 0;
}

Registrar topo_cmd{{"topo", "validate a topology file (or an MLX hostfile), classify it and print its graph",
                    [](CLI::App& app) {
                      auto args = std::make_shared<TopoArgs>();
                      app.add_option("file", args->file, "topology JSON file (ours or MLX's hostfile)")->required();
                      auto* dot = app.add_flag("--dot", args->dot, "print Graphviz instead of the text report");
                      app.add_flag("--json", args->json, "print the normalized topology as JSON")->excludes(dot);
                      return [args] { return run_topo(*args); };
                    }}};

}  // namespace
}  // namespace lattice::cli
