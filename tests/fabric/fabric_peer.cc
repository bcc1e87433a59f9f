// fabric_peer: the other rank of the fabric process tests, a separate process.
//
//   fabric_peer <uri> <echo|idle> [peer_timeout_ms]
//
// Prints "ADDR <hex>" on stdout, reads the test's "ADDR <hex>" line on stdin, connects, then
//   echo: prints "KEY <hex> <bytes>" of a 1 MiB region open to remote read/write/atomics,
//         receives messages and sends each one back; a 0-byte message ends it (exit 0).
//   idle: prints "READY" and does nothing until stdin closes (so the test can SIGKILL or
//         SIGSTOP it); exits after 60 s at most.
// Exit codes: 0 ok, 2 usage, 3 setup failed, 4 a fabric operation failed.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "fabric_testlib.h"

using namespace lattice;
using namespace lattice::fabric;
namespace ft = lattice::fabric::testing;

namespace {

int fail(int code, const std::string& what, const Status& s) {
  std::fprintf(stderr, "fabric_peer: %s: %s\n", what.c_str(), s.to_string().c_str());
  return code;
}

Result<Completion> wait_one(CompletionQueue* cq, Deadline d) {
  Completion c[1];
  auto r = cq->wait(c, d);
  if (!r.ok()) return r.status();
  return c[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fabric_peer <uri> <echo|idle> [peer_timeout_ms]\n");
    return 2;
  }
  std::string uri = argv[1], role = argv[2];
  EndpointOptions opts;
  opts.peer_rank = 0;
  if (argc > 3) opts.peer_timeout = std::chrono::milliseconds(std::stoi(argv[3]));
  auto side = ft::make_side(uri, opts);
  if (!side.ok()) return fail(3, "make_side", side.status());
  ft::Side& s = **side;
  std::printf("ADDR %s\n", ft::hex_encode(s.ep->local_address()).c_str());
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("ADDR ", 0) != 0) {
    std::fprintf(stderr, "fabric_peer: expected an ADDR line on stdin\n");
    return 3;
  }
  Status c = s.ep->connect(ft::hex_decode(line.substr(5)), Deadline::after(std::chrono::seconds(20)));
  if (!c.ok()) return fail(3, "connect", c);

  if (role == "idle") {
    std::printf("READY\n");
    std::fflush(stdout);
    pollfd p{0, POLLIN, 0};
    auto until = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < until) {
      if (::poll(&p, 1, 100) > 0) {
        char buf[64];
        if (read(0, buf, sizeof buf) <= 0) break;  // stdin closed: the test is done with us
      }
    }
    return 0;
  }
  if (role != "echo") return 2;
  constexpr size_t kMax = (size_t{1} << 21);
  auto region = s.provider->allocate_memory(kMax, kAllAccess);
  if (!region.ok()) return fail(3, "allocate_memory", region.status());
  // A region the test reads, writes and updates atomically while we wait for messages.
  auto target = s.provider->allocate_memory(size_t{1} << 20, kAllAccess);
  if (!target.ok()) return fail(3, "allocate_memory", target.status());
  std::printf("KEY %llx %zu\n", static_cast<unsigned long long>((*target)->key()), (*target)->size());
  std::fflush(stdout);
  for (WorkId id = 0;; id += 2) {
    Status st = s.ep->post_recv({region->get(), 0, kMax}, id);
    if (!st.ok()) return fail(4, "post_recv", st);
    auto r = wait_one(s.recv_cq.get(), Deadline::after(std::chrono::seconds(30)));
    if (!r.ok()) return fail(4, "wait recv", r.status());
    if (!r->status.ok()) return fail(4, "recv completion", r->status);
    st = s.ep->post_send({region->get(), 0, r->bytes}, id + 1);
    if (!st.ok()) return fail(4, "post_send", st);
    auto w = wait_one(s.send_cq.get(), Deadline::after(std::chrono::seconds(30)));
    if (!w.ok()) return fail(4, "wait send", w.status());
    if (!w->status.ok()) return fail(4, "send completion", w->status);
    if (r->bytes == 0) break;
  }
  // Let the last message reach the test before our endpoint closes.
  std::string rest;
  std::getline(std::cin, rest);
  return 0;
}
