// Running doctor: on one node, or every rank under launch (doctor.h). Under launch the ranks
// meet on the control plane only (no fabric endpoint, so broken cables cannot stop it):
//   1. each rank checks itself, opens a probe listener on its end of every cable, and the
//      ranks swap facts (one allgather);
//   2. five empty allgathers: each rank reads its wall clock as each broadcast arrives (skew);
//   3. each rank connects over every cable it shares to the peer's listener, and the ranks
//      swap the probes and clock readings (one allgather).
// Every rank then holds every rank's facts and builds the same report.
#include <chrono>

#include "lattice/cluster/rank_env.h"
#include "lattice/doctor/checks.h"
#include "lattice/doctor/control.h"
#include "lattice/doctor/net.h"

namespace lattice::doctor {
namespace {

using detail::NodeFacts;

constexpr int kClockRounds = 5;

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<std::vector<NodeFacts>> parse_all(const std::vector<std::string>& blobs) {
  std::vector<NodeFacts> out;
  for (const auto& b : blobs) {
    auto j = nlohmann::json::parse(b, nullptr, false);
    if (j.is_discarded()) return Corrupt("doctor: a rank sent facts that are not JSON");
    LATTICE_ASSIGN_OR_RETURN(auto f, detail::facts_from_json(j));
    out.push_back(std::move(f));
  }
  return out;
}

// The report of a rank that could not join: its own checks, and the join failure.
Report alone(const detail::Context& ctx, const NodeFacts& mine, const Status& why) {
  Report r = detail::join(ctx, {mine});
  r.cluster.push_back(detail::make("join", "join the cluster", Level::kFail, why.to_string(),
                                   "check that the coordinator (LATTICE_COORDINATOR) is reachable and that every rank "
                                   "has the same secret (lattice launch --secret-file F)"));
  return r;
}

}  // namespace

Result<Report> run_single(const Options& options) {
  LATTICE_ASSIGN_OR_RETURN(auto ctx, detail::make_context(options, 0, 1, false));
  return detail::join(ctx, {detail::local_facts(ctx)});
}

Result<Report> run_launched(const Options& options, Deadline deadline) {
  LATTICE_ASSIGN_OR_RETURN(auto env, cluster::RankEnv::from_env());
  if (!env.launched) return InvalidArgument("doctor: not under lattice launch (no LATTICE_RANK / LATTICE_WORLD_SIZE)");
  LATTICE_ASSIGN_OR_RETURN(auto ctx, detail::make_context(options, env.rank, env.world_size, true));
  NodeFacts mine = detail::local_facts(ctx);

  detail::ProbeListener listener;
  for (auto& e : mine.ends)
    if (e.error.empty())
      if (auto port = listener.listen_on(e.addr); port.ok()) e.port = *port;
  listener.start();

  auto cl = detail::join_control(options.secret_file, deadline);
  if (!cl.ok()) return alone(ctx, mine, cl.status());
  detail::Control& c = **cl;

  LATTICE_ASSIGN_OR_RETURN(auto blobs, c.allgather(detail::facts_to_json(mine).dump(), deadline));
  LATTICE_ASSIGN_OR_RETURN(auto facts, parse_all(blobs));
  if (static_cast<int>(facts.size()) != env.world_size) return Internal("doctor: allgather returned the wrong count");

  for (int k = 0; k < kClockRounds; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    LATTICE_RETURN_IF_ERROR(c.allgather("", deadline).status());
    mine.clock_us.push_back(wall_us());
    mine.round_us.push_back(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
  }

  for (const auto& e : mine.ends) {
    if (!e.error.empty()) continue;  // already a failure of this end
    const detail::CableEnd* other = nullptr;
    for (const auto& f : facts)
      if (f.host_index == e.peer)
        for (const auto& pe : f.ends)
          if (pe.link == e.link) other = &pe;
    if (other == nullptr || !other->error.empty()) continue;  // reported at that end
    if (other->port == 0) {
      mine.probes.push_back({e.link, false, 0, "the other end (" + other->addr + ") could not listen"});
      continue;
    }
    mine.probes.push_back(detail::probe_cable(e, other->addr, other->port, options.probe_timeout));
  }

  nlohmann::json second = {{"probes", detail::facts_to_json(mine)["probes"]},
                           {"clock_us", mine.clock_us},
                           {"round_us", mine.round_us}};
  LATTICE_ASSIGN_OR_RETURN(auto more, c.allgather(second.dump(), deadline));
  for (size_t r = 0; r < facts.size(); ++r) {
    auto j = nlohmann::json::parse(more[r], nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Corrupt("doctor: rank " + std::to_string(r) + " sent malformed probes");
    nlohmann::json whole = detail::facts_to_json(facts[r]);
    whole["probes"] = j.value("probes", nlohmann::json::array());
    whole["clock_us"] = j.value("clock_us", nlohmann::json::array());
    whole["round_us"] = j.value("round_us", nlohmann::json::array());
    LATTICE_ASSIGN_OR_RETURN(facts[r], detail::facts_from_json(whole));
  }
  return detail::join(ctx, facts);
}

}  // namespace lattice::doctor
