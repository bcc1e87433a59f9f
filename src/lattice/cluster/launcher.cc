#include "lattice/cluster/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <memory>

#include "lattice/cluster/bootstrap.h"
#include "lattice/core/deadline.h"
#include "lattice/core/fd_io.h"

extern char** environ;

namespace lattice::cluster {

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

struct Stream {
  int fd = -1;         // our end of the pipe
  int out = 1;         // where its lines go
  std::string partial;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;
  bool evicted = false;  // keep_going: killed by us because it stayed stopped
  int status = 0;
  Stream streams[2];
};

// True when the process is stopped (state T or t in /proc/PID/stat).
bool process_stopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  const char* close = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  return close && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
}

// Our output (a terminal, a pipe): bounded, so a reader that stopped reading cannot hang the
// supervisor; what does not fit in time is dropped.
void write_fully(int fd, const std::string& s) { (void)write_all(fd, s.data(), s.size(), Deadline::after(10s)); }

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended (status " + std::to_string(status) + ")";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& o) : opt_(o) {}

  ~Supervisor() {
    // Whatever happens, nothing outlives us and nothing stays a zombie.
    for (auto& c : children_) {
      if (c->pid > 0 && !c->exited) {
        ::kill(-c->pid, SIGKILL);
        ::kill(c->pid, SIGKILL);
        int st;
        ::waitpid(c->pid, &st, 0);
      }
      for (auto& s : c->streams)
        if (s.fd >= 0) ::close(s.fd);
    }
    for (auto& [sig, old] : old_actions_) ::sigaction(sig, &old, nullptr);
    for (int fd : lifeline_)
      if (fd >= 0) ::close(fd);
    for (int& fd : g_signal_pipe)
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
  }

  Status install_signals() {
    if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0) return ErrnoError("pipe", errno);
    // Every rank's stdin: its write end is ours alone and never written (lifeline.h).
    if (::pipe2(lifeline_, O_CLOEXEC) < 0) return ErrnoError("pipe", errno);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGTSTP}) {
      struct sigaction old {};
      ::sigaction(sig, &sa, &old);
      old_actions_[sig] = old;
    }
    return Status::Ok();
  }

  Status spawn(const LaunchRank& r) {
    auto c = std::make_unique<Child>();
    c->rank = r.rank;
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) < 0) return ErrnoError("pipe", errno);
    if (::pipe2(err, O_CLOEXEC) < 0) {
      ::close(out[0]);
      ::close(out[1]);
      return ErrnoError("pipe", errno);
    }
    // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (auto& [k, v] : r.env) env[k] = v;
    env[env::kLifeline] = "stdin";
    std::vector<std::string> env_strings;
    for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = r.argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int cpu : r.cpus)
      if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) {
      for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
      return ErrnoError("fork", errno);
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      // Default dispositions and an empty mask: the rank must be stoppable by SIGTERM.
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(lifeline_[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      if (!r.cpus.empty() && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
        const char* msg = "lattice launch: could not pin the rank to its CPUs; it runs unpinned\n";
        (void)!::write(2, msg, std::strlen(msg));
      }
      ::execvpe(argv[0], argv.data(), envp.data());
      const char* msg = "lattice launch: cannot execute the command: ";
      (void)!::write(2, msg, std::strlen(msg));
      const char* why = std::strerror(errno);
      (void)!::write(2, why, std::strlen(why));
      (void)!::write(2, "\n", 1);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent: no race with our first kill(-pid)
    ::close(out[1]);
    ::close(err[1]);
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    c->pid = pid;
    c->streams[0] = {out[0], opt_.out_fd, {}};
    c->streams[1] = {err[0], opt_.err_fd, {}};
    children_.push_back(std::move(c));
    return Status::Ok();
  }

  void pump(Child& c, Stream& s, bool eof_flush) {
    char buf[8192];
    for (;;) {
      ssize_t r = ::read(s.fd, buf, sizeof(buf));
      if (r > 0) {
        s.partial.append(buf, static_cast<size_t>(r));
        emit_lines(c, s, false);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0 || (r < 0 && errno != EAGAIN)) {
        emit_lines(c, s, true);
        ::close(s.fd);
        s.fd = -1;
      }
      break;
    }
    if (eof_flush) emit_lines(c, s, true);
  }

  void emit_lines(Child& c, Stream& s, bool flush) {
    std::string prefix = opt_.prefix ? "[rank " + std::to_string(c.rank) + "] " : "";
    size_t start = 0;
    std::string out;
    for (;;) {
      size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      out += prefix;
      out.append(s.partial, start, nl - start + 1);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (flush && !s.partial.empty()) {
      out += prefix + s.partial + "\n";
      s.partial.clear();
    }
    if (!out.empty()) write_fully(s.out, out);
  }

  // ^Z and fg: the ranks run in process groups of their own (setpgid above), so the terminal's
  // SIGTSTP reaches only us. The whole job stops and resumes together (its failure detectors
  // forgive a stop every process saw), and the job deadline does not count the stopped time. A
  // rank stopped already (a fault injected, one the cluster evicted) stays as it was.
  void stop_job() {
    std::vector<pid_t> stopped;
    for (auto& c : children_)
      if (!c->exited && !process_stopped(c->pid) && ::kill(-c->pid, SIGSTOP) == 0) stopped.push_back(c->pid);
    const auto stopped_at = Clock::now();
    ::raise(SIGSTOP);  // here until SIGCONT (fg, bg)
    started_ += Clock::now() - stopped_at;
    for (pid_t pid : stopped) ::kill(-pid, SIGCONT);
  }

  void stop_all(int sig) {
    for (auto& c : children_)
      if (!c->exited) {
        ::kill(-c->pid, sig);
        if (sig == SIGTERM) ::kill(-c->pid, SIGCONT);  // a stopped rank acts on SIGTERM only once resumed
      }
  }

  void begin_stop(const std::string& why) {
    if (stopping_) return;
    stopping_ = true;
    stop_started_ = Clock::now();
    int running = 0;
    for (auto& c : children_) running += !c->exited;
    if (running > 0)
      write_fully(opt_.err_fd, "lattice launch: " + why + "; stopping the other " + std::to_string(running) +
                                   " rank(s) (SIGTERM, then SIGKILL after " + std::to_string(opt_.grace.count()) +
                                   " ms)\n");
    stop_all(SIGTERM);
  }

  void reap() {
    for (auto& c : children_) {
      if (c->exited) continue;
      int st = 0;
      pid_t r = ::waitpid(c->pid, &st, WNOHANG);
      if (r != c->pid) continue;
      c->exited = true;
      c->status = st;
      bool failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (!failed) any_ok_ = true;
      if (c->evicted) continue;  // killed by us (keep_going), already reported
      if (failed && !stopping_ && opt_.keep_going) {
        write_fully(opt_.err_fd, "lattice launch: rank " + std::to_string(c->rank) + " " + describe(st) +
                                     "; the others carry on\n");
        if (lost_.empty()) lost_status_ = st;
        lost_.push_back(c->rank);
        continue;
      }
      if (failed && !stopping_ && first_failed_ < 0) {
        first_failed_ = c->rank;
        first_status_ = st;
        begin_stop("rank " + std::to_string(c->rank) + " " + describe(st));
      }
    }
  }

  int run() {
    started_ = Clock::now();
    auto drain_deadline = Deadline::never();
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, Stream*>> who;
      fds.push_back({g_signal_pipe[0], POLLIN, 0});
      who.emplace_back(nullptr, nullptr);
      for (auto& c : children_)
        for (auto& s : c->streams)
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            who.emplace_back(c.get(), &s);
          }
      ::poll(fds.data(), fds.size(), 100);
      if (fds[0].revents) {
        unsigned char sigs[64];
        ssize_t n = ::read(g_signal_pipe[0], sigs, sizeof(sigs));
        for (ssize_t i = 0; i < n; ++i) {
          int sig = sigs[i];
          if (sig == SIGCHLD) continue;
          if (sig == SIGTSTP) {
            stop_job();
            continue;
          }
          if (interrupted_ == 0) interrupted_ = sig;
          begin_stop(std::string("interrupted by ") + strsignal(sig));
        }
      }
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) pump(*who[i].first, *who[i].second, false);
      reap();
      // keep_going: once a rank completed, a rank left stopped (SIGSTOP: the cluster evicted it)
      // can never end on its own: stop it.
      if (opt_.keep_going && any_ok_ && !stopping_) {
        for (auto& c : children_)
          if (!c->exited && process_stopped(c->pid)) {
            write_fully(opt_.err_fd, "lattice launch: rank " + std::to_string(c->rank) +
                                         " is stopped (SIGSTOP) and the job completed; killing it\n");
            ::kill(-c->pid, SIGKILL);
            c->evicted = true;
          }
      }
      const auto now = Clock::now();
      if (!stopping_ && opt_.deadline.count() > 0 && now - started_ > opt_.deadline) {
        timed_out_ = true;
        begin_stop("the job's deadline of " + std::to_string(opt_.deadline.count()) + " ms passed");
      }
      // keep_going: a rank still running well after another completed the job cannot take part
      // any more (it was cut off, fenced, or hangs): stop it, politely first.
      if (opt_.keep_going && any_ok_ && !stopping_) {
        if (first_ok_at_ == Clock::time_point{}) first_ok_at_ = now;
        const bool term = now - first_ok_at_ > opt_.finish_within;
        const bool kill = now - first_ok_at_ > opt_.finish_within + opt_.grace;
        for (auto& c : children_) {
          if (c->exited || !(term || kill)) continue;
          if (!c->evicted) {
            write_fully(opt_.err_fd, "lattice launch: rank " + std::to_string(c->rank) + " is still running " +
                                         std::to_string(opt_.finish_within.count()) +
                                         " ms after the job completed; stopping it\n");
            c->evicted = true;
            ::kill(-c->pid, SIGTERM);
            ::kill(-c->pid, SIGCONT);
          } else if (kill) {
            ::kill(-c->pid, SIGKILL);
          }
        }
      }
      if (stopping_ && !killed_ && Clock::now() - stop_started_ > opt_.grace) {
        killed_ = true;
        bool any = false;
        for (auto& c : children_) any |= !c->exited;
        if (any) write_fully(opt_.err_fd, "lattice launch: grace period over; killing the remaining ranks (SIGKILL)\n");
        stop_all(SIGKILL);
      }
      bool all_exited = true;
      for (auto& c : children_) all_exited &= c->exited;
      if (all_exited) {
        // A grandchild may hold a pipe open: give the output a bounded time to end.
        if (drain_deadline.is_never()) drain_deadline = Deadline::after(1s);
        bool open = false;
        for (auto& c : children_)
          for (auto& s : c->streams) open |= s.fd >= 0;
        if (!open || drain_deadline.expired()) break;
      }
    }
    for (auto& c : children_)
      for (auto& s : c->streams)
        if (s.fd >= 0) {
          emit_lines(*c, s, true);
          ::close(s.fd);
          s.fd = -1;
        }
    if (timed_out_) {
      write_fully(opt_.err_fd, "lattice launch: failed: the job did not end within its deadline of " +
                                   std::to_string(opt_.deadline.count()) + " ms\n");
      return 124;
    }
    if (first_failed_ >= 0) {
      write_fully(opt_.err_fd, "lattice launch: failed: rank " + std::to_string(first_failed_) + " " +
                                   describe(first_status_) + "\n");
      return exit_code_of(first_status_);
    }
    if (opt_.keep_going && !interrupted_ && first_failed_ < 0) {
      if (!lost_.empty()) {
        std::string list;
        for (int r : lost_) list += (list.empty() ? "" : ", ") + std::to_string(r);
        write_fully(opt_.err_fd, "lattice launch: rank(s) " + list + " failed during the run; " +
                                     (any_ok_ ? "the others completed it" : "no rank completed it") + "\n");
      }
      return any_ok_ ? 0 : exit_code_of(lost_status_);
    }
    if (interrupted_) {
      write_fully(opt_.err_fd, std::string("lattice launch: stopped by ") + strsignal(interrupted_) + "\n");
      return 128 + interrupted_;
    }
    return 0;
  }

 private:
  const LaunchOptions& opt_;
  std::vector<std::unique_ptr<Child>> children_;
  std::map<int, struct sigaction> old_actions_;
  int lifeline_[2] = {-1, -1};
  bool stopping_ = false;
  bool killed_ = false;
  bool timed_out_ = false;
  Clock::time_point started_{};
  Clock::time_point first_ok_at_{};  // keep_going: when the first rank completed
  Clock::time_point stop_started_{};
  int first_failed_ = -1;
  int first_status_ = 0;
  int interrupted_ = 0;
  bool any_ok_ = false;    // some rank exited 0
  int lost_status_ = 0;    // keep_going: how the first failed rank ended
  std::vector<int> lost_;  // keep_going: ranks that failed while the others carried on
};

}  // namespace

