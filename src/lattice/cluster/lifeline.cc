#include "lattice/cluster/lifeline.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "lattice/cluster/rank_env.h"

namespace lattice::cluster {

namespace {

void watch(int fd) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0) {
      if (errno == EINTR) continue;
      return;  // cannot watch: leave the process alone
    }
    if (p.revents & POLLNVAL) return;
    char buf[256];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) continue;  // nobody should write here; ignore it
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    const char* rank = std::getenv(env::kRank);
    std::fflush(stdout);
    std::fprintf(stderr, "lattice: rank %s: the launcher that started this rank is gone (its lifeline, stdin, closed); stopping\n",
                 rank ? rank : "?");
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace

void watch_lifeline_from_env() {
  static std::atomic<bool> started{false};
  const char* v = std::getenv(env::kLifeline);
  if (!v || std::strcmp(v, "stdin") != 0) return;
  struct stat st {};
  if (::fstat(0, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return;
  if (started.exchange(true)) return;
  std::thread(watch, 0).detach();
}

}  // namespace lattice::cluster
