// cluster_peer: one rank of the cluster's fault tests and of bench/failure_detect.sh.
// Joins from the environment (LATTICE_*), prints "joined rank R world W epoch E", posts a
// receive from every peer, prints "ready", then waits for the first peer-lost event and prints
//   "event peer-lost ranks [..] wall_ns T"   (T: CLOCK_REALTIME when the event reached us)
// and once the lost peer's receive failed it prints
//   "inflight failed peer P wall_ns T: <status>"
// then shrinks, exchanges with every survivor, prints "shrunk rank R world W epoch E" and
// "exchange ok wall_ns T" (the survivors continue), and leaves after a barrier. Exit 0 on success, 1 with a message otherwise.
// Argument "--idle": join and wait to be killed (a victim that never reports).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "cluster_testlib.h"
#include "lattice/cluster/cluster.h"

using namespace lattice;
using namespace lattice::cluster;

namespace {
int die(const char* what, const Status& s) {
  std::printf("error %s: %s\n", what, s.to_string().c_str());
  std::fflush(stdout);
  return 1;
}
int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  bool idle = argc > 1 && std::strcmp(argv[1], "--idle") == 0;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto opts = cluster_options_from_env();
  if (!opts.ok()) return die("options", opts.status());
  std::atomic<int64_t> event_ns{0};
  opts->on_event = [&](const MembershipEvent& e) {
    if (e.kind == EventKind::kPeerLost && event_ns.load() == 0) event_ns = wall_ns();
  };
  auto joined = join_cluster(*opts, Deadline::after(std::chrono::seconds(60)));
  if (!joined.ok()) return die("join", joined.status());
  Cluster& c = **joined;
  std::printf("joined rank %d world %d epoch %llu\n", c.rank(), c.world_size(), static_cast<unsigned long long>(c.epoch()));
  if (Status s = testing::exchange_with_all(c, Deadline::after(std::chrono::seconds(60))); !s.ok())
    return die("first exchange", s);
  if (idle) {
    std::printf("ready\n");
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  // A receive in flight from every peer (nobody sends): the lost peer's must fail, at the
  // cluster's verdict or the fabric's own detection, whichever comes first.
  std::vector<std::unique_ptr<fabric::MemoryRegion>> regions;
  std::vector<fabric::CompletionQueue*> queues;
  for (int p = 0; p < c.world_size(); ++p) {
    auto links = c.links(p);
    if (links.empty()) continue;
    auto mr = links[0].provider->allocate_memory(64, fabric::kLocalRead | fabric::kLocalWrite);
    if (!mr.ok()) return die("allocate", mr.status());
    if (Status s = links[0].endpoint->post_recv({mr->get(), 0, 64}, uint64_t(p)); !s.ok()) return die("post_recv", s);
    regions.push_back(std::move(mr).value());
    queues.push_back(links[0].recv_cq);
  }
  // "ready" once the receives are posted: a victim killed after it finds one in flight here
  // (posted earlier, a post could meet the loss and fail instead of the receive).
  std::printf("ready\n");
  bool have_event = false, have_failure = queues.empty();
  const auto give_up = Deadline::after(std::chrono::seconds(120));
  while (!have_event || !have_failure) {
    if (give_up.expired()) return die("event", Timeout("no loss seen"));
    for (auto* q : queues) {
      fabric::Completion comp[4];
      for (size_t i = 0, n = q->poll(comp); i < n; ++i) {
        if (comp[i].status.ok() || have_failure) continue;
        have_failure = true;
        std::printf("inflight failed peer %llu wall_ns %lld: %s\n", static_cast<unsigned long long>(comp[i].id),
                    static_cast<long long>(wall_ns()), comp[i].status.to_string().c_str());
      }
    }
    if (have_event) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    auto e = c.next_event(Deadline::after(std::chrono::milliseconds(1)));
    if (!e.ok()) continue;
    if (e->kind != EventKind::kPeerLost) {
      std::printf("other event %s\n", to_string(*e).c_str());
      if (e->kind == EventKind::kCoordinatorLost || e->kind == EventKind::kEvicted) return 1;
      continue;
    }
    std::string ranks;
    for (int r : e->ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    std::printf("event peer-lost ranks [%s] wall_ns %lld\n", ranks.c_str(), static_cast<long long>(event_ns.load()));
    have_event = true;
  }
  // Posts to the dead peer fail at once.
  for (int p : c.lost_peers()) {
    auto* ep = c.endpoint(p);
    if (ep && ep->status().code() != ErrorCode::kPeerLost) return die("post to the dead peer", ep->status());
  }
  if (Status s = c.shrink(Deadline::after(std::chrono::seconds(60))); !s.ok()) return die("shrink", s);
  std::printf("shrunk rank %d world %d epoch %llu\n", c.rank(), c.world_size(), static_cast<unsigned long long>(c.epoch()));
  if (Status s = testing::exchange_with_all(c, Deadline::after(std::chrono::seconds(60))); !s.ok())
    return die("exchange", s);
  std::printf("exchange ok wall_ns %lld\n", static_cast<long long>(wall_ns()));
  if (Status s = c.barrier(Deadline::after(std::chrono::seconds(60))); !s.ok()) return die("barrier", s);
  return 0;
}
