// `lattice launch` and `lattice ping` as processes: joins over shm and tcp, output prefixes,
// exit codes, a dying rank stopping the rest, Ctrl-C, a stranger refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "lattice/cluster/launcher.h"
#include "proc_testlib.h"

namespace lattice::cluster::testing {
namespace {

constexpr auto kRun = std::chrono::seconds(90);  // liveness bound on a loaded machine

bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

// Rank 0's matrix rows: every off-diagonal cell of both matrices must be a positive number.
void expect_full_matrices(const std::string& out, int n) {
  int rows = 0;
  std::istringstream in(out);
  std::string line;
  std::regex row_re("^\\[rank 0\\] +r([0-9]+) ([-0-9. ]+)$");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row_re)) continue;
    int i = std::stoi(m[1]);
    std::istringstream cells(m[2].str());
    std::vector<std::string> c;
    for (std::string w; cells >> w;) c.push_back(w);
    ASSERT_EQ(static_cast<int>(c.size()), n) << line;
    for (int j = 0; j < n; ++j) {
      if (i == j) {
        EXPECT_EQ(c[j], "-") << line;
      } else {
        EXPECT_GT(std::atof(c[j].c_str()), 0.0) << "pair " << i << "," << j << ": " << line;
      }
    }
    ++rows;
  }
  EXPECT_EQ(rows, 2 * n) << out;  // latency and bandwidth
}

class LaunchPing : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(LaunchPing, EveryPairMeasuredAsProcesses) {
  auto [provider, n] = GetParam();
  auto r = run_cmd({lattice_bin(), "launch", "-n", std::to_string(n), "--provider", provider, "--", lattice_bin(), "ping",
                    "--iters", "30", "--bw-seconds", "0.01"},
                   {}, Deadline::after(kRun));
  ASSERT_TRUE(exited_with(r.status, 0)) << "status " << r.status << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] lattice ping: " + std::to_string(n) + " rank(s), epoch 0, provider " + provider),
            std::string::npos)
      << r.out;
  expect_full_matrices(r.out, n);
}

INSTANTIATE_TEST_SUITE_P(Process, LaunchPing,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(1, 2, 3, 5)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

TEST(LaunchProcess, PlainPingIsAOneCellMatrix) {
  auto r = run_cmd({lattice_bin(), "ping"}, {{"LATTICE_RANK", ""}, {"LATTICE_WORLD_SIZE", ""}}, Deadline::after(kRun));
  ASSERT_TRUE(exited_with(r.status, 0)) << r.out << r.err;
  EXPECT_NE(r.out.find("1 rank(s)"), std::string::npos) << r.out;
}

// An emulated link is a provider like the others: given as --provider, or exported as
// LATTICE_PROVIDER (which launch sets for its ranks, so it must not replace the user's).
TEST(LaunchProcess, EmulatedVerbsByFlagOrEnvironment) {
  const std::vector<std::string> ping = {lattice_bin(), "ping", "--iters", "30", "--bw-seconds", "0.01"};
  std::vector<std::string> by_flag = {lattice_bin(), "launch", "-n", "2", "--provider", "verbs-emu://apple-tb5", "--"};
  by_flag.insert(by_flag.end(), ping.begin(), ping.end());
  std::vector<std::string> by_env = {lattice_bin(), "launch", "-n", "2", "--"};
  by_env.insert(by_env.end(), ping.begin(), ping.end());
  for (const auto& [argv, env] : {std::pair{by_flag, std::vector<std::pair<std::string, std::string>>{}},
                                  std::pair{by_env, std::vector<std::pair<std::string, std::string>>{
                                                        {"LATTICE_PROVIDER", "verbs-emu://apple-tb5"}}}}) {
    auto r = run_cmd(argv, env, Deadline::after(kRun));
    ASSERT_TRUE(exited_with(r.status, 0)) << "status " << r.status << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("[rank 0] lattice ping: 2 rank(s), epoch 0, provider verbs-emu"), std::string::npos) << r.out;
    expect_full_matrices(r.out, 2);
  }
}