Result<int> run_ranks(const LaunchOptions& options) {
  if (options.ranks.empty()) return InvalidArgument("no ranks to launch");
  for (const auto& r : options.ranks)
    if (r.argv.empty()) return InvalidArgument("rank " + std::to_string(r.rank) + " has no command");
  Supervisor sup(options);
  LATTICE_RETURN_IF_ERROR(sup.install_signals());
  for (const auto& r : options.ranks) {
    Status s = sup.spawn(r);
    if (!s.ok()) return s.with_context("starting rank " + std::to_string(r.rank));  // ~Supervisor kills the rest
  }
  return sup.run();
}

std::vector<std::vector<int>> local_job_cpus(const LocalJob& job) {
  const Bind policy = job.launch.keep_going && job.bind == Bind::kAuto ? Bind::kNone : job.bind;
  return bind_cpus(job.world_size, policy, usable_cpus());
}

Result<int> run_local_job(LocalJob job) {
  if (job.world_size < 1 || job.world_size > 256)
    return InvalidArgument("a local job has 1..256 ranks, not " + std::to_string(job.world_size));
  if (job.argv.empty()) return InvalidArgument("a local job needs a command");
  // Timings the job does not set come from the launcher's environment, which the ranks inherit:
  // the coordinator hosted here takes them too, so both sides declare a silent rank dead after
  // the same time (before, `bench fabric` under LATTICE_FAILURE_TIMEOUT_MS had ranks waiting 10 s
  // on a peer the coordinator evicted after its default 750 ms).
  if (!job.failure_timeout_ms) {
    LATTICE_ASSIGN_OR_RETURN(job.failure_timeout_ms, env_int(env::kFailureTimeoutMs));
  }
  if (!job.heartbeat_ms) {
    LATTICE_ASSIGN_OR_RETURN(job.heartbeat_ms, env_int(env::kHeartbeatMs));
  }
  if ((job.failure_timeout_ms && *job.failure_timeout_ms < 1) || (job.heartbeat_ms && *job.heartbeat_ms < 1))
    return InvalidArgument(std::string(env::kHeartbeatMs) + " and " + env::kFailureTimeoutMs + " are at least 1 ms");
  RankEnv e;
  e.world_size = job.world_size;
  e.provider = job.provider;
  e.insecure = job.insecure;
  e.heartbeat_ms = job.heartbeat_ms;
  e.failure_timeout_ms = job.failure_timeout_ms;
  std::optional<crypto::ClusterSecret> secret = job.secret;
  if (!job.secret_file.empty()) {
    // Refused here, once, rather than in every rank.
    LATTICE_ASSIGN_OR_RETURN(secret, crypto::load_secret_file(job.secret_file));
    char buf[PATH_MAX];
    e.secret_file = job.secret_file.front() != '/' && ::realpath(job.secret_file.c_str(), buf) ? buf : job.secret_file;
  } else {
    if (!secret) secret = crypto::ClusterSecret::generate();
    e.secret_hex = secret->to_hex();
  }
  e.coordinator = job.coordinator;
  // Without an address the launcher hosts the coordinator itself on a port the kernel picks
  // when it binds (no window in which another process can take a port we chose and let go).
  const bool host = job.host_coordinator || job.coordinator.empty();
  std::unique_ptr<Coordinator> hosted;  // outlives every rank: run_ranks returns after the last
  if (host) {
    CoordinatorOptions co;
    co.listen = e.coordinator.empty() ? "127.0.0.1:0" : e.coordinator;
    co.world_size = job.world_size;
    co.secret = *secret;
    co.insecure = job.insecure;
    if (job.heartbeat_ms) co.heartbeat_interval = std::chrono::milliseconds(*job.heartbeat_ms);
    if (job.failure_timeout_ms) co.failure_timeout = std::chrono::milliseconds(*job.failure_timeout_ms);
    auto started = Coordinator::start(co);
    if (!started.ok()) return started.status().with_context("starting the coordinator");
    hosted = std::move(*started);
    if (e.coordinator.empty()) e.coordinator = "127.0.0.1:" + std::to_string(hosted->port());
    e.external_coordinator = true;
  }
  const std::vector<std::vector<int>> cpus = local_job_cpus(job);
  // Pinned, a rank sees only its own CPU; what the ranks share is the job's (coll/comm.cc yields
  // early when more ranks than that share them).
  if (const size_t n = usable_cpus().size(); n > 0) e.local_cpus = static_cast<int>(n);
  LaunchOptions lo = job.launch;
  lo.ranks.clear();
  for (int r = 0; r < job.world_size; ++r) {
    e.rank = r;
    LaunchRank lr;
    lr.rank = r;
    lr.argv = job.argv;
    lr.env = job.env;
    for (auto& kv : e.to_env()) lr.env.push_back(std::move(kv));
    lr.cpus = cpus[size_t(r)];
    lo.ranks.push_back(std::move(lr));
  }
  return run_ranks(lo);
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = 0;
  return buf;
}

