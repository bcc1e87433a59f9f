#include "lattice/serve/link_probe.h"

#include <algorithm>
#include <array>
#include <deque>
#include <memory>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::serve {
namespace {

constexpr size_t kWindow = 4;               // receives kept posted on every link
constexpr size_t kStreamBytes = 256 << 10;  // one stream message
constexpr size_t kPing = 8, kEnd = 1;       // message sizes: a ping (or an ack), the stream's end

// One link's side: its receive slots (kWindow of kStreamBytes) and a send area.
struct Side {
  const cluster::Link* link = nullptr;
  int peer = 0;
  std::unique_ptr<fabric::MemoryRegion> region;
  std::deque<std::pair<size_t, size_t>> ready;  // received (slot, bytes)
  int sends = 0;                                // posted, not completed
};

fabric::WorkId recv_id(int peer, size_t slot) { return (uint64_t(peer) << 32) | (1u << 16) | slot; }
fabric::WorkId send_id(int peer) { return uint64_t(peer) << 32; }

class Prober {
 public:
  Prober(std::map<int, Side>& sides, Deadline d) : sides_(sides), deadline_(d) {}

  Status post_recv(Side& s, size_t slot) {
    return s.link->endpoint->post_recv({s.region.get(), slot * kStreamBytes, kStreamBytes}, recv_id(s.peer, slot));
  }
  Status send(Side& s, size_t bytes) {
    ++s.sends;
    return s.link->endpoint->post_send({s.region.get(), kWindow * kStreamBytes, bytes}, send_id(s.peer));
  }
  // Polls every side's queues once (a queue may be shared by several links, or be both).
  Status poll() {
    std::array<fabric::Completion, 32> comps;
    for (auto& [p, s] : sides_)
      for (fabric::CompletionQueue* cq : {s.link->send_cq, s.link->recv_cq}) {
        const size_t n = cq->poll(comps);
        for (size_t i = 0; i < n; ++i) {
          const fabric::Completion& c = comps[i];
          if (!c.status.ok()) return c.status.with_context("link probe");
          auto it = sides_.find(static_cast<int>(c.id >> 32));
          if (it == sides_.end()) return Internal("link probe: a completion of no probe");
          if (c.id & (1u << 16)) it->second.ready.emplace_back(c.id & 0xffff, c.bytes);
          else --it->second.sends;
        }
      }
    return Status::Ok();
  }
  // The next message from s's peer (its receive is posted again).
  Result<size_t> recv(Side& s) {
    while (s.ready.empty()) {
      LATTICE_RETURN_IF_ERROR(poll());
      if (s.ready.empty() && deadline_.expired()) return Timeout("link probe: waiting for rank " + std::to_string(s.peer), s.peer);
    }
    const auto [slot, bytes] = s.ready.front();
    s.ready.pop_front();
    LATTICE_RETURN_IF_ERROR(post_recv(s, slot));
    return bytes;
  }
  Status sends_done(Side& s, int at_most) {
    while (s.sends > at_most) {
      LATTICE_RETURN_IF_ERROR(poll());
      if (s.sends > at_most && deadline_.expired()) return Timeout("link probe: sends to rank " + std::to_string(s.peer), s.peer);
    }
    return Status::Ok();
  }

  Result<LinkFigures> measure(Side& s) {
    std::vector<double> rtt_us;
    for (int i = 0; i < kLinkWarmup + kLinkPings; ++i) {
      const auto t0 = Clock::now();
      LATTICE_RETURN_IF_ERROR(send(s, kPing));
      LATTICE_ASSIGN_OR_RETURN(size_t n, recv(s));
      if (n != kPing) return Corrupt("link probe: an echo of " + std::to_string(n) + " bytes", s.peer);
      if (i >= kLinkWarmup) rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      LATTICE_RETURN_IF_ERROR(sends_done(s, 0));
    }
    std::nth_element(rtt_us.begin(), rtt_us.begin() + rtt_us.size() / 2, rtt_us.end());
    LinkFigures f;
    f.lat_us = rtt_us[rtt_us.size() / 2] / 2;
    f.from = "ping";
    // The stream: windows of kWindow messages, each acknowledged once all of it arrived.
    uint64_t bytes = 0;
    const auto t0 = Clock::now();
    do {
      for (size_t i = 0; i < kWindow; ++i) LATTICE_RETURN_IF_ERROR(send(s, kStreamBytes));
      LATTICE_ASSIGN_OR_RETURN(size_t n, recv(s));
      if (n != kPing) return Corrupt("link probe: an acknowledgement of " + std::to_string(n) + " bytes", s.peer);
      bytes += kWindow * kStreamBytes;
      LATTICE_RETURN_IF_ERROR(sends_done(s, 0));
    } while (Clock::now() - t0 < kLinkStreamTime);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    f.gbps = secs > 0 ? bytes * 8 / secs / 1e9 : 0;
    LATTICE_RETURN_IF_ERROR(send(s, kEnd));
    LATTICE_RETURN_IF_ERROR(sends_done(s, 0));
    return f;
  }