TEST(LaunchProcess, AnUnknownProviderIsRefusedByName) {
  auto r = run_cmd({lattice_bin(), "launch", "-n", "2", "--provider", "infiniband", "--", "true"}, {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 2)) << r.status;
  EXPECT_NE(r.err.find("provider 'infiniband'"), std::string::npos) << r.err;
  r = run_cmd({lattice_bin(), "launch", "-n", "2", "--", "true"}, {{"LATTICE_PROVIDER", "ucx"}}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 2)) << r.status;
  EXPECT_NE(r.err.find("provider 'ucx' (from LATTICE_PROVIDER)"), std::string::npos) << r.err;
}

TEST(LaunchProcess, OutputIsPrefixedWithTheRank) {
  auto r = run_cmd({lattice_bin(), "launch", "-n", "2", "--", "sh", "-c",
                    "echo out $LATTICE_RANK of $LATTICE_WORLD_SIZE; echo err $LATTICE_RANK >&2; printf partial"},
                   {}, Deadline::after(kRun));
  ASSERT_TRUE(exited_with(r.status, 0)) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] out 0 of 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] out 1 of 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] partial\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[rank 1] err 1\n"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("[rank 0] err"), std::string::npos);
}

TEST(Bind, BlocksOfCpusPerRankOrNone) {
  const std::vector<int> four = {0, 1, 2, 3}, odd = {2, 5, 7};
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(bind_cpus(2, Bind::kAuto, four), (V{{0, 1}, {2, 3}}));
  EXPECT_EQ(bind_cpus(3, Bind::kAuto, four), (V{{0}, {1}, {2}})) << "equal blocks, the remainder unused";
  EXPECT_EQ(bind_cpus(3, Bind::kCores, odd), (V{{2}, {5}, {7}}));
  EXPECT_EQ(bind_cpus(5, Bind::kAuto, four), V(5)) << "more ranks than CPUs: auto leaves them unpinned";
  EXPECT_EQ(bind_cpus(5, Bind::kCores, odd), (V{{2}, {5}, {7}, {2}, {5}}));
  EXPECT_EQ(bind_cpus(2, Bind::kNone, four), V(2));
  EXPECT_EQ(bind_cpus(2, Bind::kCores, {}), V(2));
  EXPECT_TRUE(parse_bind("auto").ok() && parse_bind("cores").ok() && parse_bind("none").ok());
  EXPECT_EQ(parse_bind("core").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(usable_cpus().empty());
}

// Each rank reports the CPUs the kernel lets it run on; they must be the ones bind_cpus chose.
TEST(LaunchProcess, RanksArePinnedAsBindSays) {
  const std::vector<int> cpus = usable_cpus();
  for (const char* policy : {"auto", "cores", "none"}) {
    const int n = 2;
    auto r = run_cmd({lattice_bin(), "launch", "-n", std::to_string(n), "--bind", policy, "--", "sh", "-c",
                      "echo cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)"},
                     {}, Deadline::after(kRun));
    ASSERT_TRUE(exited_with(r.status, 0)) << r.out << r.err;
    const auto want = bind_cpus(n, *parse_bind(policy), cpus);
    for (int rank = 0; rank < n; ++rank) {
      std::vector<int> got;
      std::smatch m;
      std::regex re("\\[rank " + std::to_string(rank) + "\\] cpus ([-0-9,]+)");
      ASSERT_TRUE(std::regex_search(r.out, m, re)) << r.out;
      std::istringstream list(m[1].str());
      for (std::string part; std::getline(list, part, ',');) {
        const auto dash = part.find('-');
        const int lo = std::stoi(part.substr(0, dash)), hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
        for (int c = lo; c <= hi; ++c) got.push_back(c);
      }
      EXPECT_EQ(got, want[size_t(rank)].empty() ? cpus : want[size_t(rank)]) << policy << " rank " << rank;
    }
  }
}

// A keep-going job leaves its ranks unpinned under auto (survivors take the cores lost ranks
// leave), as `launch --keep-going` does; asked for cores it pins them.
TEST(LocalJobProcess, PinsAsLaunchBindAutoDoes) {
  const auto cpus = usable_cpus();
  LocalJob job;
  job.world_size = 2;
  EXPECT_EQ(local_job_cpus(job), bind_cpus(2, Bind::kAuto, cpus));
  job.launch.keep_going = true;
  EXPECT_EQ(local_job_cpus(job), bind_cpus(2, Bind::kNone, cpus));
  job.bind = Bind::kCores;
  EXPECT_EQ(local_job_cpus(job), bind_cpus(2, Bind::kCores, cpus));
}

// run_local_job in-process: every rank gets the whole environment contract (its rank, the
// world, one coordinator, the provider, a secret) and the CPUs local_job_cpus chose.
TEST(LocalJobProcess, RanksGetTheEnvironmentContractAndTheirCpus) {
  char path[] = "/tmp/lattice-local-job-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  LocalJob job;
  job.world_size = 2;
  job.provider = "tcp";
  job.argv = {"sh", "-c",
              "echo rank=$LATTICE_RANK world=$LATTICE_WORLD_SIZE coord=$LATTICE_COORDINATOR "
              "provider=$LATTICE_PROVIDER secret=${#LATTICE_SECRET} local=$LATTICE_LOCAL_CPUS "
              "cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"};
  job.launch.out_fd = fd;
  job.launch.prefix = false;
  auto code = run_local_job(job);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  ASSERT_TRUE(code.ok()) << code.status().to_string();
  EXPECT_EQ(*code, 0) << text.str();
  const auto want = local_job_cpus(job);
  std::string coordinator;
  for (int rank = 0; rank < 2; ++rank) {
    std::smatch m;
    // local: the job's CPUs, which a pinned rank no longer sees.
    std::regex re("rank=" + std::to_string(rank) + " world=2 coord=(127\\.0\\.0\\.1:[0-9]+) provider=tcp secret=64 local=" +
                  std::to_string(usable_cpus().size()) + " cpus=([-0-9,]+)");
    std::string out = text.str();
    ASSERT_TRUE(std::regex_search(out, m, re)) << out;
    if (coordinator.empty()) coordinator = m[1];
    EXPECT_EQ(m[1], coordinator) << "one coordinator for the job";
    if (want[size_t(rank)].size() == 1) {
      EXPECT_EQ(m[2].str(), std::to_string(want[size_t(rank)][0])) << "rank " << rank;
    }
  }
}

TEST(LocalJob, BadJobsAreRefusedBeforeAnythingStarts) {
  LocalJob job;
  job.argv = {"true"};
  EXPECT_EQ(run_local_job(job).status().code(), ErrorCode::kInvalidArgument) << "no ranks";
  job.world_size = 2;
  job.secret_file = "/nonexistent/lattice.secret";
  auto r = run_local_job(job);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/lattice.secret"), std::string::npos) << r.status().to_string();
  job.secret_file.clear();
  job.argv.clear();
  EXPECT_EQ(run_local_job(job).status().code(), ErrorCode::kInvalidArgument) << "no command";
}

TEST(LaunchProcess, AFailingRankStopsTheOthersAndIsNamed) {
  auto start = Clock::now();
  auto r = run_cmd({lattice_bin(), "launch", "-n", "3", "--grace-ms", "500", "--", "sh", "-c",
                    "if [ \"$LATTICE_RANK\" = 1 ]; then exit 3; fi; exec sleep 60"},
                   {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 3)) << r.status << r.err;
  EXPECT_NE(r.err.find("rank 1 exited with status 3"), std::string::npos) << r.err;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(50)) << "the sleeping ranks were not stopped";
}

