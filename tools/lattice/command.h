// The subcommand table of the `lattice` binary. Each cmd_*.cc file registers its commands
// with a static Registrar; main.cc builds the CLI11 app from the table, so adding a command
// touches one new file and nothing else.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace lattice::cli {

struct Command {
  std::string path;         // "run", or "bench fabric" for a nested subcommand
  std::string description;
  // Adds the options to `app`; returns the function to run when it was chosen (its exit code).
  std::function<std::function<int()>(CLI::App& app)> setup;
};

std::vector<Command>& command_table();

struct Registrar {
  explicit Registrar(Command c) { command_table().push_back(std::move(c)); }
};

}  // namespace lattice::cli
