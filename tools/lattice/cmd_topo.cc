// `lattice topo FILE`: validate a topology file (ours or an MLX hostfile), say its shape,
// print its graph. Exit codes: 0 valid, 2 invalid or unusable (message with file:line).
// `lattice topo --discover -o FILE`: find the nodes (mDNS), measure every link they share and
// write the topology (cluster/discover_topology.h); 3 when discovery or probing failed.
#include <cstdio>
#include <string>

#include "command.h"
#include "lattice/cluster/discover_topology.h"
#include "lattice/cluster/topology.h"
#include "lattice/crypto/secret.h"

namespace lattice::cli {
namespace {

struct TopoArgs {
  std::string file;
  bool dot = false;
  bool json = false;
  bool discover = false;
  std::string out;
  std::string secret_file;
  int timeout_ms = 1500;
  int expect = 0;
  int probe_ms = 60;
  int pings = 20;
};

int run_discover(const TopoArgs& a) {
  auto fail = [](int code, const std::string& m) {
    std::fprintf(stderr, "lattice topo --discover: %s\n", m.c_str());
    return code;
  };
  if (!a.file.empty()) return fail(2, "give -o FILE for the topology to write, not a file to read");
  if (a.out.empty()) return fail(2, "-o FILE is required (where the measured topology goes)");
  if (a.timeout_ms < 1 || a.timeout_ms > 600000) return fail(2, "--timeout-ms must be in 1..600000");
  if (a.expect < 0 || a.expect > 1024) return fail(2, "--expect must be in 0..1024");
  if (a.probe_ms < 1 || a.probe_ms > 10000) return fail(2, "--probe-ms must be in 1..10000");
  if (a.pings < 1 || a.pings > 10000) return fail(2, "--pings must be in 1..10000");
  auto secret = crypto::load_secret(a.secret_file);
  if (!secret.ok()) return fail(2, secret.status().message());
  cluster::DiscoverOptions o;
  o.browse.timeout = std::chrono::milliseconds(a.timeout_ms);
  o.browse.expect = a.expect;
  o.probe.stream_time = std::chrono::milliseconds(a.probe_ms);
  o.probe.pings = a.pings;
  auto c = cluster::discover_to_file(*secret, o, a.out);
  if (!c.ok()) return fail(3, c.status().to_string());
  for (const auto& n : c->nodes)
    if (n.status != cluster::NodeStatus::kJoinable)
      std::printf("not joined: %s (%s: %s)\n", n.announcement.name.c_str(), std::string(cluster::to_string(n.status)).c_str(),
                  n.why.c_str());
  std::printf("probes:\n%s", cluster::render_probes(*c).c_str());
  std::fputs(cluster::render_text(c->topology, cluster::classify(c->topology)).c_str(), stdout);
  std::printf("wrote %s\n", a.out.c_str());
  if (a.expect > 0 && static_cast<int>(c->members.size()) < a.expect)
    return fail(1, "expected " + std::to_string(a.expect) + " nodes, found " + std::to_string(c->members.size()));
  return 0;
}

int run_topo(const TopoArgs& args) {
  if (args.discover) return run_discover(args);
  if (args.file.empty()) {
    std::fprintf(stderr, "lattice topo: give a topology FILE, or --discover -o FILE\n");
    return 2;
  }
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

Registrar topo_cmd{{"topo", "validate a topology file (or an MLX hostfile), classify it and print its graph; --discover: measure one",
                    [](CLI::App& app) {
                      auto args = std::make_shared<TopoArgs>();
                      app.add_option("file", args->file, "topology JSON file (ours or MLX's hostfile)");
                      auto* dot = app.add_flag("--dot", args->dot, "print Graphviz instead of the text report");
                      app.add_flag("--json", args->json, "print the normalized topology as JSON")->excludes(dot);
                      app.add_flag("--discover", args->discover,
                                   "find the nodes (lattice discover), probe every link they share, write -o FILE");
                      app.add_option("-o,--output", args->out, "--discover: the topology file to write");
                      app.add_option("--secret-file", args->secret_file,
                                     "--discover: cluster secret (else LATTICE_SECRET / LATTICE_SECRET_FILE)");
                      app.add_option("--timeout-ms", args->timeout_ms, "--discover: browse at most this long")
                          ->capture_default_str();
                      app.add_option("--expect", args->expect, "--discover: stop browsing once N nodes are found");
                      app.add_option("--probe-ms", args->probe_ms, "--discover: bandwidth stream per link")
                          ->capture_default_str();
                      app.add_option("--pings", args->pings, "--discover: echoes per link for latency")->capture_default_str();
                      return [args] { return run_topo(*args); };
                    }}};

}  // namespace
}  // namespace lattice::cli
