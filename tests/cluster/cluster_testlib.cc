#include "cluster_testlib.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace lattice::cluster::testing {

namespace {
constexpr size_t kMsg = 64;
void fill(std::byte* p, int from, int to, uint64_t epoch) {
  std::memset(p, 0, kMsg);
  std::snprintf(reinterpret_cast<char*>(p), kMsg, "from %d to %d epoch %llu", from, to,
                static_cast<unsigned long long>(epoch));
}
}  // namespace

Status exchange_with_all(Group& g, Deadline deadline) {
  const int n = g.world_size(), me = g.rank();
  struct PeerBufs {
    std::unique_ptr<fabric::MemoryRegion> region;  // [0, 64): send, [64, 128): recv
    Link link;
  };
  std::vector<PeerBufs> bufs(n);
  for (int p = 0; p < n; ++p) {
    auto links = g.links(p);
    if (links.empty()) continue;
    bufs[p].link = links.front();
    LATTICE_ASSIGN_OR_RETURN(bufs[p].region, bufs[p].link.provider->allocate_memory(2 * kMsg, fabric::kAllAccess));
    fill(bufs[p].region->data(), me, p, g.epoch());
    std::memset(bufs[p].region->data() + kMsg, 0xee, kMsg);
    LATTICE_RETURN_IF_ERROR(bufs[p].link.endpoint->post_recv({bufs[p].region.get(), kMsg, kMsg}, 2 * p + 1));
  }
  for (int p = 0; p < n; ++p) {
    if (!bufs[p].region) continue;
    LATTICE_RETURN_IF_ERROR(bufs[p].link.endpoint->post_send({bufs[p].region.get(), 0, kMsg}, 2 * p));
  }
  for (int p = 0; p < n; ++p) {
    if (!bufs[p].region) continue;
    int got = 0;
    bool send_done = false, recv_done = false;
    // Send and receive queues of a cluster link are one queue.
    while (got < 2) {
      fabric::Completion c[4];
      LATTICE_ASSIGN_OR_RETURN(size_t k, bufs[p].link.send_cq->wait(c, deadline));
      for (size_t i = 0; i < k; ++i) {
        LATTICE_RETURN_IF_ERROR(c[i].status);
        if (c[i].id == static_cast<uint64_t>(2 * p)) send_done = true;
        if (c[i].id == static_cast<uint64_t>(2 * p + 1)) recv_done = true;
        ++got;
      }
    }
    if (!send_done || !recv_done) return Internal("unexpected completion ids");
    std::byte expect[kMsg];
    fill(expect, p, me, g.epoch());
    if (std::memcmp(expect, bufs[p].region->data() + kMsg, kMsg) != 0)
      return Corrupt("rank " + std::to_string(me) + " got a wrong message from rank " + std::to_string(p) + ": '" +
                         std::string(reinterpret_cast<const char*>(bufs[p].region->data() + kMsg), 40) + "'",
                     p);
  }
  return Status::Ok();
}

}  // namespace lattice::cluster::testing
