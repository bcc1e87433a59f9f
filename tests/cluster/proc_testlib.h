// Child processes for the cluster's process tests: spawn with extra environment, read their
// output line by line with deadlines, signal them; the destructor kills and reaps (no zombies).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::cluster::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

class Proc {
 public:
  // Starts argv (PATH lookup) with `env` added; stdout and stderr are captured separately.
  static Result<Proc> spawn(const std::vector<std::string>& argv, const Env& env);
  Proc() = default;
  Proc(Proc&& o) noexcept { *this = std::move(o); }
  Proc& operator=(Proc&& o) noexcept;
  ~Proc();

  pid_t pid() const { return pid_; }
  // Reads stdout until a line containing `needle` arrived; returns that line.
  Result<std::string> wait_line(const std::string& needle, Deadline deadline);
  // The same on stderr (log lines).
  Result<std::string> wait_err_line(const std::string& needle, Deadline deadline);
  // Waits for exit, collecting all output; kTimeout (and SIGKILL) at the deadline. Returns the
  // raw wait status.
  Result<int> wait(Deadline deadline);
  void signal(int sig);
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  void pump(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_, err_;
  size_t scanned_ = 0;      // wait_line: lines before this offset were already matched or skipped
  size_t scanned_err_ = 0;  // the same for wait_err_line
  Result<std::string> wait_in(bool err, const std::string& needle, Deadline deadline);
};

struct CmdResult {
  int status = -1;  // raw wait status
  std::string out, err;
};
// Runs a command to completion (killed at the deadline).
CmdResult run_cmd(const std::vector<std::string>& argv, const Env& env, Deadline deadline);

std::string lattice_bin();
std::string peer_bin();

}  // namespace lattice::cluster::testing
