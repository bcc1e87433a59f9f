#include "lattice/core/fd_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace lattice {
namespace {

using std::chrono::milliseconds;

struct Pair {
  int a = -1, b = -1;
  explicit Pair(int type_flags = SOCK_NONBLOCK) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    close_a();
    close_b();
  }
  void close_a() {
    if (a >= 0) ::close(a);
    a = -1;
  }
  void close_b() {
    if (b >= 0) ::close(b);
    b = -1;
  }
};

std::vector<char> pattern(size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>(i * 131 + 7);
  return v;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

TEST(FdIo, LargeWriteAndReadAcrossSocketBuffer) {
  for (int flags : {int{SOCK_NONBLOCK}, 0}) {  // non-blocking and blocking sockets alike
    Pair p(flags);
    const auto data = pattern(4 << 20);  // far beyond the socket buffer: both sides must wait
    std::thread writer([&] { EXPECT_TRUE(write_all(p.a, data.data(), data.size(), Deadline::after(10s)).ok()); });
    std::vector<char> got(data.size());
    ASSERT_TRUE(read_all(p.b, got.data(), got.size(), Deadline::after(10s)).ok());
    writer.join();
    EXPECT_EQ(got, data);
  }
}

TEST(FdIo, ReadAllAssemblesShortWrites) {
  Pair p;
  const auto data = pattern(16);
  std::thread writer([&] {
    for (char c : data) {
      EXPECT_EQ(::send(p.a, &c, 1, 0), 1);
      std::this_thread::sleep_for(milliseconds(2));
    }
  });
  std::vector<char> got(data.size());
  ASSERT_TRUE(read_all(p.b, got.data(), got.size(), Deadline::after(5s)).ok());
  writer.join();
  EXPECT_EQ(got, data);
}

TEST(FdIo, ReadSomeReturnsWhatIsThere) {
  Pair p;
  ASSERT_EQ(::send(p.a, "abc", 3, 0), 3);
  char buf[100];
  Result<size_t> n = read_some(p.b, buf, sizeof buf, Deadline::after(1s));
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(*n, 3u);
  EXPECT_EQ(std::string(buf, 3), "abc");
  // n == 0 asks for nothing and gets nothing, without waiting.
  Result<size_t> zero = read_some(p.b, buf, 0, Deadline::now());
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, 0u);
}

TEST(FdIo, EofIsPeerLost) {
  Pair p;
  ASSERT_EQ(::send(p.a, "abc", 3, 0), 3);
  p.close_a();
  char buf[10];
  Status s = read_all(p.b, buf, sizeof buf, Deadline::after(1s));
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost) << s.to_string();
  EXPECT_NE(s.message().find("3 of 10"), std::string::npos) << s.message();
  Result<size_t> n = read_some(p.b, buf, sizeof buf, Deadline::after(1s));
  EXPECT_EQ(n.status().code(), ErrorCode::kPeerLost);
}

TEST(FdIo, PeerClosingWhileWeWaitIsPeerLostAtOnce) {
  Pair p;
  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    p.close_a();
  });
  auto t0 = Clock::now();
  char buf[10];
  Status s = read_all(p.b, buf, sizeof buf, Deadline::after(10s));
  closer.join();
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost) << s.to_string();
  EXPECT_LT(ms_since(t0), 5000);
}

TEST(FdIo, ReadTimesOutAtTheDeadline) {
  for (int flags : {int{SOCK_NONBLOCK}, 0}) {
    Pair p(flags);
    char buf[4];
    auto t0 = Clock::now();
    Status s = read_all(p.b, buf, sizeof buf, Deadline::after(milliseconds(60)));
    double took = ms_since(t0);
    EXPECT_EQ(s.code(), ErrorCode::kTimeout) << s.to_string();
    EXPECT_GE(took, 59);
    EXPECT_LT(took, 2000);
    EXPECT_EQ(read_some(p.b, buf, sizeof buf, Deadline::after(milliseconds(20))).status().code(),
              ErrorCode::kTimeout);
  }
}

TEST(FdIo, ExpiredDeadlineStillTakesWhatIsReady) {
  Pair p;
  ASSERT_EQ(::send(p.a, "xy", 2, 0), 2);
  char buf[2];
  EXPECT_TRUE(read_all(p.b, buf, 2, Deadline::now()).ok());
  EXPECT_TRUE(write_all(p.a, "z", 1, Deadline::now()).ok());
  EXPECT_EQ(read_all(p.b, buf, 2, Deadline::now()).code(), ErrorCode::kTimeout);  // only 1 there
}

TEST(FdIo, WriteTimesOutWhenThePeerDoesNotRead) {
  for (int flags : {int{SOCK_NONBLOCK}, 0}) {
    Pair p(flags);
    const auto data = pattern(8 << 20);
    auto t0 = Clock::now();
    Status s = write_all(p.a, data.data(), data.size(), Deadline::after(milliseconds(80)));
    double took = ms_since(t0);
    EXPECT_EQ(s.code(), ErrorCode::kTimeout) << s.to_string();
    EXPECT_GE(took, 79);
    EXPECT_LT(took, 2000);
  }
}