std::string shell_quote(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,@%+") ==
                           std::string::npos)
    return text;
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\'')
      out += "'\\''";
    else
      out += ch;
  }
  return out + "'";
}

std::string expand_remote(const std::string& templ, const std::string& host, const std::string& ssh, int rank,
                          const LaunchRank& what) {
  std::string cmd = "env";
  for (auto& [k, v] : what.env) cmd += " " + shell_quote(k + "=" + v);
  for (auto& a : what.argv) cmd += " " + shell_quote(a);
  std::string out;
  for (size_t i = 0; i < templ.size();) {
    auto try_sub = [&](const char* key, const std::string& value) {
      size_t n = std::strlen(key);
      if (templ.compare(i, n, key) == 0) {
        out += value;
        i += n;
        return true;
      }
      return false;
    };
    if (try_sub("{host}", shell_quote(host)) || try_sub("{ssh}", shell_quote(ssh)) ||
        try_sub("{rank}", std::to_string(rank)) || try_sub("{cmd}", cmd))
      continue;
    out += templ[i++];
  }
  return out;
}

Result<Bind> parse_bind(std::string_view text) {
  if (text == "auto") return Bind::kAuto;
  if (text == "cores") return Bind::kCores;
  if (text == "none") return Bind::kNone;
  return InvalidArgument("--bind must be auto, cores or none (got '" + std::string(text) + "')");
}

