#include "lattice/engine/parallel/recovery.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace lattice::engine::parallel {

namespace {
using Clock = std::chrono::steady_clock;
}

bool recoverable(const Status& s) {
  return s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kTimeout || s.code() == ErrorCode::kCancelled;
}

Result<Progress> agree(const std::vector<Progress>& reports) {
  if (reports.empty()) return InvalidArgument("recovery: no progress reports");
  size_t best = 0;
  for (size_t i = 1; i < reports.size(); ++i)
    if (reports[i].tokens.size() > reports[best].tokens.size()) best = i;
  for (const Progress& p : reports)
    if (!std::equal(p.tokens.begin(), p.tokens.end(), reports[best].tokens.begin()))
      return Internal("recovery: survivors disagree on the tokens generated so far");
  return reports[best];
}

std::string encode_progress(const Progress& p) {
  return nlohmann::json{{"tokens", p.tokens}, {"draws", p.draws}}.dump();
}

Result<Progress> decode_progress(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array() || !j.contains("draws") ||
      !j["draws"].is_number_unsigned())
    return Corrupt("recovery: a survivor sent a malformed progress report");
  Progress p;
  p.draws = j["draws"].get<uint64_t>();
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer()) return Corrupt("recovery: a survivor sent a malformed progress report");
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > (1 << 24)) return Corrupt("recovery: a token id out of range in a progress report");
    p.tokens.push_back(static_cast<int32_t>(v));
  }
  return p;
}

Result<Shrunk> shrink_and_agree(cluster::Cluster& c, const std::vector<int>& members, const Progress& mine,
                                std::chrono::milliseconds timeout) {
  Shrunk out;
  const auto t0 = Clock::now();
  // Fencing: one bounded attempt. A rank cut off from the coordinator or its quorum fails
  // here and must stop; retrying would spin on a sticky peer-lost for ever.
  if (Status st = c.shrink(Deadline::after(timeout)); !st.ok())
    return Status(ErrorCode::kPeerLost,
                  "fenced: could not rejoin the survivors within " + std::to_string(timeout.count()) +
                      " ms (lost the coordinator or every peer?): " + st.to_string());
  out.shrink_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  auto all = c.allgather(encode_progress(mine), Deadline::after(timeout));
  if (!all.ok()) return all.status().with_context("recovery: agreeing on progress");
  std::vector<Progress> reports;
  for (const std::string& s : *all) {
    LATTICE_ASSIGN_OR_RETURN(auto p, decode_progress(s));
    reports.push_back(std::move(p));
  }
  LATTICE_ASSIGN_OR_RETURN(out.best, agree(reports));
  out.members = c.origins();
  for (int m : members)
    if (std::find(out.members.begin(), out.members.end(), m) == out.members.end()) out.lost.push_back(m);
  return out;
}

}  // namespace lattice::engine::parallel
