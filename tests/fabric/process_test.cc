// Ranks as separate processes: the peer is tests/fabric_peer, spawned with posix_spawn; the
// address blobs travel over its stdin/stdout as hex lines. The fault cases SIGKILL or
// SIGSTOP the peer and assert the survivor fails within its deadline instead of hanging.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "fabric_testlib.h"

extern char** environ;

namespace lattice::fabric::testing {
namespace {

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// A spawned fabric_peer with pipes to its stdin and from its stdout.
class PeerProcess {
 public:
  ~PeerProcess() { kill_and_reap(); }

  bool spawn(const std::string& uri, const std::string& role, int timeout_ms) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::string path = std::string(LATTICE_BINARY_DIR) + "/tests/fabric_peer";
    std::string t = std::to_string(timeout_ms);
    const char* argv[] = {path.c_str(), uri.c_str(), role.c_str(), t.c_str(), nullptr};
    int rc = posix_spawn(&pid_, path.c_str(), &fa, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }

  // One line from the peer's stdout, or "" after the deadline / at EOF.
  std::string read_line(Deadline d) {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      pollfd p{from_, POLLIN, 0};
      int ms = d.remaining_ms_for_poll();
      if (ms == 0 || ::poll(&p, 1, ms) <= 0) return "";
      char chunk[4096];
      ssize_t n = read(from_, chunk, sizeof chunk);
      if (n <= 0) return "";
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  bool write_line(const std::string& s) {
    std::string line = s + "\n";
    return write(to_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  }
  void close_stdin() {
    if (to_ >= 0) close(to_);
    to_ = -1;
  }
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits for exit up to `d`; returns the wait status or -1.
  int reap(Deadline d) {
    while (pid_ > 0) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return st;
      }
      if (d.expired()) return -1;
      usleep(2000);
    }
    return -1;
  }
  void kill_and_reap() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
    close_stdin();
    if (from_ >= 0) close(from_);
    from_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buf_;
};

class FabricProcess : public ::testing::TestWithParam<std::string> {
 protected:
  // Spawns the peer in `role` and connects to it.
  void start(const std::string& role, std::chrono::milliseconds peer_timeout = std::chrono::milliseconds(2000)) {
    EndpointOptions opts;
    opts.peer_rank = 1;
    opts.peer_timeout = peer_timeout;
    auto side = make_side(GetParam(), opts);
    if (!side.ok() && side.status().code() == ErrorCode::kUnavailable)
      GTEST_SKIP() << GetParam() << " unavailable: " << side.status().to_string();
    ASSERT_TRUE(side.ok()) << side.status().to_string();
    me_ = std::move(*side);
    ASSERT_TRUE(peer_.spawn(GetParam(), role, static_cast<int>(peer_timeout.count())));
    std::string line = peer_.read_line(generous());
    ASSERT_EQ(line.rfind("ADDR ", 0), 0u) << "peer said: '" << line << "'";
    ASSERT_TRUE(peer_.write_line("ADDR " + hex_encode(me_->ep->local_address())));
    Status c = me_->ep->connect(hex_decode(line.substr(5)), generous());
    ASSERT_TRUE(c.ok()) << c.to_string();
    if (role == "idle") {
      ASSERT_EQ(peer_.read_line(generous()), "READY");
    }
  }
  Result<Completion> wait_one(CompletionQueue* cq, Deadline d) {
    Completion c[1];
    auto r = cq->wait(c, d);
    if (!r.ok()) return r.status();
    return c[0];
  }