std::vector<int> usable_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<std::vector<int>> bind_cpus(int ranks, Bind bind, const std::vector<int>& cpus) {
  std::vector<std::vector<int>> out(size_t(std::max(ranks, 0)));
  const int n = static_cast<int>(cpus.size());
  if (bind == Bind::kNone || ranks < 1 || n == 0) return out;
  if (ranks <= n) {
    const int block = n / ranks;
    for (int r = 0; r < ranks; ++r)
      out[size_t(r)].assign(cpus.begin() + r * block, cpus.begin() + (r + 1) * block);
  } else if (bind == Bind::kCores) {
    for (int r = 0; r < ranks; ++r) out[size_t(r)] = {cpus[size_t(r % n)]};
  }
  return out;
}

Bind bind_when_fits(int ranks, int threads_per_rank) {
  // The CPUs this process may use (taskset, a cpuset), as bind_cpus places the ranks on.
  const unsigned cpus = static_cast<unsigned>(std::max<size_t>(1, usable_cpus().size()));
  return static_cast<unsigned>(std::max(1, ranks)) * static_cast<unsigned>(std::max(1, threads_per_rank)) <= cpus
             ? Bind::kCores
             : Bind::kNone;
}

Result<uint16_t> pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) < 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("bind 127.0.0.1:0", e);
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace lattice::cluster
