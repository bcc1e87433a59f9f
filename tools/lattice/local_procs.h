// Local processes and the out-of-band channel the CLI's benchmarks and demo use to start
// peers and carry their fabric address blobs.
//
// OobChannel: length-prefixed messages over one stream file descriptor (a socketpair to a
// child, or a TCP connection for `bench fabric --listen/--peer`). Every read and write has a
// Deadline; EOF is reported as kPeerLost. Messages are at most kMaxOobMessage bytes; a longer
// length prefix is rejected as kCorrupt (the bytes come from outside the process).
// Not thread-safe; one user at a time.
//
// LocalProcs: spawns children of /proc/self/exe with the given arguments, each connected to
// the parent by a socketpair that the child sees as file descriptor kChildOobFd. A child dies
// with its parent (PR_SET_PDEATHSIG). The destructor kills (SIGKILL) and reaps every child
// still running, so no zombies are left; wait_all() reaps them with a deadline and says which
// one failed and how.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::cli {

inline constexpr int kChildOobFd = 3;
inline constexpr size_t kMaxOobMessage = 1u << 20;

class OobChannel {
 public:
  OobChannel() = default;
  explicit OobChannel(int fd) : fd_(fd) {}  // takes ownership
  ~OobChannel();
  OobChannel(OobChannel&& o) noexcept : fd_(o.fd_), peer_(o.peer_) { o.fd_ = -1; }
  OobChannel& operator=(OobChannel&& o) noexcept;
  OobChannel(const OobChannel&) = delete;
  OobChannel& operator=(const OobChannel&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Rank of the other end, only for error messages.
  void set_peer(int rank) { peer_ = rank; }

  Status send(std::string_view message, Deadline deadline);
  Result<std::string> recv(Deadline deadline);
  // True if a message (or EOF) is ready to read now; never blocks.
  bool readable();
  void close();

 private:
  Status write_all(const void* data, size_t n, Deadline deadline);
  Status read_all(void* data, size_t n, Deadline deadline);
  int fd_ = -1;
  int peer_ = Status::kNoPeer;
};

// A tiny TCP rendezvous for two hosts: listen on a port and accept one connection, or
// connect to host:port (retrying until the deadline while the server is not up yet).
Result<OobChannel> oob_listen_accept(uint16_t port, Deadline deadline, std::string* peer_name = nullptr);
Result<OobChannel> oob_connect(const std::string& host_port, Deadline deadline);

class LocalProcs {
 public:
  LocalProcs() = default;
  ~LocalProcs();
  LocalProcs(const LocalProcs&) = delete;
  LocalProcs& operator=(const LocalProcs&) = delete;

  // Starts /proc/self/exe with `args` (argv[1..]); `rank` only names it in messages.
  // Returns the parent's end of its channel (owned by the caller) .
  Result<OobChannel*> spawn(int rank, const std::vector<std::string>& args);

  // Reaps every child, waiting until the deadline; any child that exited non-zero or died by
  // a signal is reported ("rank 2 killed by signal 9"). Children still running at the deadline
  // are killed and reported as timed out.
  Status wait_all(Deadline deadline);
  // How child `rank` ended, if it already did (reaps it); empty if still running or unknown.
  std::string exit_reason(int rank);
  void kill_all();

  OobChannel* channel(int rank);
  size_t size() const { return children_.size(); }

 private:
  struct Child {
    int rank;
    pid_t pid;
    OobChannel oob;
    bool reaped = false;
    int wait_status = 0;
  };
  static std::string describe(const Child& c);
  std::vector<std::unique_ptr<Child>> children_;
};

}  // namespace lattice::cli