  std::unique_ptr<Side> me_;
  PeerProcess peer_;
};

TEST_P(FabricProcess, EchoAcrossProcesses) {
  start("echo");
  if (IsSkipped() || HasFatalFailure()) return;
  ASSERT_EQ(peer_.read_line(generous()).rfind("KEY ", 0), 0u);
  auto src = me_->provider->allocate_memory((size_t{1} << 20) + 3, kAllAccess);
  auto dst = me_->provider->allocate_memory((size_t{1} << 20) + 3, kAllAccess);
  ASSERT_TRUE(src.ok() && dst.ok());
  for (size_t size : {size_t{1}, size_t{4097}, (size_t{1} << 20) + 3, size_t{0}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    fill_pattern((*src)->data(), size, static_cast<uint32_t>(size));
    std::memset((*dst)->data(), 0, (*dst)->size());
    ASSERT_TRUE(me_->ep->post_recv({dst->get(), 0, (*dst)->size()}, 1).ok());
    ASSERT_TRUE(me_->ep->post_send({src->get(), 0, size}, 2).ok());
    auto s = wait_one(me_->send_cq.get(), generous());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_TRUE(s->status.ok()) << s->status.to_string();
    auto r = wait_one(me_->recv_cq.get(), generous());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->status.ok()) << r->status.to_string();
    EXPECT_EQ(r->bytes, size);
    EXPECT_EQ(std::memcmp((*dst)->data(), (*src)->data(), size), 0);
  }
  peer_.close_stdin();
  int st = peer_.reap(generous());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "peer wait status " << st;
}

TEST_P(FabricProcess, OneSidedAcrossProcesses) {
  start("echo");
  if (IsSkipped() || HasFatalFailure()) return;
  std::string line = peer_.read_line(generous());
  unsigned long long key = 0;
  size_t bytes = 0;
  ASSERT_EQ(std::sscanf(line.c_str(), "KEY %llx %zu", &key, &bytes), 2) << line;
  ASSERT_EQ(bytes, size_t{1} << 20);
  const ProviderCaps& caps = me_->provider->caps();
  if (!caps.rma_write || !caps.rma_read) GTEST_SKIP() << "no rma";
  auto src = me_->provider->allocate_memory(bytes, kAllAccess);
  auto back = me_->provider->allocate_memory(bytes, kAllAccess);
  ASSERT_TRUE(src.ok() && back.ok());
  for (size_t size : {size_t{1}, size_t{4097}, bytes}) {
    SCOPED_TRACE("size " + std::to_string(size));
    fill_pattern((*src)->data(), size, static_cast<uint32_t>(size) + 1);
    std::memset((*back)->data(), 0, size);
    ASSERT_TRUE(me_->ep->post_write({src->get(), 0, size}, {key, bytes - size, size}, 1).ok());
    ASSERT_TRUE(me_->ep->post_read({back->get(), 0, size}, {key, bytes - size, size}, 2).ok());
    for (WorkId id : {1, 2}) {
      auto c = wait_one(me_->send_cq.get(), generous());
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      ASSERT_TRUE(c->status.ok()) << c->status.to_string();
      EXPECT_EQ(c->id, id);
    }
    EXPECT_EQ(std::memcmp((*back)->data(), (*src)->data(), size), 0) << "read back what was written";
  }
  if (caps.atomics) {
    auto res = me_->provider->allocate_memory(8, kAllAccess);
    ASSERT_TRUE(res.ok());
    // The last write (1 MiB at offset 0) left the pattern's first 8 bytes in word 0.
    uint64_t before;
    std::memcpy(&before, (*src)->data(), 8);
    ASSERT_TRUE(me_->ep->post_fetch_add({res->get(), 0, 8}, {key, 0, 8}, 5, 3).ok());
    auto c = wait_one(me_->send_cq.get(), generous());
    ASSERT_TRUE(c.ok() && c->status.ok());
    uint64_t old;
    std::memcpy(&old, (*res)->data(), 8);
    EXPECT_EQ(old, before);
    ASSERT_TRUE(me_->ep->post_compare_swap({res->get(), 0, 8}, {key, 0, 8}, before + 5, 42, 4).ok());
    c = wait_one(me_->send_cq.get(), generous());
    ASSERT_TRUE(c.ok() && c->status.ok());
    std::memcpy(&old, (*res)->data(), 8);
    EXPECT_EQ(old, before + 5);
  }
  // A bad key across processes: denied, and the peer process is unharmed (it exits cleanly).
  auto small = me_->provider->allocate_memory(8, kAllAccess);
  ASSERT_TRUE(small.ok());
  Status posted = me_->ep->post_write({small->get(), 0, 8}, {key ^ 1, 0, 8}, 5);
  if (posted.ok()) {
    auto c = wait_one(me_->send_cq.get(), generous());
    ASSERT_TRUE(c.ok());
    posted = c->status;
  }
  EXPECT_EQ(posted.code(), ErrorCode::kAccessDenied) << posted.to_string();
  peer_.close_stdin();
  int st = peer_.reap(generous());
  EXPECT_TRUE(WIFEXITED(st)) << "peer wait status " << st;
}

TEST_P(FabricProcess, PeerKilledFailsPendingAndLaterWork) {
  start("idle");
  if (IsSkipped() || HasFatalFailure()) return;
  auto buf = me_->provider->allocate_memory(64, kAllAccess);
  auto big = me_->provider->allocate_memory(size_t{1} << 20, kAllAccess);
  ASSERT_TRUE(buf.ok() && big.ok());
  ASSERT_TRUE(me_->ep->post_recv({buf->get(), 0, 64}, 7).ok());
  // A large send the idle peer never receives: pending when the peer dies.
  ASSERT_TRUE(me_->ep->post_send({big->get(), 0, size_t{1} << 20}, 9).ok());
  peer_.signal(SIGKILL);
  auto r = wait_one(me_->recv_cq.get(), generous());
  ASSERT_TRUE(r.ok()) << "no completion after the peer died: " << r.status().to_string();
  EXPECT_EQ(r->id, 7u);
  EXPECT_EQ(r->status.code(), ErrorCode::kPeerLost) << r->status.to_string();
  auto s = wait_one(me_->send_cq.get(), generous());
  ASSERT_TRUE(s.ok()) << "the pending send never completed: " << s.status().to_string();
  EXPECT_EQ(s->id, 9u);
  // A provider may have handed the bytes to the kernel before the peer died (tcp): ok is
  // allowed then; otherwise the send fails with the peer.
  EXPECT_TRUE(s->status.ok() || s->status.code() == ErrorCode::kPeerLost) << s->status.to_string();
  EXPECT_EQ(me_->ep->post_send({buf->get(), 0, 8}, 8).code(), ErrorCode::kPeerLost);
  EXPECT_EQ(me_->ep->status().code(), ErrorCode::kPeerLost);
  peer_.reap(generous());
}

// The CPU check of the test above, apart, so sanitizer runs can leave it out (label cpu).
TEST_P(FabricProcess, PeerKilledLeavesNothingSpinningCpuBudget) {
  start("idle");
  if (IsSkipped() || HasFatalFailure()) return;
  auto buf = me_->provider->allocate_memory(64, kAllAccess);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(me_->ep->post_recv({buf->get(), 0, 64}, 7).ok());
  peer_.signal(SIGKILL);
  auto r = wait_one(me_->recv_cq.get(), generous());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status.code(), ErrorCode::kPeerLost) << r->status.to_string();
  peer_.reap(generous());
  // Nothing spins after the failure: this process uses (almost) no CPU while it idles.
  double before = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Idle costs ~1 ms (a 20 ms watchdog tick); a spinning thread takes far more even when it
  // gets only a share of an oversubscribed core.
  EXPECT_LT(cpu_seconds() - before, 0.05) << "a background thread spins after the peer died";
}

TEST_P(FabricProcess, PeerStoppedIsDeclaredLost) {
  start("idle", std::chrono::milliseconds(500));
  if (IsSkipped() || HasFatalFailure()) return;
  auto buf = me_->provider->allocate_memory(64, kAllAccess);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(me_->ep->post_recv({buf->get(), 0, 64}, 7).ok());
  peer_.signal(SIGSTOP);
  auto r = wait_one(me_->recv_cq.get(), generous());
  ASSERT_TRUE(r.ok()) << "no completion while the peer was stopped: " << r.status().to_string();
  EXPECT_EQ(r->status.code(), ErrorCode::kPeerLost) << r->status.to_string();
  EXPECT_EQ(me_->ep->post_send({buf->get(), 0, 8}, 8).code(), ErrorCode::kPeerLost);
  peer_.signal(SIGCONT);
  peer_.close_stdin();
  int st = peer_.reap(generous());
  EXPECT_NE(st, -1) << "the peer did not exit after SIGCONT";
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricProcess, ::testing::ValuesIn(provider_uris()), uri_test_name);

}  // namespace
}  // namespace lattice::fabric::testing
