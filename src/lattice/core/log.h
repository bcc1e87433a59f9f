// Logging: spdlog underneath (Debian's libspdlog-dev), with one process-wide logger that
// prefixes lines with "[rank N]" once the rank is known. Thread-safe.
//
//   LATTICE_LOG_INFO("joined epoch {} as rank {}", epoch, rank);
//
// The level comes from LATTICE_LOG (trace|debug|info|warn|error|off), default "warn" so
// benchmarks and tools print only their own output.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace lattice::log {

spdlog::logger& logger();
void set_rank(int rank);
void set_level(std::string_view level);

}  // namespace lattice::log

#define LATTICE_LOG_TRACE(...) ::lattice::log::logger().trace(__VA_ARGS__)
#define LATTICE_LOG_DEBUG(...) ::lattice::log::logger().debug(__VA_ARGS__)
#define LATTICE_LOG_INFO(...) ::lattice::log::logger().info(__VA_ARGS__)
#define LATTICE_LOG_WARN(...) ::lattice::log::logger().warn(__VA_ARGS__)
#define LATTICE_LOG_ERROR(...) ::lattice::log::logger().error(__VA_ARGS__)
