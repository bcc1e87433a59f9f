// `lattice doctor`: checks that a node (or a whole cluster) is set up to run lattice, each
// check answering ok, warn or fail, and every failure with the command that fixes it.
//
// On one node (run_single) every check looks at this machine only, and the pair checks at this
// machine's end of each cable. Under `lattice launch` (run_launched) every rank checks itself
// and its ends of the cables it shares, the ranks meet through the cluster's control plane
// (control_only: doctor opens no fabric endpoint, so it works when the links do not), probe
// each cable from both ends, measure clock skew, and every rank gets the same joined report
// (rank 0 prints it).
//
// The checks are one small function each, in two tables (checks.h): node checks (RDMA,
// devices, ports, GID 1, MTU, memory, thermal, power, secret) and cluster checks, which join
// the nodes' facts (version, model, clock, each cable, MTU at both ends, mesh). docs/DOCTOR.md
// lists them with what each looks at.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::doctor {

enum class Level : uint8_t { kOk, kWarn, kFail };
std::string_view to_string(Level level);

struct Check {
  std::string id;      // "verbs-ports", "cable h0-h2": stable, for scripts and tests
  std::string title;   // "verbs ports"
  Level level = Level::kOk;
  std::string detail;  // what was seen
  std::string fix;     // the command(s) that fix it; set for every fail (and some warns)
};

struct Options {
  std::string topology;     // --hostfile / --topology (empty: LATTICE_TOPOLOGY under launch, else none)
  std::string model;        // -m: a GGUF file to compare and plan memory for (empty: not checked)
  std::string secret_file;  // --secret-file (empty: LATTICE_SECRET_FILE / LATTICE_SECRET)
  std::string host;         // which topology host this is on one node (empty: found by address/name)
  bool emulated = false;    // count the emulated verbs devices (verbs-emu) as this machine's
  std::chrono::milliseconds probe_timeout{1500};  // one cable probe (TCP connect over the cable)
};

struct NodeReport {
  int rank = 0;
  std::string host;
  std::vector<Check> checks;
};

struct Report {
  int world_size = 1;
  std::vector<NodeReport> nodes;  // by rank
  std::vector<Check> cluster;     // joined checks (versions, model, clock, cables, mtu, mesh)

  int count(Level level) const;
  const Check* find(int rank, std::string_view id) const;  // rank -1: the cluster section
};

// This node only.
Result<Report> run_single(const Options& options);
// Under `lattice launch` (the rank environment of cluster/rank_env.h): joins the control plane,
// exchanges facts and probes. Every rank returns the same report. Fails only when the cluster
// cannot be joined.
Result<Report> run_launched(const Options& options, Deadline deadline);

std::string render_text(const Report& report);
nlohmann::json to_json(const Report& report);
nlohmann::json to_json(const Check& check);
Result<Check> check_from_json(const nlohmann::json& j);

}  // namespace lattice::doctor
