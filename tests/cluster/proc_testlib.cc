#include "proc_testlib.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

extern char** environ;

namespace lattice::cluster::testing {

std::string lattice_bin() { return std::string(LATTICE_BINARY_DIR) + "/lattice"; }
std::string peer_bin() { return std::string(LATTICE_BINARY_DIR) + "/tests/cluster_peer"; }

Result<Proc> Proc::spawn(const std::vector<std::string>& argv_in, const Env& env_in) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (auto& [k, v] : env_in) env[k] = v;
  std::vector<std::string> es;
  for (auto& [k, v] : env) es.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : es) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv_in;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) < 0 || ::pipe2(err, O_CLOEXEC) < 0) return ErrnoError("pipe", errno);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoError("fork", errno);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::fcntl(out[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err[0], F_SETFL, O_NONBLOCK);
  Proc p;
  p.pid_ = pid;
  p.out_fd_ = out[0];
  p.err_fd_ = err[0];
  return p;
}

Proc& Proc::operator=(Proc&& o) noexcept {
  std::swap(pid_, o.pid_);
  std::swap(out_fd_, o.out_fd_);
  std::swap(err_fd_, o.err_fd_);
  std::swap(reaped_, o.reaped_);
  std::swap(status_, o.status_);
  std::swap(out_, o.out_);
  std::swap(err_, o.err_);
  std::swap(scanned_, o.scanned_);
  std::swap(scanned_err_, o.scanned_err_);
  return *this;
}

Proc::~Proc() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Proc::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

void Proc::pump(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  ::poll(fds, 2, timeout_ms);
  char buf[4096];
  for (int i = 0; i < 2; ++i) {
    int& fd = i == 0 ? out_fd_ : err_fd_;
    std::string& dst = i == 0 ? out_ : err_;
    while (fd >= 0) {
      ssize_t r = ::read(fd, buf, sizeof(buf));
      if (r > 0) {
        dst.append(buf, static_cast<size_t>(r));
        continue;
      }
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(fd);
        fd = -1;
      }
      break;
    }
  }
}

Result<std::string> Proc::wait_line(const std::string& needle, Deadline deadline) {
  return wait_in(false, needle, deadline);
}

Result<std::string> Proc::wait_err_line(const std::string& needle, Deadline deadline) {
  return wait_in(true, needle, deadline);
}

Result<std::string> Proc::wait_in(bool err, const std::string& needle, Deadline deadline) {
  const std::string& text = err ? err_ : out_;
  size_t& scanned = err ? scanned_err_ : scanned_;
  for (;;) {
    for (;;) {
      size_t nl = text.find('\n', scanned);
      if (nl == std::string::npos) break;
      std::string line = text.substr(scanned, nl - scanned);
      scanned = nl + 1;
      if (line.find(needle) != std::string::npos) return line;
    }
    if (deadline.expired())
      return Timeout("no line with '" + needle + "' (stdout so far: " + out_ + " stderr: " + err_ + ")");
    if ((err ? err_fd_ : out_fd_) < 0) {
      // The stream closed: say how the process ended (a crash reads differently from an exit).
      std::string how = "still running";
      int st = 0;
      if (!reaped_ && ::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        status_ = st;
      }
      if (reaped_) {
        how = WIFSIGNALED(status_) ? "killed by signal " + std::to_string(WTERMSIG(status_))
                                   : "exit " + std::to_string(WEXITSTATUS(status_));
      }
      return PeerLost("process ended without '" + needle + "' (" + how + "; stdout: " + out_ + " stderr: " + err_ + ")");
    }
    pump(std::min(deadline.remaining_ms_for_poll(), 50));
  }
}

Result<int> Proc::wait(Deadline deadline) {
  while (!reaped_) {
    pump(std::min(deadline.remaining_ms_for_poll(), 20));
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = st;
      break;
    }
    if (deadline.expired()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      reaped_ = true;
      return Timeout("process still running at the deadline (stdout: " + out_ + " stderr: " + err_ + ")");
    }
  }
  auto until = Deadline::after(std::chrono::seconds(2));
  while ((out_fd_ >= 0 || err_fd_ >= 0) && !until.expired()) pump(20);
  return status_;
}

CmdResult run_cmd(const std::vector<std::string>& argv, const Env& env, Deadline deadline) {
  CmdResult r;
  auto p = Proc::spawn(argv, env);
  if (!p.ok()) {
    r.err = p.status().to_string();
    return r;
  }
  auto st = p->wait(deadline);
  r.status = st.ok() ? *st : -1;
  r.out = p->out();
  r.err = p->err() + (st.ok() ? "" : st.status().to_string());
  return r;
}

}  // namespace lattice::cluster::testing
