// What a node measures before any check runs (the Context), and the facts it shares with the
// other ranks (NodeFacts, as JSON over the control plane's allgather).
#include <sodium.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "lattice/core/build_info.h"
#include "lattice/doctor/checks.h"
#include "lattice/fabric/device_queues.h"
#include "lattice/engine/gguf/gguf.h"

#ifndef LATTICE_VERSION
#error "LATTICE_VERSION is set by src/lattice/doctor/CMakeLists.txt"
#endif

namespace lattice::doctor::detail {
namespace {

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// This machine's host in the topology: the one named --host, else the first whose address is
// on one of this machine's interfaces, else the one named like this machine.
int find_self(const cluster::Topology& t, const std::string& wanted) {
  if (!wanted.empty()) return t.find_host(wanted);
  for (size_t i = 0; i < t.hosts.size(); ++i) {
    CableEnd probe;
    probe.addr = host_of(t.hosts[i].address);
    look_at_interface(&probe);
    if (!probe.ifname.empty()) return static_cast<int>(i);
  }
  return t.find_host(hostname());
}

}  // namespace

Check make(const char* id, const char* title, Level level, std::string detail, std::string fix) {
  return Check{id, title, level, std::move(detail), std::move(fix)};
}

const std::vector<NodeCheckEntry>& node_checks() {
  static const std::vector<NodeCheckEntry> table = [] {
    std::vector<NodeCheckEntry> all = rdma_checks();
    for (const auto& e : host_checks()) all.push_back(e);
    return all;
  }();
  return table;
}

std::string lattice_version() {
  return std::string(LATTICE_VERSION) + " " + build_info::kCommit + (build_info::kDirty ? "-dirty" : "");
}

uint64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

Result<std::string> model_hash(const std::string& path) {
  engine::OpenOptions oo;
  oo.allow_unsupported_types = true;
  LATTICE_ASSIGN_OR_RETURN(auto file, engine::GgufFile::open(path, oo));
  if (sodium_init() < 0) return Internal("libsodium failed to initialize");
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, 16);
  for (size_t i = 0; i < file->n_files(); ++i) {
    // The header and tensor table end where the first tensor's data starts.
    uint64_t end = file->file_size(i);
    for (const auto& t : file->tensors())
      if (t.file_index == i) end = std::min(end, t.file_offset);
    std::ifstream in(file->path(i), std::ios::binary);
    std::string bytes(static_cast<size_t>(end), '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(end))) return IoError("cannot read " + file->path(i));
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  }
  unsigned char out[16];
  crypto_generichash_final(&st, out, sizeof out);
  char hex[33];
  sodium_bin2hex(hex, sizeof hex, out, sizeof out);
  return "blake2b:" + std::string(hex);
}

Result<Context> make_context(const Options& options, int rank, int world_size, bool launched) {
  Context c;
  c.options = options;
  c.rank = rank;
  c.world_size = world_size;
  c.launched = launched;
  std::string topo_path = options.topology;
  if (topo_path.empty() && launched)
    if (const char* t = std::getenv("LATTICE_TOPOLOGY")) topo_path = t;
  c.options.topology = topo_path;
  if (!topo_path.empty()) {
    LATTICE_ASSIGN_OR_RETURN(auto topo, cluster::load_topology(topo_path));
    c.topology = std::move(topo);
    if (launched) {
      for (size_t i = 0; i < c.topology->hosts.size(); ++i)
        if (c.topology->hosts[i].rank == rank) c.self = static_cast<int>(i);
    } else {
      c.self = find_self(*c.topology, options.host);
      if (c.self < 0 && !options.host.empty())
        return InvalidArgument("--host " + options.host + ": no such host in " + topo_path);
    }
  }
  if (c.topology && c.self >= 0) {
    const auto& t = *c.topology;
    for (size_t l = 0; l < t.links.size(); ++l) {
      const auto& link = t.links[l];
      if (link.a != c.self && link.b != c.self) continue;
      const bool a = link.a == c.self;
      CableEnd e;
      e.link = static_cast<int>(l);
      e.peer = a ? link.b : link.a;
      e.addr = a ? link.a_addr : link.b_addr;
      if (e.addr.empty()) e.addr = host_of(t.hosts[static_cast<size_t>(c.self)].address);
      if (link.provider == cluster::LinkProvider::kVerbs) {
        e.device = a ? link.a_device : link.b_device;
        c.named_devices.push_back(e.device);
        c.rdma_expected = true;
      }
      look_at_interface(&e);
      c.ends.push_back(std::move(e));
    }
  }
  c.rdma_expected = c.rdma_expected || options.emulated;
  c.devices = fabric::list_devices(options.emulated);
  c.queues = fabric::try_device_queues(options.emulated);
  // A verbs cable's end: its device's state (a missing device or no ACTIVE port is a cut).
  for (auto& e : c.ends) {
    if (e.device.empty()) continue;
    e.device_state = "missing";
    for (const auto& d : c.devices.devices)
      if (d.name == e.device) {
        e.device_state = "DOWN";
        for (const auto& p : d.ports)
          if (p.active) e.device_state = "ACTIVE";
      }
  }
  c.mem_available = mem_available_bytes();
  if (!options.secret_file.empty()) {
    c.secret_source = "file";
    c.secret_path = options.secret_file;
  } else if (const char* s = std::getenv("LATTICE_SECRET"); s && *s) {
    c.secret_source = "env";
  } else if (const char* f = std::getenv("LATTICE_SECRET_FILE"); f && *f) {
    c.secret_source = "file";
    c.secret_path = f;
  }
  return c;
}

NodeFacts local_facts(const Context& c) {
  NodeFacts f;
  f.rank = c.rank;
  f.host_index = c.self;
  f.host = c.topology && c.self >= 0 ? c.topology->hosts[static_cast<size_t>(c.self)].name
                                     : (c.launched ? "rank" + std::to_string(c.rank) : hostname());
  f.version = lattice_version();
  f.model_path = c.options.model;
  if (!c.options.model.empty()) {
    char real[PATH_MAX];
    if (::realpath(c.options.model.c_str(), real)) f.model_path = real;  // for the fix's scp
    auto h = model_hash(c.options.model);
    if (h.ok()) f.model_hash = *h;
    else f.model_error = h.status().to_string();
  }
  f.mem_available = c.mem_available;
  for (const auto& e : node_checks()) f.checks.push_back(e.run(c));
  f.ends = c.ends;
  return f;
}

// ---- JSON ----------------------------------------------------------------------------------

nlohmann::json facts_to_json(const NodeFacts& f) {
  nlohmann::json j = {{"rank", f.rank},          {"host_index", f.host_index}, {"host", f.host},
                      {"version", f.version},    {"model_path", f.model_path}, {"model_hash", f.model_hash},
                      {"model_error", f.model_error}, {"mem_available", f.mem_available},
                      {"clock_us", f.clock_us},  {"round_us", f.round_us}};
  j["checks"] = nlohmann::json::array();
  for (const auto& c : f.checks) j["checks"].push_back(to_json(c));
  j["ends"] = nlohmann::json::array();
  for (const auto& e : f.ends)
    j["ends"].push_back({{"link", e.link}, {"peer", e.peer}, {"addr", e.addr}, {"device", e.device}, {"device_state", e.device_state},
                         {"ifname", e.ifname}, {"up", e.up}, {"running", e.running}, {"mtu", e.mtu},
                         {"error", e.error}, {"port", e.port}});
  j["probes"] = nlohmann::json::array();
  for (const auto& p : f.probes) j["probes"].push_back({{"link", p.link}, {"ok", p.ok}, {"ms", p.ms}, {"error", p.error}});
  return j;
}

Result<NodeFacts> facts_from_json(const nlohmann::json& j) {
  try {
    NodeFacts f;
    f.rank = j.at("rank").get<int>();
    f.host_index = j.at("host_index").get<int>();
    f.host = j.at("host").get<std::string>();
    f.version = j.at("version").get<std::string>();
    f.model_path = j.at("model_path").get<std::string>();
    f.model_hash = j.at("model_hash").get<std::string>();
    f.model_error = j.at("model_error").get<std::string>();
    f.mem_available = j.at("mem_available").get<uint64_t>();
    f.clock_us = j.at("clock_us").get<std::vector<int64_t>>();
    f.round_us = j.at("round_us").get<std::vector<int64_t>>();
    for (const auto& c : j.at("checks")) {
      LATTICE_ASSIGN_OR_RETURN(auto check, check_from_json(c));
      f.checks.push_back(std::move(check));
    }
    for (const auto& e : j.at("ends")) {
      CableEnd x;
      x.link = e.at("link").get<int>();
      x.peer = e.at("peer").get<int>();
      x.addr = e.at("addr").get<std::string>();
      x.device = e.at("device").get<std::string>();
      x.device_state = e.at("device_state").get<std::string>();
      x.ifname = e.at("ifname").get<std::string>();
      x.up = e.at("up").get<bool>();
      x.running = e.at("running").get<bool>();
      x.mtu = e.at("mtu").get<int>();
      x.error = e.at("error").get<std::string>();
      x.port = e.at("port").get<uint16_t>();
      f.ends.push_back(std::move(x));
    }
    for (const auto& p : j.at("probes"))
      f.probes.push_back({p.at("link").get<int>(), p.at("ok").get<bool>(), p.at("ms").get<double>(),
                          p.at("error").get<std::string>()});
    return f;
  } catch (const nlohmann::json::exception& e) {
    return Corrupt(std::string("doctor: a rank's facts are malformed: ") + e.what());
  }
}

}  // namespace lattice::doctor::detail
