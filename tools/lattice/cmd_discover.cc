// `lattice discover`: list the lattice nodes announcing themselves on this machine's networks
// (DNS-SD `_lattice._tcp` over mDNS), or with --announce be one (docs/DISCOVER.md).
//
//   lattice discover [--timeout-ms 1500] [--expect N] [--json] [--secret-file F]
//   lattice discover --announce [--name NAME] [--port P] [--for-s S] [--secret-file F]
//
// Exit codes: 0 listed (or announced until stopped), 1 with --expect N and fewer joinable nodes
// found, 2 bad flags or no secret, 3 discovery unavailable or failed.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "lattice/cluster/discover.h"
#include "lattice/cluster/discover_topology.h"
#include "lattice/crypto/secret.h"

namespace lattice::cli {
namespace {

struct DiscoverArgs {
  int timeout_ms = 1500;
  int expect = 0;
  bool json = false;
  std::string secret_file;
  bool announce = false;
  std::string name;
  int port = 0;
  double for_s = 0;
};

int fail(int code, const std::string& m) {
  std::fprintf(stderr, "lattice discover: %s\n", m.c_str());
  return code;
}

std::string ifaces_text(const cluster::Announcement& a) {
  std::string s;
  for (const auto& i : a.ifaces)
    s += (s.empty() ? "" : ", ") + i.name + " " + std::string(cluster::to_string(i.kind)) + " " + i.ipv4 + "/" +
         std::to_string(i.prefix_len) + (i.rdma_device.empty() ? "" : " " + i.rdma_device);
  return s;
}

int run_announce(const DiscoverArgs& a, const crypto::ClusterSecret& secret) {
  // Stop signals are taken synchronously below; block them before any thread starts so none
  // of Avahi's or the probe server's threads receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  cluster::AnnounceOptions o;
  o.name = a.name;
  o.probe_port = static_cast<uint16_t>(a.port);
  auto node = cluster::start_announcer(secret, o);
  if (!node.ok()) return fail(3, node.status().to_string());
  const auto& ann = node->announcement;
  std::printf("announcing %s (lattice %s, secret %s, probe port %u) on %s\n", ann.name.c_str(), ann.version.c_str(),
              ann.fingerprint.c_str(), ann.probe_port, ifaces_text(ann).c_str());
  std::fflush(stdout);
  // A daemon's main loop: until a stop signal, or --for-s.
  Deadline until = a.for_s > 0 ? Deadline::after(std::chrono::duration<double>(a.for_s)) : Deadline::never();
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&stop, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || until.expired()) break;
  }
  return 0;
}

int run_discover(const DiscoverArgs& a) {
  if (a.timeout_ms < 1 || a.timeout_ms > 600000) return fail(2, "--timeout-ms must be in 1..600000");
  if (a.expect < 0 || a.expect > 1024) return fail(2, "--expect must be in 0..1024");
  if (a.port < 0 || a.port > 65535) return fail(2, "--port must be in 0..65535");
  auto secret = crypto::load_secret(a.secret_file);
  if (!secret.ok()) return fail(2, secret.status().message());
  if (a.announce) return run_announce(a, *secret);

  auto responder = cluster::make_responder();
  if (!responder.ok()) return fail(3, responder.status().to_string());
  cluster::BrowseOptions bo;
  bo.timeout = std::chrono::milliseconds(a.timeout_ms);
  bo.expect = a.expect;
  bo.fingerprint = secret->fingerprint();
  auto nodes = (*responder)->browse(bo);
  if (!nodes.ok()) return fail(3, nodes.status().to_string());
  int joinable = 0;
  for (const auto& n : *nodes) joinable += n.status == cluster::NodeStatus::kJoinable;
  if (a.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& n : *nodes) {
      nlohmann::ordered_json j;
      j["name"] = n.announcement.name;
      j["status"] = cluster::to_string(n.status);
      if (!n.why.empty()) j["why"] = n.why;
      j["version"] = n.announcement.version;
      j["fingerprint"] = n.announcement.fingerprint;
      j["memory_bytes"] = n.announcement.memory_bytes;
      j["probe_port"] = n.announcement.probe_port;
      j["seen_at"] = n.seen_at;
      auto ifs = nlohmann::ordered_json::array();
      for (const auto& i : n.announcement.ifaces) {
        nlohmann::ordered_json ji{{"name", i.name}, {"kind", cluster::to_string(i.kind)}, {"ipv4", i.ipv4},
                                  {"prefix_len", i.prefix_len}};
        if (!i.rdma_device.empty()) ji["rdma_device"] = i.rdma_device;
        ifs.push_back(std::move(ji));
      }
      j["interfaces"] = std::move(ifs);
      out.push_back(std::move(j));
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%-20s %-15s %-8s %9s  %s\n", "NAME", "STATUS", "VERSION", "MEMORY", "INTERFACES");
    for (const auto& n : *nodes) {
      std::printf("%-20s %-15s %-8s %5.1f GiB  %s\n", n.announcement.name.c_str(),
                  std::string(cluster::to_string(n.status)).c_str(), n.announcement.version.c_str(),
                  static_cast<double>(n.announcement.memory_bytes) / (1ull << 30), ifaces_text(n.announcement).c_str());
      if (!n.why.empty()) std::printf("%-20s   not joined: %s\n", "", n.why.c_str());
    }
    std::printf("%d node(s) found, %d of this cluster (secret %s)\n", static_cast<int>(nodes->size()), joinable,
                secret->fingerprint().c_str());
  }
  if (a.expect > 0 && joinable < a.expect)
    return fail(1, "expected " + std::to_string(a.expect) + " nodes of this cluster, found " + std::to_string(joinable) +
                       " within " + std::to_string(a.timeout_ms) + " ms");
  return 0;
}

Registrar discover_cmd{{"discover", "list the lattice nodes on this machine's networks (mDNS), or announce this one",
                        [](CLI::App& app) {
                          auto a = std::make_shared<DiscoverArgs>();
                          app.add_option("--timeout-ms", a->timeout_ms, "browse at most this long")->capture_default_str();
                          app.add_option("--expect", a->expect, "stop as soon as N nodes of this cluster are found (exit 1 if fewer)");
                          app.add_flag("--json", a->json, "print the nodes as JSON");
                          app.add_option("--secret-file", a->secret_file,
                                         "cluster secret (else LATTICE_SECRET / LATTICE_SECRET_FILE); only its fingerprint is announced");
                          app.add_flag("--announce", a->announce,
                                       "be a node: announce this machine and answer link probes until SIGINT/SIGTERM");
                          app.add_option("--name", a->name, "--announce: the node's name (default: the host name)");
                          app.add_option("--port", a->port, "--announce: the probe port (default: any free port)");
                          app.add_option("--for-s", a->for_s, "--announce: stop after this many seconds (0: at a signal)");
                          return [a] { return run_discover(*a); };
                        }}};

}  // namespace
}  // namespace lattice::cli
