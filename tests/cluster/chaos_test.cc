// A chaos soak: long generations on 3 and 4 ranks in network namespaces (lattice launch
// --keep-going through `ip netns exec`), each hit by a random fault at a random time: kill,
// stop, stop-then-continue, cut, cut-then-heal, a slowed cable. Every run must end within its
// deadline with the single node's tokens (the survivors re-place a lost rank's work), or fail
// with an error that names what was lost. Counted: hangs (the deadline hit, or a process left
// in a namespace), crashes (a rank killed by a signal we did not send), wrong output, lost
// requests (a failure that says nothing). All must be 0.
//
// ChaosNetns runs a short soak in the default tests; ChaosNetnsSlow the whole one (label
// slow). LATTICE_CHAOS_SEED=N replays a soak; every trial is printed with its fault.
// Tampered frames are not injected here: the wire's tamper cases are the tcp and verbs
// fault tests' (a frame that fails its tag fails the endpoint with kAuthFailed).
#include <gtest/gtest.h>

#include "../require.h"
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "netns_testlib.h"
#include "proc_testlib.h"

namespace lattice::cluster::testing {
namespace {

constexpr auto kTrial = std::chrono::seconds(120);  // the test's own bound on one run
constexpr int kJobDeadlineS = 60;                   // launch --deadline-s: the stated deadline

enum class Fault { kKill, kStop, kStopCont, kCut, kCutHeal, kSlow };
const char* name(Fault f) {
  switch (f) {
    case Fault::kKill: return "kill";
    case Fault::kStop: return "stop";
    case Fault::kStopCont: return "stop-then-continue";
    case Fault::kCut: return "cut";
    case Fault::kCutHeal: return "cut-then-heal";
    case Fault::kSlow: return "slow-cable";
  }
  return "?";
}

struct Tally {
  int runs = 0, completed = 0, failed_clearly = 0, hangs = 0, crashes = 0, wrong = 0, lost = 0;
  std::string log;
};

std::vector<pid_t> pids_in(const Netns& net, int i) {
  auto r = run_cmd({"ip", "netns", "pids", net.name(i)}, {}, Deadline::after(std::chrono::seconds(30)));
  std::vector<pid_t> out;
  std::istringstream in(r.out);
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

void signal_all(const Netns& net, int i, int sig) {
  for (pid_t p : pids_in(net, i)) ::kill(p, sig);
}

// The ranks the run reports it lost and re-placed ("lost_ranks" in its JSON).
std::string lost_of(const std::string& out) {
  const size_t at = out.find("\"lost_ranks\":");
  return at == std::string::npos ? std::string("none") : out.substr(at + 13, out.find(']', at) - at - 12);
}

std::string tokens_of(const std::string& out) {
  const size_t at = out.find("\"tokens\":");
  return at == std::string::npos ? std::string() : out.substr(at, out.find(']', at) - at);
}

class Soak {
 public:
  Soak(int ranks, const std::string& tag) : net_(ranks, tag) {}
  Netns& net() { return net_; }

  // Files once per soak: topology (a full mesh of cables), secret, model, reference tokens.
  void prepare() {
    dir_ = std::filesystem::temp_directory_path() / ("lattice_chaos_" + std::to_string(::getpid()) + "_" +
                                                     std::to_string(net_.size()));
    std::filesystem::create_directories(dir_);
    topo_ = (dir_ / "mesh.json").string(), secret_ = (dir_ / "secret").string(), model_ = (dir_ / "m.gguf").string();
    std::vector<std::pair<int, int>> mesh;
    for (int a = 0; a < net_.size(); ++a)
      for (int b = a + 1; b < net_.size(); ++b) mesh.push_back({a, b});
    write_topology(topo_, net_, mesh);
    auto kg = run_cmd({lattice_bin(), "keygen", "-o", secret_}, {}, Deadline::after(kTrial));
    ASSERT_TRUE(WIFEXITED(kg.status) && WEXITSTATUS(kg.status) == 0) << kg.err;
    auto mk = run_cmd({lattice_bin(), "make-model", "-o", model_, "--dim", "256", "--layers", "4", "--heads", "8",
                       "--kv-heads", "4", "--ffn", "704", "--vocab", "1024", "--type", "f16"},
                      {}, Deadline::after(kTrial));
    ASSERT_TRUE(WIFEXITED(mk.status) && WEXITSTATUS(mk.status) == 0) << mk.err;
    std::vector<std::string> single = {lattice_bin()};
    single.insert(single.end(), gen_.begin(), gen_.end());
    single.insert(single.end(), {"-m", model_});
    auto ref = run_cmd(single, {}, Deadline::after(kTrial));
    ASSERT_TRUE(WIFEXITED(ref.status) && WEXITSTATUS(ref.status) == 0) << ref.err;
    ref_ = tokens_of(ref.out);
    ASSERT_FALSE(ref_.empty()) << ref.out;
  }

  ~Soak() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  // One run with one fault; returns its line for the log.
  void trial(std::mt19937& rng, Tally& t) {
    const int world = net_.size();
    const Fault fault = Fault(std::uniform_int_distribution<int>(0, 5)(rng));
    const bool transient = fault == Fault::kStopCont || fault == Fault::kCutHeal || fault == Fault::kSlow;
    // Rank 0 writes the answer, so a permanent fault goes to another rank; a short transient
    // one (under the failure timeout) may hit rank 0 too.
    const int hold_ms = std::uniform_int_distribution<int>(100, 1500)(rng);
    const int victim = transient && hold_ms <= 400 ? std::uniform_int_distribution<int>(0, world - 1)(rng)
                                                   : std::uniform_int_distribution<int>(1, world - 1)(rng);
    const int after_ms = std::uniform_int_distribution<int>(0, 800)(rng);
    const char* parallel = std::uniform_int_distribution<int>(0, 1)(rng) ? "tp" : "pp";

    std::vector<std::string> cmd = {lattice_bin(),   "launch", "--keep-going", "--no-prefix",  "--hostfile", topo_,
                                    "--secret-file", secret_,  "--remote",     "ip netns exec {host} {cmd}",
                                    "--deadline-s",  std::to_string(kJobDeadlineS), "--", lattice_bin()};
    cmd.insert(cmd.end(), gen_.begin(), gen_.end());
    cmd.insert(cmd.end(), {"-m", model_, "--parallel", parallel});
    const auto t0 = std::chrono::steady_clock::now();
    auto p = Proc::spawn(cmd, {{"LATTICE_LOG", "info"}});
    ASSERT_TRUE(p.ok());
    // The fault lands during the generation: every rank has joined (it logs its epoch), then a
    // random wait.
    bool joined = true;
    for (int i = 0; i < world && joined; ++i) joined = p->wait_err_line("epoch 0: rank", Deadline::after(kTrial)).ok();
    if (joined) {
      std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
      inject(fault, victim, hold_ms);
    }
    auto st = p->wait(Deadline::after(kTrial));
    const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Undo what a fault left (a stopped rank, a cut or slowed cable), then nothing may remain.
    net_.heal(victim);
    net_.unthrottle(victim);
    const std::string left = wait_until_empty(net_, std::chrono::seconds(20));
    for (int i = 0; i < world; ++i) signal_all(net_, i, SIGKILL);

    char line[256];
    std::snprintf(line, sizeof line, "%d ranks %s: %s rank %d after %d ms (hold %d ms), ended in %.1f s: ", world,
                  parallel, name(fault), victim, after_ms, hold_ms, took_s);
    std::string verdict;
    ++t.runs;
    const std::string& err = p->err();
    std::smatch m;
    bool crashed = false;
    const std::regex killed("killed by signal (\\d+)");
    for (auto it = std::sregex_iterator(err.begin(), err.end(), killed);
         it != std::sregex_iterator(); ++it) {
      const int sig = std::stoi((*it)[1]);
      crashed = crashed || (sig != SIGKILL && sig != SIGTERM);
    }
    if (!joined || !st.ok() || (WIFEXITED(*st) && WEXITSTATUS(*st) == 124) || !left.empty()) {
      ++t.hangs;
      verdict = "HANG" + (left.empty() ? std::string() : " (left: " + left + ")");
    } else if (crashed) {
      ++t.crashes;
      verdict = "CRASH";
    } else if (WIFEXITED(*st) && WEXITSTATUS(*st) == 0) {
      if (tokens_of(p->out()) == ref_) {
        ++t.completed;
        verdict = "completed, tokens equal, lost ranks " + lost_of(p->out());
      } else {
        ++t.wrong;
        verdict = "WRONG OUTPUT: " + tokens_of(p->out());
      }
    } else if (std::regex_search(err, m, std::regex("lost|evicted|declared dead|timed out|unreachable"))) {
      ++t.failed_clearly;
      verdict = "failed clearly: " + m.str();
    } else {
      ++t.lost;
      verdict = "LOST (no reason given)";
    }
    t.log += std::string(line) + verdict + "\n";
    if (verdict.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 0) t.log += err.substr(0, 4000) + "\n";
  }

 private:
  void inject(Fault f, int victim, int hold_ms) {
    auto hold = std::chrono::milliseconds(hold_ms);
    switch (f) {
      case Fault::kKill: signal_all(net_, victim, SIGKILL); break;
      case Fault::kStop: signal_all(net_, victim, SIGSTOP); break;
      case Fault::kStopCont:
        signal_all(net_, victim, SIGSTOP);
        std::this_thread::sleep_for(hold);
        signal_all(net_, victim, SIGCONT);
        break;
      case Fault::kCut: net_.cut(victim); break;
      case Fault::kCutHeal:
        net_.cut(victim);
        std::this_thread::sleep_for(hold);
        net_.heal(victim);
        break;
      case Fault::kSlow:
        net_.throttle(victim, "4mbit");
        std::this_thread::sleep_for(hold);
        net_.unthrottle(victim);
        break;
    }
  }

  Netns net_;
  std::filesystem::path dir_;
  std::string topo_, secret_, model_, ref_;
  const std::vector<std::string> gen_ = {"run", "-p", "the quick brown fox", "-n", "160", "--temp", "0",
                                         "--ignore-eos", "-t", "1", "--json", "--seed", "1"};
};

uint32_t soak_seed() {
  const char* s = std::getenv("LATTICE_CHAOS_SEED");
  return s && *s ? uint32_t(std::strtoul(s, nullptr, 10)) : std::random_device{}();
}

void soak(const std::vector<std::pair<int, int>>& ranks_and_trials) {
  const uint32_t seed = soak_seed();
  std::mt19937 rng(seed);
  Tally t;
  for (auto [ranks, trials] : ranks_and_trials) {
    Soak s(ranks, "c" + std::to_string(ranks));
    if (!s.net().skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", s.net().skip_reason());
    s.prepare();
    if (::testing::Test::HasFatalFailure()) return;
    for (int i = 0; i < trials; ++i) {
      s.trial(rng, t);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  std::printf("chaos soak (LATTICE_CHAOS_SEED=%u): %d runs, %d completed with the right tokens, %d failed with a "
              "reason; hangs %d, crashes %d, wrong output %d, lost requests %d\n%s",
              seed, t.runs, t.completed, t.failed_clearly, t.hangs, t.crashes, t.wrong, t.lost, t.log.c_str());
  EXPECT_EQ(t.hangs, 0) << t.log;
  EXPECT_EQ(t.crashes, 0) << t.log;
  EXPECT_EQ(t.wrong, 0) << t.log;
  EXPECT_EQ(t.lost, 0) << t.log;
}

TEST(ChaosNetns, AShortSoakOfRandomFaultsOnThreeRanks) { soak({{3, 4}}); }

TEST(ChaosNetnsSlow, FiftyRandomFaultsOnThreeAndFourRanks) { soak({{3, 26}, {4, 26}}); }

}  // namespace
}  // namespace lattice::cluster::testing