TEST(FdIo, WriteToAClosedPeerIsPeerLostWithoutSigpipe) {
  // The default SIGPIPE action would kill this test process.
  Pair p;
  p.close_b();
  char buf[64] = {};
  Status s = write_all(p.a, buf, sizeof buf, Deadline::after(1s));
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost) << s.to_string();
}

TEST(FdIo, PeerClosingWhileWeWriteIsPeerLost) {
  Pair p;
  const auto data = pattern(8 << 20);
  std::thread closer([&] {
    char buf[1000];
    (void)::recv(p.b, buf, sizeof buf, 0);  // take a little, then go away
    p.close_b();
  });
  Status s = write_all(p.a, data.data(), data.size(), Deadline::after(10s));
  closer.join();
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost) << s.to_string();
}

TEST(FdIo, PipesBlockingAndNot) {
  for (int flags : {0, O_NONBLOCK}) {
    int fds[2];
    ASSERT_EQ(::pipe2(fds, O_CLOEXEC | flags), 0);
    const auto data = pattern(1 << 20);  // more than a pipe holds: the writer must wait
    std::thread writer([&] { EXPECT_TRUE(write_all(fds[1], data.data(), data.size(), Deadline::after(10s)).ok()); });
    std::vector<char> got(data.size());
    ASSERT_TRUE(read_all(fds[0], got.data(), got.size(), Deadline::after(10s)).ok());
    writer.join();
    EXPECT_EQ(got, data);
    // Nothing written: a blocking pipe still times out instead of blocking in read(2).
    char c;
    EXPECT_EQ(read_all(fds[0], &c, 1, Deadline::after(milliseconds(30))).code(), ErrorCode::kTimeout);
    // A full blocking pipe times out instead of blocking in write(2).
    EXPECT_EQ(write_all(fds[1], data.data(), data.size(), Deadline::after(milliseconds(30))).code(),
              ErrorCode::kTimeout);
    ::close(fds[0]);
    // No reader: EPIPE, no SIGPIPE.
    EXPECT_EQ(write_all(fds[1], "x", 1, Deadline::after(1s)).code(), ErrorCode::kPeerLost);
    ::close(fds[1]);
  }
}

TEST(FdIo, WriteToAPipeWithoutReaderKeepsSigpipeBlockedStateAndPendingSet) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);
  EXPECT_EQ(write_all(fds[1], "x", 1, Deadline::after(1s)).code(), ErrorCode::kPeerLost);
  ::close(fds[1]);
  sigset_t mask, pending;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_EQ(sigismember(&mask, SIGPIPE), 0);  // unblocked again
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);  // the signal was swallowed
}

void on_sigusr1(int) {}

TEST(FdIo, SignalsDoNotEndAWaitEarly) {
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;  // no SA_RESTART: poll and recv return EINTR
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGUSR1, &sa, &old), 0);
  Pair p;
  pthread_t reader_thread = pthread_self();
  std::atomic<bool> done{false};
  std::thread poker([&] {
    for (int i = 0; i < 10 && !done; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
      pthread_kill(reader_thread, SIGUSR1);
    }
    EXPECT_EQ(::send(p.a, "ok", 2, 0), 2);
  });
  char buf[2];
  Status s = read_all(p.b, buf, 2, Deadline::after(10s));
  done = true;
  poker.join();
  EXPECT_TRUE(s.ok()) << s.to_string();
  // And a timeout still comes at the deadline, not at the first signal.
  std::thread poker2([&] {
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
      pthread_kill(reader_thread, SIGUSR1);
    }
  });
  auto t0 = Clock::now();
  s = read_all(p.b, buf, 2, Deadline::after(milliseconds(120)));
  double took = ms_since(t0);
  poker2.join();
  EXPECT_EQ(s.code(), ErrorCode::kTimeout);
  EXPECT_GE(took, 119);
  ::sigaction(SIGUSR1, &old, nullptr);
}

TEST(FdIo, WaitReadableAndWritable) {
  Pair p;
  EXPECT_EQ(wait_readable(p.b, Deadline::after(milliseconds(20))).code(), ErrorCode::kTimeout);
  EXPECT_TRUE(wait_writable(p.a, Deadline::after(milliseconds(20))).ok());
  ASSERT_EQ(::send(p.a, "q", 1, 0), 1);
  EXPECT_TRUE(wait_readable(p.b, Deadline::now()).ok());
  // Fill a's send buffer: a is no longer writable.
  const auto data = pattern(8 << 20);
  EXPECT_EQ(write_all(p.a, data.data(), data.size(), Deadline::after(milliseconds(50))).code(), ErrorCode::kTimeout);
  EXPECT_EQ(wait_writable(p.a, Deadline::after(milliseconds(20))).code(), ErrorCode::kTimeout);
  // A peer that closed makes the socket readable (the read then reports EOF).
  Pair q;
  q.close_a();
  EXPECT_TRUE(wait_readable(q.b, Deadline::after(1s)).ok());
}

