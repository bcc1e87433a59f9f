// `lattice providers`: which fabric providers work on this machine right now.
#include <cstdio>

#include "command.h"
#include "lattice/fabric/fabric.h"

namespace lattice::cli {
namespace {
Registrar providers_cmd{{"providers", "list the fabric providers usable on this machine", [](CLI::App&) {
                           return [] {
                             for (const auto& p : fabric::available_providers()) std::printf("%s\n", p.c_str());
                             return 0;
                           };
                         }}};
}  // namespace
}  // namespace lattice::cli
