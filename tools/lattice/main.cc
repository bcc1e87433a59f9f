// lattice: the one command-line tool. Subcommands live in cmd_*.cc (see command.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include <exception>
#include <new>

#include "command.h"
#include "lattice/cluster/lifeline.h"
#include "lattice/core/log.h"

namespace lattice::cli {
std::vector<Command>& command_table() {
  static std::vector<Command> table;
  return table;
}
}  // namespace lattice::cli

namespace {

int run_main(int argc, char** argv) {
  using namespace lattice::cli;
  CLI::App app{"lattice: a few machines on a desk as one low-latency AI computer"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lattice 0.1.0");
  std::string log_level;
  // An unknown level is a usage error (exit 2), not silently "off" as spdlog would read it.
  app.add_option("--log", log_level, "log level: trace|debug|info|warn|error|critical|off (or LATTICE_LOG)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  auto& table = command_table();
  std::sort(table.begin(), table.end(), [](const Command& a, const Command& b) { return a.path < b.path; });
  std::map<std::string, CLI::App*> groups;  // "bench" -> its CLI::App
  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (auto& cmd : table) {
    CLI::App* parent = &app;
    std::string leaf = cmd.path;
    if (auto sp = cmd.path.find(' '); sp != std::string::npos) {
      std::string group = cmd.path.substr(0, sp);
      leaf = cmd.path.substr(sp + 1);
      auto it = groups.find(group);
      if (it == groups.end()) {
        CLI::App* g = app.add_subcommand(group, group + " commands");
        g->require_subcommand(1);
        it = groups.emplace(group, g).first;
      }
      parent = it->second;
    }
    CLI::App* sub = parent->add_subcommand(leaf, cmd.description);
    runners.emplace_back(sub, cmd.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help/--version exit 0; any bad flag or value exits 2 (the usual usage-error code).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!log_level.empty()) lattice::log::set_level(log_level);
  // A rank started by `lattice launch` stops when the launcher is gone (cluster/lifeline.h).
  lattice::cluster::watch_lifeline_from_env();
  for (auto& [sub, run] : runners)
    if (sub->parsed()) return run();
  std::fprintf(stderr, "lattice: no command given (try --help)\n");
  return 2;
}

}  // namespace

// Errors are Status values; an exception reaching here is a bug or an exhausted machine
// (std::bad_alloc): it ends the command with a clear line and exit 1, never an abort.
int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lattice: error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lattice: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "lattice: error: an unknown exception\n");
  }
  return 1;
}
