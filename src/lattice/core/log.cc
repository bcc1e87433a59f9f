#include "lattice/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace lattice::log {

namespace {
std::shared_ptr<spdlog::logger> make_logger() {
  auto l = spdlog::stderr_color_mt("lattice");
  l->set_pattern("%^%L%$ %H:%M:%S.%e lattice: %v");
  const char* env = std::getenv("LATTICE_LOG");
  l->set_level(env ? spdlog::level::from_str(env) : spdlog::level::warn);
  return l;
}
}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = make_logger();
  return *l;
}

void set_rank(int rank) {
  logger().set_pattern("%^%L%$ %H:%M:%S.%e [rank " + std::to_string(rank) + "] %v");
}

void set_level(std::string_view level) { logger().set_level(spdlog::level::from_str(std::string(level))); }

}  // namespace lattice::log
