#include "engine_cli.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "lattice/core/build_info.h"  // generated: build_commit()
#include "lattice/engine/quant/matmul.h"

namespace lattice::cli {

std::string human_params(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f K", n / 1e3);
  return buf;
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  return buf;
}

Result<std::unique_ptr<engine::Model>> load_model_with_progress(const std::string& path, bool pack, bool quiet) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  const bool tty = isatty(STDERR_FILENO) == 1;
  const bool show = !quiet && (tty || (!ec && file_bytes >= (1ull << 30)));
  if (show) std::fprintf(stderr, "loading %s (%s)%s", path.c_str(), ec ? "?" : human_bytes(file_bytes).c_str(),
                         tty ? "\r" : "\n");
  engine::LoadOptions lo;
  lo.pack = pack;
  auto m = engine::Model::load(path, lo);
  if (!m.ok()) {
    if (show && tty) std::fprintf(stderr, "\n");
    return m.status();
  }
  (*m)->prefault([&](uint64_t done, uint64_t total) {
    if (!show || !tty || total == 0) return;
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\rloading %s [%.*s%*s] %3d%%", path.c_str(), fill, "##############################",
                 kWidth - fill, "", static_cast<int>(100 * done / total));
  });
  if (show) {
    std::fprintf(stderr, "%sloaded %s: %s %s, %s params, %s in %.2f s\n", tty ? "\r\033[K" : "", path.c_str(),
                 std::string((*m)->arch().name).c_str(), (*m)->type_name().c_str(),
                 human_params((*m)->n_params()).c_str(), human_bytes((*m)->weight_bytes()).c_str(),
                 std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return m;
}

std::string build_commit() {
  // Stamped at build time (lattice/core/build_info.h), whatever directory the caller stands in.
  return std::string(build_info::kCommit) + (build_info::kDirty ? "-dirty" : "");
}

std::string build_flags() {
  std::string s;
#if defined(__clang__)
  s = "clang " __clang_version__;
#elif defined(__GNUC__)
  s = "gcc " __VERSION__;
#endif
#if defined(__OPTIMIZE__)
  s += " optimized";
#endif
#if defined(NDEBUG)
  s += " NDEBUG";
#endif
#if defined(__SANITIZE_ADDRESS__)
  s += " asan";
#endif
  return s;
}

std::string build_isa() { return std::string(engine::isa_name(engine::active_isa())); }

}  // namespace lattice::cli
