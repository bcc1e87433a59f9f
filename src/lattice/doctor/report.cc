// The report as text (one line a check, its fix below a failure or warning) and as JSON (the
// same structure: nodes by rank with their checks, then the cluster checks).
#include <cstdio>

#include "lattice/doctor/doctor.h"

namespace lattice::doctor {

std::string_view to_string(Level level) {
  switch (level) {
    case Level::kOk: return "ok";
    case Level::kWarn: return "warn";
    case Level::kFail: return "fail";
  }
  return "?";
}

int Report::count(Level level) const {
  int n = 0;
  for (const auto& node : nodes)
    for (const auto& c : node.checks) n += c.level == level;
  for (const auto& c : cluster) n += c.level == level;
  return n;
}

const Check* Report::find(int rank, std::string_view id) const {
  const std::vector<Check>* list = &cluster;
  if (rank >= 0) {
    list = nullptr;
    for (const auto& node : nodes)
      if (node.rank == rank) list = &node.checks;
    if (!list) return nullptr;
  }
  for (const auto& c : *list)
    if (c.id == id) return &c;
  return nullptr;
}

namespace {

void render_checks(std::string& out, const std::vector<Check>& checks) {
  for (const auto& c : checks) {
    char head[96];
    std::snprintf(head, sizeof head, "  %-5s %-16s ", std::string(to_string(c.level)).c_str(), c.id.c_str());
    out += head + c.detail + "\n";
    if (!c.fix.empty() && c.level != Level::kOk) out += "        fix: " + c.fix + "\n";
  }
}

}  // namespace

std::string render_text(const Report& r) {
  std::string out = "lattice doctor: " + std::to_string(r.world_size) + " node(s)\n";
  for (const auto& node : r.nodes) {
    out += "node " + node.host + " (rank " + std::to_string(node.rank) + ")\n";
    render_checks(out, node.checks);
  }
  out += "cluster\n";
  render_checks(out, r.cluster);
  const int fails = r.count(Level::kFail), warns = r.count(Level::kWarn);
  out += "summary: " + std::to_string(fails) + " failure(s), " + std::to_string(warns) + " warning(s)\n";
  return out;
}

nlohmann::json to_json(const Check& c) {
  return {{"id", c.id}, {"title", c.title}, {"status", std::string(to_string(c.level))}, {"detail", c.detail}, {"fix", c.fix}};
}

Result<Check> check_from_json(const nlohmann::json& j) {
  try {
    Check c;
    c.id = j.at("id").get<std::string>();
    c.title = j.at("title").get<std::string>();
    const std::string s = j.at("status").get<std::string>();
    if (s == "ok") c.level = Level::kOk;
    else if (s == "warn") c.level = Level::kWarn;
    else if (s == "fail") c.level = Level::kFail;
    else return Corrupt("doctor: unknown status '" + s + "'");
    c.detail = j.at("detail").get<std::string>();
    c.fix = j.at("fix").get<std::string>();
    return c;
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(std::string("doctor: malformed check: ") + e.what());
  }
}

nlohmann::json to_json(const Report& r) {
  nlohmann::json j = {{"world_size", r.world_size},
                      {"failures", r.count(Level::kFail)},
                      {"warnings", r.count(Level::kWarn)},
                      {"nodes", nlohmann::json::array()},
                      {"cluster", nlohmann::json::array()}};
  for (const auto& node : r.nodes) {
    nlohmann::json n = {{"rank", node.rank}, {"host", node.host}, {"checks", nlohmann::json::array()}};
    for (const auto& c : node.checks) n["checks"].push_back(to_json(c));
    j["nodes"].push_back(std::move(n));
  }
  for (const auto& c : r.cluster) j["cluster"].push_back(to_json(c));
  return j;
}

}  // namespace lattice::doctor
