// Fuzz harness: the tcp provider's receive path (fabric/tcp/frame_rx.cc: staging, frame header
// validation, payload sinks, one-sided requests served on a registered region, responses
// matched to outstanding requests). The input is what a connected plain (unsealed) peer sends
// after its Hello: it is written into one end of a socketpair whose other end a real Conn owns,
// connected through the same offer_incoming()/connect() path the provider's listener uses.
//
// Input: byte 0 sets up the endpoint (bits 0-1: receives posted, 0..3; bit 2: a write posted,
// bit 3: a read, bit 4: a fetch-add, bit 5: receives of 16 bytes instead of 4 KiB), the rest is
// the peer's byte stream. The 8 bytes "REGIONRW" / "REGIONRO" anywhere in it are replaced by the
// keys of two registered 64 KiB regions (read-write-atomic, read-only), so that one-sided
// requests can name real regions. The peer's side is drained as the endpoint answers.
// Violations must fail the endpoint with an error; nothing may crash, hang, leak, touch memory
// outside the regions and buffers, or complete an operation twice.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lattice/fabric/tcp/cq.h"
#include "lattice/fabric/tcp/endpoint.h"
#include "lattice/fabric/tcp/provider.h"

using namespace lattice;
using namespace lattice::fabric;
using namespace lattice::fabric::tcp;

namespace {

struct World {
  std::unique_ptr<TcpProvider> provider;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<MemoryRegion> rw, ro, local;
  uint64_t next_id = uint64_t{1} << 40;  // apart from the provider's own endpoint ids
};

World& world() {
  static World* w = [] {
    auto* w = new World;
    auto p = TcpProvider::create("127.0.0.1:0", ProviderOptions{});
    if (!p.ok()) std::abort();
    w->provider = std::move(*p);
    auto cq = w->provider->create_cq(1024);
    auto rw = w->provider->allocate_memory(64 << 10, kAllAccess);
    auto ro = w->provider->allocate_memory(64 << 10, kLocalRead | kLocalWrite | kRemoteRead);
    auto local = w->provider->allocate_memory(64 << 10, kAllAccess);
    if (!cq.ok() || !rw.ok() || !ro.ok() || !local.ok()) std::abort();
    w->cq = std::move(*cq);
    w->rw = std::move(*rw);
    w->ro = std::move(*ro);
    w->local = std::move(*local);
    return w;
  }();
  return *w;
}

void substitute(std::vector<uint8_t>& s, const char marker[8], uint64_t key) {
  for (size_t i = 0; i + 8 <= s.size(); ++i)
    if (std::memcmp(s.data() + i, marker, 8) == 0) std::memcpy(s.data() + i, &key, 8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  World& w = world();
  const uint8_t setup = data[0];
  std::vector<uint8_t> stream(data + 1, data + size);
  substitute(stream, "REGIONRW", w.rw->key());
  substitute(stream, "REGIONRO", w.ro->key());

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  auto* cq = static_cast<TcpCompletionQueue*>(w.cq.get());
  EndpointOptions eo;
  eo.peer_timeout = std::chrono::milliseconds(5000);
  EndpointAddress local = w.provider->listen_address();
  local.nonce.fill(0xee);
  EndpointAddress peer = local;
  peer.nonce.fill(0x11);  // smaller: the peer dials, our endpoint takes the offered socket
  auto conn = std::make_shared<Conn>(w.provider.get(), cq, cq, eo, local, w.next_id++);
  auto ep = std::make_unique<TcpEndpoint>(w.provider.get(), conn, cq, cq);
  conn->offer_incoming(sv[1], peer.nonce, "fuzz peer");
  if (!ep->connect(peer.encode(), Deadline::after(std::chrono::seconds(5))).ok()) std::abort();

  size_t posted = 0;
  const size_t recv_len = (setup & 32) ? 16 : 4096;
  for (int i = 0; i < (setup & 3); ++i)
    if (ep->post_recv({w.local.get(), static_cast<size_t>(i) * 4096, recv_len}, 100 + i).ok()) ++posted;
  // One-sided requests to the peer's (imagined) region: the peer's answers must match them.
  if ((setup & 4) && ep->post_write({w.local.get(), 16384, 64}, {0x1234, 0, 64}, 200).ok()) ++posted;
  if ((setup & 8) && ep->post_read({w.local.get(), 20480, 64}, {0x1234, 64, 64}, 201).ok()) ++posted;
  if ((setup & 16) && ep->post_fetch_add({w.local.get(), 24576, 8}, {0x1234, 128, 8}, 1, 202).ok()) ++posted;

  size_t off = 0;
  bool eof_sent = false;
  std::vector<Completion> done(64);
  size_t completed = 0;
  uint8_t sink[65536];
  for (int round = 0; round < 10000; ++round) {
    if (off < stream.size()) {
      ssize_t n = ::send(sv[0], stream.data() + off, stream.size() - off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) off += static_cast<size_t>(n);
    }
    if (off == stream.size() && !eof_sent) {
      ::shutdown(sv[0], SHUT_WR);
      eof_sent = true;
    }
    while (::recv(sv[0], sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    completed += w.cq->poll(done);
    if (completed > posted) std::abort();  // an operation completed twice, or one never posted
    if (eof_sent && !ep->status().ok()) break;  // EOF or a violation: the endpoint is failed
    // A message too big for the unexpected buffers stalls the reader (backpressure) until the
    // application posts a receive: do what an application does.
    if (round % 50 == 49 && ep->post_recv({w.local.get(), 32768, 4096}, 300 + round).ok()) ++posted;
  }
  if (ep->status().ok()) std::abort();  // EOF never noticed: a hang in the real reader
  ep.reset();
  conn.reset();
  // Every posted operation completes once, with the failure at the latest.
  for (int i = 0; i < 100 && completed < posted; ++i) completed += w.cq->poll(done);
  if (completed < posted) std::abort();
  ::close(sv[0]);
  return 0;
}