  // The other end: echoes pings, acknowledges each full window, until the end.
  Status serve(Side& s) {
    size_t streamed = 0;
    for (;;) {
      LATTICE_ASSIGN_OR_RETURN(size_t n, recv(s));
      if (n == kEnd) return sends_done(s, 0);
      if (n == kStreamBytes && ++streamed % kWindow != 0) continue;
      if (n != kPing && n != kStreamBytes) return Corrupt("link probe: a message of " + std::to_string(n) + " bytes", s.peer);
      LATTICE_RETURN_IF_ERROR(send(s, kPing));
      LATTICE_RETURN_IF_ERROR(sends_done(s, 0));
    }
  }

  // Leaves nothing behind: every rank sends kWindow messages on each link, filling the peer's
  // posted receives, and takes kWindow without posting again.
  Status drain() {
    for (auto& [p, s] : sides_)
      for (size_t i = 0; i < kWindow; ++i) LATTICE_RETURN_IF_ERROR(send(s, kEnd));
    for (auto& [p, s] : sides_) {
      for (size_t got = 0; got < kWindow;) {
        if (!s.ready.empty()) {
          s.ready.pop_front(), ++got;
          continue;
        }
        LATTICE_RETURN_IF_ERROR(poll());
        if (s.ready.empty() && deadline_.expired()) return Timeout("link probe: draining rank " + std::to_string(p), p);
      }
      LATTICE_RETURN_IF_ERROR(sends_done(s, 0));
    }
    return Status::Ok();
  }

 private:
  std::map<int, Side>& sides_;
  Deadline deadline_;
};

}  // namespace

Result<std::map<int, LinkFigures>> probe_links(cluster::Cluster& c, Deadline deadline) {
  std::map<int, LinkFigures> out;
  const int n = c.world_size(), me = c.rank();
  if (n <= 1) return out;
  std::map<int, Side> sides;
  for (int p = 0; p < n; ++p) {
    auto links = c.links(p);
    if (p == me || links.empty()) continue;
    Side& s = sides[p];
    s.link = &links.front();
    s.peer = p;
    LATTICE_ASSIGN_OR_RETURN(s.region, s.link->provider->allocate_memory((kWindow + 1) * kStreamBytes, fabric::kAllAccess));
  }
  Prober pr(sides, deadline);
  for (auto& [p, s] : sides)
    for (size_t i = 0; i < kWindow; ++i) LATTICE_RETURN_IF_ERROR(pr.post_recv(s, i));
  // Receives are posted everywhere before anyone sends; then the pairs, one at a time.
  LATTICE_RETURN_IF_ERROR(c.barrier(deadline));
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      if (!c.pair_linked(i, j)) continue;
      if (me == i && sides.count(j)) {
        LATTICE_ASSIGN_OR_RETURN(out[j], pr.measure(sides[j]));
      } else if (me == j && sides.count(i)) {
        LATTICE_RETURN_IF_ERROR(pr.serve(sides[i]));
      }
      LATTICE_RETURN_IF_ERROR(c.barrier(deadline));
    }
  LATTICE_RETURN_IF_ERROR(pr.drain());
  // Everyone is done with the regions before any is freed.
  LATTICE_RETURN_IF_ERROR(c.barrier(deadline));
  return out;
}

}  // namespace lattice::serve
