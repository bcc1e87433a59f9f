// Cluster checks: they join every node's facts. On one node they see that node alone (its end
// of each cable, its version and model); under launch every rank's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "lattice/coll/plan/ring_route.h"
#include "lattice/doctor/checks.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/parallel/plan.h"

namespace lattice::doctor::detail {
namespace {

std::string host_name(const Context& c, int host) {
  return c.topology && host >= 0 && host < static_cast<int>(c.topology->hosts.size())
             ? c.topology->hosts[static_cast<size_t>(host)].name
             : "host" + std::to_string(host);
}
std::string ssh_name(const Context& c, const NodeFacts& f) {
  if (c.topology && f.host_index >= 0) {
    const auto& h = c.topology->hosts[static_cast<size_t>(f.host_index)];
    return h.ssh.empty() ? h.name : h.ssh;
  }
  return f.host;
}

// The value most nodes have (ties: the lowest rank's), the reference the others differ from.
template <class Get>
std::string majority(const std::vector<NodeFacts>& facts, Get get) {
  std::map<std::string, int> n;
  for (const auto& f : facts) ++n[get(f)];
  std::string best = get(facts.front());
  for (const auto& f : facts)
    if (n[get(f)] > n[best]) best = get(f);
  return best;
}

std::vector<Check> version(const Context& c, const std::vector<NodeFacts>& facts) {
  const std::string ref = majority(facts, [](const NodeFacts& f) { return f.version; });
  std::string odd, fix;
  for (const auto& f : facts)
    if (f.version != ref) {
      odd += (odd.empty() ? "" : "; ") + f.host + " runs " + f.version;
      fix += (fix.empty() ? "" : "; ") + std::string("on ") + f.host + ": build lattice at " +
             ref.substr(ref.find(' ') + 1) + " (git checkout <commit> && cmake --build build --target lattice)";
    }
  if (odd.empty())
    return {make("version", "lattice version", Level::kOk, ref + " on " + std::to_string(facts.size()) + " node(s)")};
  return {make("version", "lattice version", Level::kFail, odd + " (the others " + ref + ")", fix)};
}

std::vector<Check> model(const Context& c, const std::vector<NodeFacts>& facts) {
  if (c.options.model.empty()) return {make("model", "same model file", Level::kOk, "no -m model given")};
  std::string missing, fix;
  for (const auto& f : facts)
    if (!f.model_error.empty()) {
      missing += (missing.empty() ? "" : "; ") + f.host + ": " + f.model_error;
      fix += (fix.empty() ? "" : "; ") + std::string("copy the model to ") + ssh_name(c, f) + ":" + f.model_path +
             " (scp -p FILE " + ssh_name(c, f) + ":" + f.model_path + ")";
    }
  if (!missing.empty()) return {make("model", "same model file", Level::kFail, missing, fix)};
  const std::string ref = majority(facts, [](const NodeFacts& f) { return f.model_hash; });
  const NodeFacts* holder = nullptr;
  for (const auto& f : facts)
    if (f.model_hash == ref && !holder) holder = &f;
  std::string odd;
  for (const auto& f : facts)
    if (f.model_hash != ref) {
      odd += (odd.empty() ? "" : "; ") + f.host + " has " + f.model_hash;
      fix += (fix.empty() ? "" : "; ") + std::string("scp ") + ssh_name(c, *holder) + ":" + holder->model_path + " " +
             ssh_name(c, f) + ":" + f.model_path;
    }
  if (odd.empty())
    return {make("model", "same model file", Level::kOk,
                 ref + " (header and tensor table) on " + std::to_string(facts.size()) + " node(s)")};
  return {make("model", "same model file", Level::kFail,
               "another model (header and tensor table differ): " + odd + " (the others " + ref + ")", fix)};
}

// Offsets from rank 0's clock: every rank read its wall clock when the same allgather
// broadcast arrived; the readings differ by the skew plus the broadcast's delivery spread,
// which is below one round through the coordinator (the bound reported).
std::vector<Check> clock(const Context& c, const std::vector<NodeFacts>& facts) {
  if (facts.size() < 2 || facts[0].clock_us.empty())
    return {make("clock", "clock skew", Level::kOk, "one node: nothing to compare")};
  const size_t k = facts[0].clock_us.size();
  double worst = 0, bound_ms = 0;
  std::string who;
  for (const auto& f : facts) {
    if (f.clock_us.size() != k) continue;
    std::vector<int64_t> d;
    for (size_t i = 0; i < k; ++i) d.push_back(f.clock_us[i] - facts[0].clock_us[i]);
    std::sort(d.begin(), d.end());
    const double off_ms = static_cast<double>(d[d.size() / 2]) / 1000.0;
    if (std::fabs(off_ms) > std::fabs(worst)) worst = off_ms, who = f.host;
    if (!f.round_us.empty())
      bound_ms = std::max(bound_ms, static_cast<double>(*std::min_element(f.round_us.begin(), f.round_us.end())) / 1000.0);
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "largest offset from %s: %+.3f ms%s%s (measured to +-%.3f ms)", facts[0].host.c_str(), worst,
                who.empty() ? "" : " on ", who.c_str(), bound_ms);
#ifdef __APPLE__
  const std::string fix = "sudo sntp -sS time.apple.com   (System Settings > General > Date & Time: set automatically)";
#else
  const std::string fix = "sudo timedatectl set-ntp true   (and check: timedatectl timesync-status)";
#endif
  const double beyond = std::fabs(worst) - bound_ms;
  if (beyond > 5000) return {make("clock", "clock skew", Level::kFail, buf, "on " + who + ": " + fix)};
  if (beyond > 50) return {make("clock", "clock skew", Level::kWarn, std::string(buf) + ": logs and traces misalign", "on " + who + ": " + fix)};
  return {make("clock", "clock skew", Level::kOk, buf)};
}

// One check per cable: each end's interface (up, carrier), a verbs end's device, and the
// probes over it (under launch: a TCP connect from each end to the other).
std::vector<Check> cables(const Context& c, const std::vector<NodeFacts>& facts) {
  std::vector<Check> out;
  if (!c.topology) return out;
  const auto& t = *c.topology;
  for (size_t l = 0; l < t.links.size(); ++l) {
    const auto& link = t.links[l];
    const std::string name = host_name(c, link.a) + "-" + host_name(c, link.b);
    const std::string id = "cable " + name;
    std::string seen, bad, fix;
    int looked = 0;
    auto add = [](std::string& s, const std::string& x, const char* sep) { s += (s.empty() ? "" : sep) + x; };
    for (const auto& f : facts) {
      for (const auto& e : f.ends) {
        if (e.link != static_cast<int>(l)) continue;
        ++looked;
        const std::string where = f.host + "'s end " + e.addr + (e.ifname.empty() ? "" : " (" + e.ifname + ")");
        if (!e.error.empty()) {
          add(bad, f.host + ": " + e.error, "; ");
          add(fix, "on " + f.host + ": give the cable's interface the address " + e.addr + " (or fix the topology file)", "; ");
        } else if (!e.up) {
          add(bad, where + " is DOWN", "; ");
          add(fix, "on " + f.host + ": " + fix_link_up(e.ifname), "; ");
        } else if (!e.running) {
          add(bad, where + " has no carrier", "; ");
          add(fix, "check the cable and the other end (" + host_name(c, e.peer) + ")", "; ");
        } else {
          add(seen, where + " up", ", ");
        }
        if (!e.device.empty() && e.device_state != "ACTIVE") {
          add(bad, f.host + "'s device " + e.device + " is " + e.device_state, "; ");
          add(fix, "on " + f.host + ": check the cable at " + e.device + " (ibv_devinfo -d " + e.device + ")", "; ");
        }
      }
      for (const auto& p : f.probes) {
        if (p.link != static_cast<int>(l)) continue;
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.2f ms", p.ms);
        if (p.ok) add(seen, f.host + " reached the other end in " + std::string(ms), ", ");
        else add(bad, "from " + f.host + ": " + p.error, "; ");
      }
    }
    if (!bad.empty() && fix.empty()) fix = "check the cable " + name + " and both ends' interfaces (ip -br link)";
    if (!bad.empty()) out.push_back(make("", "cable", Level::kFail, bad, fix));
    else if (looked == 0) out.push_back(make("", "cable", Level::kOk, "not this node's cable (run under lattice launch to check every cable)"));
    else out.push_back(make("", "cable", Level::kOk, seen + (c.launched ? "" : " (the other end is checked under lattice launch)")));
    out.back().id = id;
  }
  return out;
}

std::vector<Check> mtu_match(const Context& c, const std::vector<NodeFacts>& facts) {
  if (!c.topology) return {make("mtu-match", "MTU at both ends", Level::kOk, "no topology: no cables")};
  std::map<int, std::vector<std::pair<const NodeFacts*, const CableEnd*>>> by_link;
  for (const auto& f : facts)
    for (const auto& e : f.ends)
      if (e.mtu > 0) by_link[e.link].push_back({&f, &e});
  std::string bad, fix;
  int compared = 0;
  for (const auto& [link, ends] : by_link) {
    if (ends.size() < 2) continue;
    ++compared;
    const auto& [fa, ea] = ends[0];
    const auto& [fb, eb] = ends[1];
    if (ea->mtu == eb->mtu) continue;
    bad += (bad.empty() ? "" : "; ") + fa->host + " " + ea->ifname + " " + std::to_string(ea->mtu) + " but " + fb->host +
           " " + eb->ifname + " " + std::to_string(eb->mtu);
    const bool a_small = ea->mtu < eb->mtu;
    fix += (fix.empty() ? "" : "; ") + std::string("on ") + (a_small ? fa : fb)->host + ": " +
           fix_mtu((a_small ? ea : eb)->ifname, std::max(ea->mtu, eb->mtu));
  }
  if (!bad.empty()) return {make("mtu-match", "MTU at both ends", Level::kFail, bad, fix)};
  return {make("mtu-match", "MTU at both ends", Level::kOk,
               compared ? "equal at both ends of " + std::to_string(compared) + " cable(s)" : "no cable seen from both ends")};
}

// A full mesh where the plan needs one: tensor and expert parallel all-reduce every layer and
// run ring-only (slower) without one; pipeline stages only need a path. No route through
// every host at all: the collectives cannot run.
std::vector<Check> mesh(const Context& c, const std::vector<NodeFacts>&) {
  if (!c.topology) return {make("mesh", "mesh", Level::kOk, "no topology file: local ranks, every pair linked")};
  const auto& t = *c.topology;
  const auto cls = cluster::classify(t);
  if (cls.shape == cluster::Shape::kSingle || cls.shape == cluster::Shape::kFullMesh)
    return {make("mesh", "mesh", Level::kOk, std::string(cluster::to_string(cls.shape)) + " of " + std::to_string(t.hosts.size()) + " host(s)")};
  std::string missing;
  for (auto [a, b] : cls.missing_pairs) missing += (missing.empty() ? "" : ", ") + host_name(c, a) + "-" + host_name(c, b);
  const std::string fix = "cable " + missing + " and add the links to " + c.options.topology;
  auto linked = [&](int a, int b) { return cls.cables[static_cast<size_t>(a)][static_cast<size_t>(b)] > 0; };
  const auto route = coll::plan::find_route(static_cast<int>(t.hosts.size()), linked);
  if (route.order.empty())
    return {make("mesh", "mesh", Level::kFail, std::string(cluster::to_string(cls.shape)) + ": no route through every host", fix)};
  std::string mode = "unknown (no -m)";
  if (!c.options.model.empty()) {
    auto file = engine::GgufFile::open(c.options.model);
    std::vector<engine::parallel::NodeSpec> nodes;
    for (const auto& h : t.hosts)
      nodes.push_back({h.name, h.memory_gb ? static_cast<uint64_t>(*h.memory_gb * (1ull << 30)) : c.mem_available});
    if (file.ok())
      if (auto p = engine::parallel::plan_placement(**file, nodes, engine::parallel::ParallelMode::kAuto, 0); p.ok())
        mode = p->mode == engine::parallel::ParallelMode::kPipeline ? "pp" : p->mode == engine::parallel::ParallelMode::kExpert ? "ep" : "tp";
  }
  const std::string seen = std::string(cluster::to_string(cls.shape)) + ", missing " + missing + "; plan " + mode;
  if (mode == "pp") return {make("mesh", "mesh", Level::kOk, seen + ": pipeline stages need only the route")};
  return {make("mesh", "mesh", Level::kWarn, seen + ": all-reduces run ring-only without a full mesh", fix)};
}

}  // namespace

const std::vector<ClusterCheckEntry>& cluster_checks() {
  static const std::vector<ClusterCheckEntry> table = {
      {"version", version}, {"model", model}, {"clock", clock},
      {"cable", cables},    {"mtu-match", mtu_match}, {"mesh", mesh},
  };
  return table;
}

Report join(const Context& c, const std::vector<NodeFacts>& facts) {
  Report r;
  r.world_size = static_cast<int>(facts.size());
  for (const auto& f : facts) r.nodes.push_back({f.rank, f.host, f.checks});
  for (const auto& e : cluster_checks())
    for (auto& check : e.run(c, facts)) r.cluster.push_back(std::move(check));
  return r;
}

}  // namespace lattice::doctor::detail
