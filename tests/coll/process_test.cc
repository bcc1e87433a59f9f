// Collectives between processes (coll_peer ranks joined through the cluster bootstrap) over
// shm and tcp, and a rank SIGKILLed mid-collective: every survivor fails with peer-lost naming
// it, shrinks, and runs the next collective.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lattice/cluster/bootstrap.h"
#include "lattice/crypto/secret.h"
#include "lattice/core/deadline.h"

namespace {

using namespace lattice;

struct Child {
  pid_t pid = -1;
  std::string log;
  int status = -1;
  std::string output() const {
    std::ifstream f(log);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
};

constexpr const char* kSecretHex = "7c6f6c6c2d746573742d7365637265742d6e6f742d666f722d70726f64756374";

// The coordinator, hosted here on a port the kernel picks as it binds (ranks are told it and
// LATTICE_EXTERNAL_COORDINATOR=1): no port is chosen, released and raced for.
std::unique_ptr<cluster::Coordinator> host_coordinator(int world) {
  cluster::CoordinatorOptions o;
  o.listen = "127.0.0.1:0";
  o.world_size = world;
  auto secret = crypto::ClusterSecret::parse(kSecretHex);
  EXPECT_TRUE(secret.ok());
  if (secret.ok()) o.secret = *secret;
  o.failure_timeout = std::chrono::milliseconds(1500);
  auto c = cluster::Coordinator::start(o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : nullptr;
}

std::vector<Child> start(int world, const std::string& provider, const std::string& mode, int port) {
  auto kids = std::vector<Child>(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    Child& k = kids[size_t(r)];
    k.log = "/tmp/coll_peer." + std::to_string(::getpid()) + "." + std::to_string(port) + "." + std::to_string(r);
    k.pid = ::fork();
    if (k.pid == 0) {
      int fd = ::open(k.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("LATTICE_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LATTICE_WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LATTICE_COORDINATOR", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
      ::setenv("LATTICE_PROVIDER", provider.c_str(), 1);
      ::setenv("LATTICE_SECRET", kSecretHex, 1);
      ::setenv("LATTICE_EXTERNAL_COORDINATOR", "1", 1);
      ::setenv("LATTICE_FAILURE_TIMEOUT_MS", "1500", 1);
      std::string bin = std::string(LATTICE_BINARY_DIR) + "/tests/coll_peer";
      ::execl(bin.c_str(), bin.c_str(), mode.c_str(), "20", nullptr);
      ::_exit(127);
    }
  }
  return kids;
}

bool wait_for(std::vector<Child>& kids, std::chrono::seconds limit) {
  auto deadline = Deadline::after(limit);
  for (auto& k : kids) {
    while (k.status < 0) {
      int st;
      pid_t p = ::waitpid(k.pid, &st, WNOHANG);
      if (p == k.pid) {
        k.status = st;
        break;
      }
      if (deadline.expired()) {
        for (auto& o : kids)
          if (o.status < 0) ::kill(o.pid, SIGKILL), ::waitpid(o.pid, &o.status, 0);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return true;
}

void every_op_between_processes(const std::string& provider) {
  auto coordinator = host_coordinator(3);
  ASSERT_TRUE(coordinator);
  auto kids = start(3, provider, "check", coordinator->port());
  ASSERT_TRUE(wait_for(kids, std::chrono::seconds(120))) << "ranks did not finish";
  for (auto& k : kids) {
    EXPECT_TRUE(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0) << k.output();
    EXPECT_NE(k.output().find("ok"), std::string::npos) << k.output();
    ::unlink(k.log.c_str());
  }
}

TEST(CollProcess, EveryOpOverShm) { every_op_between_processes("shm"); }
TEST(CollProcess, EveryOpOverTcp) { every_op_between_processes("tcp"); }

void killed_rank(const std::string& provider) {
  const int world = 4, victim = 2;
  auto coordinator = host_coordinator(world);
  ASSERT_TRUE(coordinator);
  auto kids = start(world, provider, "loop", coordinator->port());
  // Wait until every rank completed a collective, then kill one mid-stream.
  auto deadline = Deadline::after(std::chrono::seconds(60));
  for (auto& k : kids)
    while (k.output().find("running") == std::string::npos) {
      int st;
      ASSERT_NE(::waitpid(k.pid, &st, WNOHANG), k.pid) << "rank exited early: " << k.output();
      ASSERT_FALSE(deadline.expired()) << "rank never ran: " << k.output();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(kids[victim].pid, SIGKILL);
  auto start_kill = Clock::now();
  ASSERT_TRUE(wait_for(kids, std::chrono::seconds(90))) << "a survivor hung";
  EXPECT_LT(Clock::now() - start_kill, std::chrono::seconds(60));
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    std::string out = kids[size_t(r)].output();
    EXPECT_NE(out.find("error peer-lost peer 2"), std::string::npos) << "rank " << r << ": " << out;
    EXPECT_NE(out.find("shrunk 3 ok"), std::string::npos) << "rank " << r << ": " << out;
    EXPECT_TRUE(WIFEXITED(kids[size_t(r)].status) && WEXITSTATUS(kids[size_t(r)].status) == 0) << out;
  }
  for (auto& k : kids) ::unlink(k.log.c_str());
}

TEST(CollProcessFault, KilledRankFailsSurvivorsWhoShrinkAndContinueShm) { killed_rank("shm"); }
TEST(CollProcessFault, KilledRankFailsSurvivorsWhoShrinkAndContinueTcp) { killed_rank("tcp"); }

}  // namespace