TEST(FdIo, BadDescriptorsAreInvalidArgument) {
  char buf[4];
  EXPECT_EQ(read_all(-1, buf, 4, Deadline::after(1s)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write_all(-1, buf, 4, Deadline::after(1s)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(read_some(-1, buf, 4, Deadline::after(1s)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(wait_readable(-1, Deadline::after(1s)).code(), ErrorCode::kInvalidArgument);
  // A descriptor number that is not open.
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(read_all(fds[0], buf, 4, Deadline::after(1s)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(write_all(fds[1], buf, 4, Deadline::after(1s)).code(), ErrorCode::kInvalidArgument);
}

// A listening socket on 127.0.0.1 with a kernel-chosen port.
struct Listener {
  int fd = -1;
  uint16_t port = 0;
  explicit Listener(int backlog = 16) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd, backlog), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
};

// A port nothing listens on (bound once, then released).
uint16_t free_port() {
  Listener l;
  uint16_t port = l.port;
  return port;
}

TEST(FdIo, ConnectTcpReachesAListener) {
  Listener l;
  for (const char* host : {"127.0.0.1", "localhost"}) {
    Result<int> fd = connect_tcp(host, l.port, Deadline::after(5s));
    ASSERT_TRUE(fd.ok()) << host << ": " << fd.status().to_string();
    EXPECT_NE(::fcntl(*fd, F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(::fcntl(*fd, F_GETFD) & FD_CLOEXEC, 0);
    int server = ::accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(server, 0);
    EXPECT_TRUE(write_all(*fd, "hello", 5, Deadline::after(1s)).ok());
    char buf[5];
    EXPECT_TRUE(read_all(server, buf, 5, Deadline::after(1s)).ok());
    EXPECT_EQ(std::string(buf, 5), "hello");
    ::close(server);
    ::close(*fd);
  }
}

TEST(FdIo, ConnectTcpRefusedAndRetried) {
  const uint16_t port = free_port();
  auto t0 = Clock::now();
  Result<int> fd = connect_tcp("127.0.0.1", port, Deadline::after(5s));
  EXPECT_EQ(fd.status().code(), ErrorCode::kIoError) << fd.status().to_string();
  EXPECT_NE(fd.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos);
  EXPECT_LT(ms_since(t0), 1000);  // no retries unless asked for

  // Asked to retry: a refused connect until the deadline...
  ConnectOptions retry;
  retry.retry_refused = true;
  t0 = Clock::now();
  fd = connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(100)), retry);
  EXPECT_FALSE(fd.ok());
  EXPECT_GE(ms_since(t0), 99);

  // ...and a peer that starts listening late is reached.
  int late = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(late, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(80));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    EXPECT_EQ(::bind(late, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(late, 4), 0);
  });
  fd = connect_tcp("127.0.0.1", port, Deadline::after(5s), retry);
  starter.join();
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  ::close(*fd);
  ::close(late);
}

TEST(FdIo, ConnectTcpTimesOutOnAPeerThatDoesNotAnswer) {
  // A listener whose accept queue is full drops further SYNs: the connect hangs until the
  // deadline. The queue holds backlog + 1, so a few connects in, one must time out.
  Listener l(/*backlog=*/0);
  std::vector<int> held;
  bool timed_out = false;
  for (int i = 0; i < 8 && !timed_out; ++i) {
    auto t0 = Clock::now();
    Result<int> fd = connect_tcp("127.0.0.1", l.port, Deadline::after(milliseconds(150)));
    double took = ms_since(t0);
    if (fd.ok()) {
      held.push_back(*fd);
      continue;
    }
    if (fd.status().code() == ErrorCode::kIoError) {
      // net.ipv4.tcp_abort_on_overflow=1: the kernel resets instead of dropping the SYN.
      for (int h : held) ::close(h);
      GTEST_SKIP() << "this kernel refuses connects to a full accept queue: " << fd.status().to_string();
    }
    EXPECT_EQ(fd.status().code(), ErrorCode::kTimeout) << fd.status().to_string();
    EXPECT_GE(took, 149);
    EXPECT_LT(took, 2000);
    timed_out = true;
  }
  EXPECT_TRUE(timed_out);
  for (int fd : held) ::close(fd);
}

TEST(FdIo, ConnectTcpRejectsBadInput) {
  EXPECT_EQ(connect_tcp("", 80, Deadline::after(1s)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(connect_tcp("127.0.0.1", 0, Deadline::after(1s)).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(connect_tcp("no-such-host.invalid", 80, Deadline::after(5s)).status().code(), ErrorCode::kUnavailable);
  sockaddr sa{};
  sa.sa_family = AF_UNIX;
  EXPECT_EQ(connect_addr(&sa, sizeof sa, Deadline::after(1s)).status().code(), ErrorCode::kInvalidArgument);
}

TEST(FdIo, ConnectAddrReachesAListener) {
  Listener l;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(l.port);
  Result<int> fd = connect_addr(reinterpret_cast<sockaddr*>(&a), sizeof a, Deadline::after(5s));
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  ::close(*fd);
}

}  // namespace
}  // namespace lattice