TEST(LaunchProcess, AKilledRankIsNamedWithItsSignal) {
  auto r = run_cmd({lattice_bin(), "launch", "-n", "3", "--grace-ms", "500", "--", "sh", "-c",
                    "if [ \"$LATTICE_RANK\" = 2 ]; then kill -9 $$; fi; exec sleep 60"},
                   {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 128 + 9)) << r.status << r.err;
  EXPECT_NE(r.err.find("rank 2 was killed by signal 9"), std::string::npos) << r.err;
}

// Orders the ranks of a shell job without sleeping: rank `first` records its pid in a file of
// `dir` before it acts (exits, kills or stops itself), and `after` (shell) runs in the other
// ranks once that rank is gone (or stopped, with `stopped`): the event the test is about
// happens first on any machine, loaded or not. Each wait is bounded (30 s) by the launcher's
// own run deadline kRun and by the loop count.
std::string after_rank(const std::filesystem::path& dir, int first, const std::string& acts, const std::string& after,
                       bool stopped = false) {
  const std::string f = (dir / ("pid." + std::to_string(first))).string();
  const std::string gone = stopped ? "[ \"$(ps -o stat= -p $p 2>/dev/null | cut -c1)\" = T ]"
                                   : "! kill -0 $p 2>/dev/null";
  return "if [ \"$LATTICE_RANK\" = " + std::to_string(first) + " ]; then echo $$ > " + f + ".tmp && mv " + f + ".tmp " +
         f + "; " + acts + "; fi; i=0; while [ $i -lt 600 ]; do if [ -s " + f + " ]; then p=$(cat " + f + "); if " +
         gone + "; then break; fi; fi; i=$((i+1)); sleep 0.05; done; " + after;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char t[] = "/tmp/lattice-launch-order-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

TEST(LaunchProcess, KeepGoingReportsALostRankAndLetsTheOthersFinish) {
  TempDir dir;
  auto r = run_cmd({lattice_bin(), "launch", "-n", "3", "--keep-going", "--grace-ms", "500", "--", "sh", "-c",
                    after_rank(dir.path, 2, "kill -9 $$", "echo done $LATTICE_RANK")},
                   {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 0)) << r.status << r.err;
  EXPECT_NE(r.err.find("rank 2 was killed by signal 9 (Killed); the others carry on"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("[rank 0] done 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[rank 1] done 1"), std::string::npos) << r.out;
  // No rank completed: the first failure's status.
  TempDir dir0;
  auto r0 = run_cmd({lattice_bin(), "launch", "-n", "2", "--keep-going", "--", "sh", "-c",
                     after_rank(dir0.path, 0, "exit 4", "exit 5")},
                    {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r0.status, 4)) << r0.status << r0.err;
  EXPECT_NE(r0.err.find("no rank completed it"), std::string::npos) << r0.err;
}

TEST(LaunchProcess, KeepGoingKillsARankLeftStoppedOnceTheJobCompleted) {
  auto start = Clock::now();
  TempDir dir;
  auto r = run_cmd({lattice_bin(), "launch", "-n", "3", "--keep-going", "--", "sh", "-c",
                    after_rank(dir.path, 1, "kill -STOP $$", "echo done $LATTICE_RANK", /*stopped=*/true)},
                   {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 0)) << r.status << r.err;
  EXPECT_NE(r.err.find("rank 1 is stopped (SIGSTOP) and the job completed; killing it"), std::string::npos) << r.err;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

// Reads what a job wrote to a temporary file (out or err).
struct Captured {
  char path[64] = "/tmp/lattice-launch-capture-XXXXXX";
  int fd = ::mkstemp(path);
  std::string text() {
    std::ifstream in(path);
    std::stringstream t;
    t << in.rdbuf();
    return t.str();
  }
  ~Captured() {
    ::close(fd);
    std::filesystem::remove(path);
  }
};

TEST(LocalJobProcess, KeepGoingStopsARankStillRunningLongAfterTheJobCompleted) {
  // Rank 1 neither progresses nor exits (a rank cut off from the others would do the same):
  // it is stopped finish_within after rank 0 completed, long before its sleep would end.
  Captured out, err;
  LocalJob job;
  job.world_size = 2;
  job.argv = {"sh", "-c", "if [ \"$LATTICE_RANK\" = 1 ]; then sleep 30; fi; echo done $LATTICE_RANK"};
  job.launch.keep_going = true;
  job.launch.finish_within = std::chrono::milliseconds(500);
  job.launch.grace = std::chrono::milliseconds(300);
  job.launch.out_fd = out.fd;
  job.launch.err_fd = err.fd;
  auto code = run_local_job(job);
  ASSERT_TRUE(code.ok()) << code.status().to_string();
  EXPECT_EQ(*code, 0) << err.text();
  EXPECT_NE(out.text().find("[rank 0] done 0"), std::string::npos) << out.text();
  EXPECT_EQ(out.text().find("done 1"), std::string::npos) << out.text();
  EXPECT_NE(err.text().find("rank 1 is still running 500 ms after the job completed; stopping it"), std::string::npos)
      << err.text();
}

TEST(LocalJobProcess, TheJobDeadlineStopsEveryRankAndExits124) {
  Captured out, err;
  LocalJob job;
  job.world_size = 2;
  job.argv = {"sh", "-c", "sleep 30; echo done"};
  job.launch.deadline = std::chrono::milliseconds(500);
  job.launch.grace = std::chrono::milliseconds(300);
  job.launch.out_fd = out.fd;
  job.launch.err_fd = err.fd;
  auto code = run_local_job(job);
  ASSERT_TRUE(code.ok()) << code.status().to_string();
  EXPECT_EQ(*code, 124) << err.text();
  EXPECT_EQ(out.text().find("done"), std::string::npos) << out.text();
  EXPECT_NE(err.text().find("did not end within its deadline of 500 ms"), std::string::npos) << err.text();
}

TEST(LaunchProcess, EveryRankGetsTheLauncherAsItsLifeline) {
  // stdin is a pipe that stays open (no EOF) while the launcher lives, and the variable says so.
  auto r = run_cmd({lattice_bin(), "launch", "-n", "2", "--", "sh", "-c",
                    "echo lifeline=$LATTICE_LIFELINE; [ -p /dev/stdin ] && echo pipe; "
                    "if timeout 0.3 cat >/dev/null; then echo eof; else echo open; fi"},
                   {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 0)) << r.status << r.err;
  for (int rank : {0, 1}) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    EXPECT_NE(r.out.find(p + "lifeline=stdin"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "pipe"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(p + "open"), std::string::npos) << r.out;
  }
}

TEST(LaunchProcess, AKilledLauncherTakesTheRanksItsRanksStartedWithIt) {
  // Each rank is a shell that starts `lattice ping` in the background: the ping is not the
  // launcher's child (PR_SET_PDEATHSIG cannot reach it), as a rank behind ssh or a wrapper is
  // not. SIGKILL of the launcher must still end it: its stdin lifeline closes.
  auto dir = std::filesystem::temp_directory_path() / ("lattice_lifeline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // (A background job's stdin is /dev/null unless given explicitly: hand it the shell's via fd 3.)
  auto p = Proc::spawn({lattice_bin(), "launch", "-n", "2", "--provider", "tcp", "--", "sh", "-c",
                        "exec 3<&0; " + lattice_bin() + " ping --iters 20 --bw-seconds 60 <&3 3<&- & echo $! > " +
                            dir.string() + "/pid.$LATTICE_RANK; echo started; wait"},
                       {{"LATTICE_LOG", "info"}});
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(p->wait_line("started", Deadline::after(kRun)).ok()) << p->err();
  // Joined, with their links up, before the launcher goes (each rank logs its epoch).
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(p->wait_err_line("epoch 0: rank", Deadline::after(kRun)).ok()) << p->err();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::ifstream f(dir / ("pid." + std::to_string(r)));
    pid_t pid = 0;
    f >> pid;
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  p->signal(SIGKILL);
  ASSERT_TRUE(p->wait(Deadline::after(kRun)).ok());
  auto until = Deadline::after(std::chrono::seconds(20));
  auto alive = [&] {
    int n = 0;
    for (pid_t pid : pids) {  // a zombie (exited, not yet reaped by its new parent) is gone
      std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
      std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t close = text.rfind(')');
      n += close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
    }
    return n;
  };
  while (alive() > 0 && !until.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(alive(), 0) << "a rank's child outlived the launcher";
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  std::filesystem::remove_all(dir);
}

TEST(LaunchProcess, ARankIgnoringSigtermIsKilledAfterTheGrace) {
  // Rank 0 fails only once rank 1 ignores SIGTERM (it says so with a file), on any machine.
  TempDir dir;
  const std::string ready = (dir.path / "trapped").string();
  auto r = run_cmd({lattice_bin(), "launch", "-n", "2", "--grace-ms", "300", "--", "sh", "-c",
                    "if [ \"$LATTICE_RANK\" = 0 ]; then i=0; while [ ! -e " + ready +
                        " ] && [ $i -lt 600 ]; do i=$((i+1)); sleep 0.05; done; exit 1; fi; trap '' TERM; touch " +
                        ready + "; while :; do sleep 0.1; done"},
                   {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 1)) << r.status << r.err;
  EXPECT_NE(r.err.find("grace period over"), std::string::npos) << r.err;
}

// The pids the ranks of a shell job wrote to dir/pid.RANK; shorter when one is missing.
std::vector<pid_t> rank_pids(const std::filesystem::path& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::ifstream f(dir / ("pid." + std::to_string(r)));
    pid_t pid = 0;
    if (!(f >> pid) || pid <= 0) break;
    pids.push_back(pid);
  }
  return pids;
}

TEST(LaunchProcess, CtrlCStopsEveryRank) {
  auto dir = std::filesystem::temp_directory_path() / ("lattice_launch_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto p = Proc::spawn({lattice_bin(), "launch", "-n", "3", "--grace-ms", "500", "--", "sh", "-c",
                        "echo $$ > " + dir.string() + "/pid.$LATTICE_RANK; echo started; exec sleep 60"},
                       {});
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p->wait_line("started", Deadline::after(kRun)).ok());
  const std::vector<pid_t> pids = rank_pids(dir, 3);
  ASSERT_EQ(pids.size(), 3u);
  p->signal(SIGINT);
  auto st = p->wait(Deadline::after(kRun));
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_TRUE(exited_with(*st, 130)) << *st << p->err();
  EXPECT_NE(p->err().find("stopped by Interrupt"), std::string::npos) << p->err();
  for (pid_t pid : pids) EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << "rank pid " << pid << " survived";
  std::filesystem::remove_all(dir);
}

// ^Z and fg: the terminal's SIGTSTP reaches the launcher alone (the ranks have process groups
// of their own); the whole job stops with it and resumes with it, and finishes.
TEST(LaunchProcess, CtrlZStopsEveryRankAndFgResumesThem) {
  auto dir = std::filesystem::temp_directory_path() / ("lattice_launch_tstp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string go = (dir / "go").string();
  // Each rank waits (bounded) for the test's go, then ends: a stopped rank cannot see it.
  auto p = Proc::spawn({lattice_bin(), "launch", "-n", "2", "--grace-ms", "500", "--", "sh", "-c",
                        "echo $$ > " + dir.string() + "/pid.$LATTICE_RANK; echo started; i=0; while [ ! -e " + go +
                            " ] && [ $i -lt 1200 ]; do i=$((i+1)); sleep 0.05; done; echo finished"},
                       {});
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(p->wait_line("started", Deadline::after(kRun)).ok());
  const std::vector<pid_t> pids = rank_pids(dir, 2);
  ASSERT_EQ(pids.size(), 2u);
  auto state = [](pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t close = all.rfind(')');
    return close == std::string::npos || close + 2 >= all.size() ? '?' : all[close + 2];
  };
  // A rank's shell is stopped ('T'), or waits in vfork ('D') for a child the stop caught before its
  // exec: dash vforks `sleep`, and the parent stays in uninterruptible wait until the child execs
  // (CI at 2a69813 saw "ranks TD" for the whole 20 s).
  auto stopped = [&](pid_t pid) {
    const char s = state(pid);
    if (s != 'D') return s == 'T';
    std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
    for (pid_t child; f >> child;)
      if (state(child) == 'T') return true;
    return false;
  };
  auto all_stopped = [&] {
    for (int i = 0; i < 400; ++i) {  // up to 20 s
      bool every = state(p->pid()) == 'T';
      for (pid_t pid : pids) every = every && stopped(pid);
      if (every) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  p->signal(SIGTSTP);
  EXPECT_TRUE(all_stopped()) << "launcher " << state(p->pid()) << ", ranks " << state(pids[0]) << state(pids[1]);
  std::ofstream(go) << "go";  // seen only once they run again
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(stopped(pids[0])) << state(pids[0]);
  p->signal(SIGCONT);
  auto st = p->wait(Deadline::after(kRun));
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_TRUE(exited_with(*st, 0)) << *st << p->err();
  size_t finished = 0;
  for (size_t at = 0; (at = p->out().find("finished", at)) != std::string::npos; ++at) ++finished;
  EXPECT_EQ(finished, 2u) << p->out();
  std::filesystem::remove_all(dir);
}

TEST(LaunchProcess, NoCommandOrBothModesIsAUsageError) {
  auto r = run_cmd({lattice_bin(), "launch", "-n", "2"}, {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 2)) << r.err;
  r = run_cmd({lattice_bin(), "launch", "--", "true"}, {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 2)) << r.err;
}

// `run --nodes` bounds its own wait: a rank that stops (SIGSTOP, injected after 2 tokens) and
// is not declared dead (the failure timeout is two minutes here) holds the job, until the job
// deadline stops every rank and run exits 124, as timeout(1) does.
TEST(RunNodesProcess, TheJobDeadlineStopsARankThatNeitherProgressesNorExits) {
  TempDir dir;
  const std::string model = (dir.path / "m.gguf").string();
  auto mk = run_cmd({lattice_bin(), "make-model", "-o", model, "--dim", "64", "--layers", "2", "--heads", "4",
                     "--vocab", "512"},
                    {}, Deadline::after(kRun));
  ASSERT_TRUE(exited_with(mk.status, 0)) << mk.err;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cmd({lattice_bin(), "run", "-m", model, "-p", "hello", "-n", "64", "--ignore-eos", "--nodes", "2",
                    "--inject-fault", "1@2:stop", "--deadline-s", "2"},
                   {{"LATTICE_FAILURE_TIMEOUT_MS", "120000"}}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r.status, 124)) << r.status << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find("deadline"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  auto bad = run_cmd({lattice_bin(), "run", "-m", model, "-p", "hi", "--nodes", "2", "--deadline-s", "-1"}, {}, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(bad.status, 1) || exited_with(bad.status, 2)) << bad.status << bad.err;
  EXPECT_NE(bad.err.find("--deadline-s"), std::string::npos) << bad.err;
}

// A process holding another secret is refused, both sides say so, and the real rank 1 can
// still take its place.
TEST(LaunchProcess, AStrangerWithAnotherSecretIsRefusedOnBothSides) {
  const std::string a(64, 'a'), b(64, 'b');
  // Rank 0 hosts the coordinator on port 0 and says which port it got (no port is picked,
  // released and raced for); the others are told it.
  Env common{{"LATTICE_WORLD_SIZE", "2"}, {"LATTICE_PROVIDER", "shm"}, {"LATTICE_SECRET_FILE", ""}};
  Env e0 = common, e1 = common, stranger = common;
  e0.insert(e0.end(), {{"LATTICE_RANK", "0"}, {"LATTICE_SECRET", a}, {"LATTICE_COORDINATOR", "127.0.0.1:0"}});
  auto r0 = Proc::spawn({lattice_bin(), "ping", "--iters", "20", "--bw-seconds", "0.01", "--size", "4K"}, e0);
  ASSERT_TRUE(r0.ok());
  auto line = r0->wait_err_line("coordinator listening on port", Deadline::after(kRun));
  ASSERT_TRUE(line.ok()) << line.status().to_string();
  const std::string coord = "127.0.0.1:" + line->substr(line->rfind(' ') + 1);
  e1.insert(e1.end(), {{"LATTICE_RANK", "1"}, {"LATTICE_SECRET", a}, {"LATTICE_COORDINATOR", coord}});
  stranger.insert(stranger.end(), {{"LATTICE_RANK", "1"}, {"LATTICE_SECRET", b}, {"LATTICE_COORDINATOR", coord}});
  auto s = run_cmd({lattice_bin(), "ping", "--timeout", "30"}, stranger, Deadline::after(kRun));
  EXPECT_TRUE(exited_with(s.status, 1)) << s.status << s.err;
  EXPECT_NE(s.err.find("refused us"), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("auth-failed"), std::string::npos) << s.err;
  auto r1 = run_cmd({lattice_bin(), "ping", "--iters", "20", "--bw-seconds", "0.01", "--size", "4K"}, e1,
                    Deadline::after(kRun));
  EXPECT_TRUE(exited_with(r1.status, 0)) << r1.err;
  auto st = r0->wait(Deadline::after(kRun));
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(exited_with(*st, 0)) << r0->err();
  EXPECT_NE(r0->out().find("2 rank(s)"), std::string::npos) << r0->out();
  EXPECT_NE(r0->err().find("does not hold this cluster's secret"), std::string::npos) << r0->err();
}

// A local job's coordinator takes the failure timeout the ranks inherit from the launcher's
// environment (LATTICE_FAILURE_TIMEOUT_MS): `bench fabric` runs itself as a job of two ranks, and
// a rank stopped for 1.5 s (a host that stalls) is waited for, not evicted after the
// coordinator's default 750 ms while the ranks were told 15 s (CI's run of session 29 lost an
// emulated-link test so).
TEST(LaunchProcess, ALocalJobsCoordinatorTakesTheFailureTimeoutTheRanksInherit) {
  auto p = Proc::spawn({lattice_bin(), "bench", "fabric", "--provider", "shm", "-b", "8", "-e", "8", "-n", "100",
                        "--bw-time", "5", "--timeout", "60"},
                       {{"LATTICE_FAILURE_TIMEOUT_MS", "15000"}});
  ASSERT_TRUE(p.ok());
  auto children = [&] {
    std::vector<pid_t> kids;
    std::ifstream f("/proc/" + std::to_string(p->pid()) + "/task/" + std::to_string(p->pid()) + "/children");
    for (pid_t child; f >> child;) kids.push_back(child);
    return kids;
  };
  std::vector<pid_t> ranks;
  for (int i = 0; i < 200 && ranks.size() < 2; ++i) {  // up to 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ranks = children();
  }
  ASSERT_EQ(ranks.size(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // into the 5 s bandwidth phase
  ASSERT_EQ(::kill(ranks[1], SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(::kill(ranks[1], SIGCONT), 0);
  auto st = p->wait(Deadline::after(kRun));
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_TRUE(exited_with(*st, 0)) << *st << p->out() << p->err();
  EXPECT_EQ(p->err().find("declared dead"), std::string::npos) << p->err();
}

}  // namespace
}  // namespace lattice::cluster::testing
