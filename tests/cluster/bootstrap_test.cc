// Bootstrap and membership with ranks as threads: each thread joins through a coordinator on
// 127.0.0.1, over shm or tcp, and the tests check the result with real exchanges.
#include <gtest/gtest.h>

#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "cluster_testlib.h"
#include "lattice/cluster/bootstrap.h"
#include "lattice/cluster/cluster.h"

namespace lattice::cluster {
namespace {

using testing::exchange_with_all;

constexpr auto kJoin = 30s;     // generous: a loaded 2-core machine
constexpr auto kDetect = 10s;   // detection is ~0.7 s; the bound only stops a hung test

crypto::ClusterSecret secret_a() { return crypto::ClusterSecret::from_bytes({1, 2, 3}); }
crypto::ClusterSecret secret_b() { return crypto::ClusterSecret::from_bytes({9, 9, 9}); }

struct Threads {
  std::unique_ptr<Coordinator> coordinator;
  std::vector<std::unique_ptr<Cluster>> ranks;
  std::string address;
};

ClusterOptions options_for(const std::string& address, int rank, int world, const std::string& provider) {
  ClusterOptions o;
  o.rank = rank;
  o.world_size = world;
  o.coordinator = address;
  o.host_coordinator = false;
  o.provider = provider;
  o.secret = secret_a();
  o.name = "thread" + std::to_string(rank);
  return o;
}

Result<std::unique_ptr<Coordinator>> start_coordinator(int world, bool insecure = false) {
  CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.world_size = world;
  co.secret = secret_a();
  co.insecure = insecure;
  return Coordinator::start(co);
}

// Joins `world` ranks as threads; every join must succeed.
void join_all(Threads& t, int world, const std::string& provider) {
  auto c = start_coordinator(world);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  t.coordinator = std::move(c).value();
  t.address = "127.0.0.1:" + std::to_string(t.coordinator->port());
  std::vector<std::future<Result<std::unique_ptr<Cluster>>>> f;
  for (int r = 0; r < world; ++r)
    f.push_back(std::async(std::launch::async, [&, r] {
      return join_cluster(options_for(t.address, r, world, provider), Deadline::after(kJoin));
    }));
  for (int r = 0; r < world; ++r) {
    auto res = f[r].get();
    ASSERT_TRUE(res.ok()) << "rank " << r << ": " << res.status().to_string();
    t.ranks.push_back(std::move(res).value());
  }
}

// Runs exchange_with_all on every given rank concurrently.
void exchange(std::vector<Cluster*> ranks) {
  std::vector<std::future<Status>> f;
  for (auto* c : ranks) f.push_back(std::async(std::launch::async, [c] { return exchange_with_all(*c, Deadline::after(kJoin)); }));
  for (size_t i = 0; i < f.size(); ++i) {
    Status s = f[i].get();
    EXPECT_TRUE(s.ok()) << "rank " << ranks[i]->rank() << ": " << s.to_string();
  }
}

void shrink_all(std::vector<Cluster*> ranks) {
  std::vector<std::future<Status>> f;
  for (auto* c : ranks) f.push_back(std::async(std::launch::async, [c] { return c->shrink(Deadline::after(kJoin)); }));
  for (auto& x : f) {
    Status s = x.get();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
}

// Waits for the first event of `kind` on `c`.
Result<MembershipEvent> wait_event(Cluster& c, EventKind kind) {
  auto deadline = Deadline::after(kDetect);
  for (;;) {
    LATTICE_ASSIGN_OR_RETURN(auto e, c.next_event(deadline));
    if (e.kind == kind) return e;
  }
}

class JoinThreads : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(JoinThreads, EveryRankGetsItsPlaceAndEveryLinkCarriesData) {
  auto [provider, world] = GetParam();
  Threads t;
  join_all(t, world, provider);
  ASSERT_EQ(static_cast<int>(t.ranks.size()), world);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(t.ranks[r]->rank(), r);
    EXPECT_EQ(t.ranks[r]->world_size(), world);
    EXPECT_EQ(t.ranks[r]->epoch(), 0u);
    for (int p = 0; p < world; ++p) EXPECT_EQ(t.ranks[r]->endpoint(p) != nullptr, p != r);
  }
  std::vector<Cluster*> all;
  for (auto& c : t.ranks) all.push_back(c.get());
  exchange(all);
  // allgather returns every rank's contribution in rank order.
  std::vector<std::future<Result<std::vector<std::string>>>> f;
  for (auto* c : all)
    f.push_back(std::async(std::launch::async, [c] { return c->allgather("r" + std::to_string(c->rank()), Deadline::after(kJoin)); }));
  for (auto& x : f) {
    auto v = x.get();
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    ASSERT_EQ(static_cast<int>(v->size()), world);
    for (int r = 0; r < world; ++r) EXPECT_EQ((*v)[r], "r" + std::to_string(r));
  }
  auto st = t.coordinator->stats();
  EXPECT_TRUE(st.formed);
  EXPECT_EQ(static_cast<int>(st.alive.size()), world);
}

INSTANTIATE_TEST_SUITE_P(Sizes, JoinThreads,
                         ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(1, 2, 3, 5)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
                         });

// The cluster hands out its own endpoints (they answer peer-lost once the membership says so);
// release_buffer must still reach the provider through them, or a collective that fails on a
// cluster leaves the provider writing into memory its caller frees (it did: ASan, in a rank).
TEST(Bootstrap, ClusterLinksPassReleaseBufferToTheProvider) {
  Threads t;
  join_all(t, 2, "tcp");
  ASSERT_EQ(t.ranks.size(), 2u);
  fabric::Endpoint* ep = t.ranks[0]->endpoint(1);
  ASSERT_NE(ep, nullptr);
  const cluster::Link& l = t.ranks[0]->links(1).front();
  ASSERT_TRUE(l.provider->caps().release_buffer);
  auto buf = l.provider->allocate_memory(64, fabric::kLocalRead | fabric::kLocalWrite);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(ep->post_recv({buf->get(), 0, 64}, 7).ok());
  Status s = ep->release_buffer(7);
  EXPECT_TRUE(s.ok()) << s.to_string();
  // Rank 1 sends; rank 0's released receive drops it.
  fabric::Endpoint* ep1 = t.ranks[1]->endpoint(0);
  auto buf1 = t.ranks[1]->links(0).front().provider->allocate_memory(64, fabric::kLocalRead | fabric::kLocalWrite);
  ASSERT_TRUE(buf1.ok());
  std::memset((*buf1)->data(), 0x5a, 64);
  std::memset((*buf)->data(), 0, 64);
  ASSERT_TRUE(ep1->post_send({buf1->get(), 0, 64}, 8).ok());
  Deadline d = Deadline::after(kJoin);
  Status got = Timeout("no completion");
  while (!d.expired()) {
    fabric::Completion c[4];
    (void)t.ranks[1]->links(0).front().send_cq->poll(c);
    size_t n = l.recv_cq->poll(c);
    if (n > 0) {
      got = c[0].status;
      break;
    }
  }
  EXPECT_EQ(got.code(), ErrorCode::kCancelled) << got.to_string();
  for (int i = 0; i < 64; ++i) ASSERT_EQ((*buf)->data()[i], std::byte{0}) << "a released receive was written";
}

TEST(Bootstrap, SingleRankWithoutCoordinatorIsAGroupOfOne) {
  ClusterOptions o;
  auto c = join_cluster(o, Deadline::after(5s));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->world_size(), 1);
  EXPECT_EQ((*c)->rank(), 0);
  EXPECT_TRUE((*c)->links(0).empty());
  auto v = (*c)->allgather("x", Deadline::after(1s));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::vector<std::string>{"x"});
}

TEST(Bootstrap, WrongSecretIsRefusedAndChangesNothing) {
  Threads t;
  auto c = start_coordinator(2);
  ASSERT_TRUE(c.ok());
  t.coordinator = std::move(c).value();
  t.address = "127.0.0.1:" + std::to_string(t.coordinator->port());
  auto bad = options_for(t.address, 1, 2, "tcp");
  bad.secret = secret_b();
  auto r = join_cluster(bad, Deadline::after(kJoin));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kAuthFailed) << r.status().to_string();
  auto st = t.coordinator->stats();
  EXPECT_FALSE(st.formed);
  EXPECT_EQ(st.refused, 1);
  // The stranger took no rank: the real ranks 0 and 1 still form the cluster.
  std::vector<std::future<Result<std::unique_ptr<Cluster>>>> f;
  for (int rank = 0; rank < 2; ++rank)
    f.push_back(std::async(std::launch::async, [&, rank] { return join_cluster(options_for(t.address, rank, 2, "tcp"), Deadline::after(kJoin)); }));
  for (auto& x : f) {
    auto res = x.get();
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    t.ranks.push_back(std::move(res).value());
  }
  exchange({t.ranks[0].get(), t.ranks[1].get()});
  EXPECT_EQ(t.coordinator->stats().refused, 1);
}

TEST(Bootstrap, InsecureOnOneSideOnlyIsRefused) {
  auto c = start_coordinator(2);
  ASSERT_TRUE(c.ok());
  auto o = options_for("127.0.0.1:" + std::to_string((*c)->port()), 1, 2, "tcp");
  o.insecure = true;
  auto r = join_cluster(o, Deadline::after(kJoin));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), ErrorCode::kTimeout) << r.status().to_string();
  EXPECT_FALSE((*c)->stats().formed);
}

TEST(Bootstrap, InsecureOnBothSidesJoinsAndCarriesData) {
  auto c = start_coordinator(2, /*insecure=*/true);
  ASSERT_TRUE(c.ok());
  std::string addr = "127.0.0.1:" + std::to_string((*c)->port());
  std::vector<std::future<Result<std::unique_ptr<Cluster>>>> f;
  for (int rank = 0; rank < 2; ++rank)
    f.push_back(std::async(std::launch::async, [&, rank] {
      auto o = options_for(addr, rank, 2, "tcp");
      o.insecure = true;
      return join_cluster(o, Deadline::after(kJoin));
    }));
  std::vector<std::unique_ptr<Cluster>> ranks;
  for (auto& x : f) {
    auto res = x.get();
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    ranks.push_back(std::move(res).value());
  }
  exchange({ranks[0].get(), ranks[1].get()});
}

TEST(Bootstrap, ADuplicateRankIsRefused) {
  auto c = start_coordinator(3);
  ASSERT_TRUE(c.ok());
  std::string addr = "127.0.0.1:" + std::to_string((*c)->port());
  auto first = std::async(std::launch::async, [&] { return join_cluster(options_for(addr, 1, 3, "tcp"), Deadline::after(2s)); });
  // The duplicate must come second: wait until the coordinator holds the first rank 1.
  for (auto until = Deadline::after(kJoin); (*c)->stats().alive != std::vector<int>{1};) {
    ASSERT_FALSE(until.expired()) << "the first rank 1 never joined";
    std::this_thread::sleep_for(5ms);
  }
  auto second = join_cluster(options_for(addr, 1, 3, "tcp"), Deadline::after(kJoin));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("already joined"), std::string::npos) << second.status().to_string();
  auto f = first.get();  // never formed (ranks 0 and 2 never came): times out
  EXPECT_FALSE(f.ok());
}

TEST(Bootstrap, JoinRetriesUntilTheCoordinatorIsUp) {
  // The test holds the port: a listener on port 0 that takes the ranks' first dials and hangs
  // up on them (as a coordinator that is not up yet, or restarting, would), then hands the same
  // socket to the coordinator. The ranks must retry: no sleep orders this, and no port is
  // picked, released and raced for.
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::vector<std::future<Result<std::unique_ptr<Cluster>>>> f;
  for (int rank = 0; rank < 2; ++rank)
    f.push_back(std::async(std::launch::async, [&, rank] { return join_cluster(options_for(addr, rank, 2, "tcp"), Deadline::after(kJoin)); }));
  for (int hung_up = 0; hung_up < 2;) {
    pollfd p{lfd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, int(std::chrono::milliseconds(kJoin).count())), 1) << "no rank dialed";
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ASSERT_GE(fd, 0);
    ::close(fd);
    ++hung_up;
  }
  CoordinatorOptions co;
  co.listen_fd = lfd;
  co.world_size = 2;
  co.secret = secret_a();
  auto c = Coordinator::start(co);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ((*c)->port(), ntohs(a.sin_port));
  for (auto& x : f) {
    auto res = x.get();
    EXPECT_TRUE(res.ok()) << res.status().to_string();
  }
}

TEST(Bootstrap, UnreachableCoordinatorTimesOutNamingIt) {
  auto o = options_for("127.0.0.1:1", 1, 2, "tcp");
  auto r = join_cluster(o, Deadline::after(1s));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout);
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos) << r.status().to_string();
}

// A member dies (its control connection drops, as when the process is killed): every
// survivor hears it, posts to it fail with peer-lost, and after shrink() the survivors
// exchange data under new ranks.
class Failure : public ::testing::TestWithParam<std::string> {};

TEST_P(Failure, KilledMemberIsDetectedByEverySurvivorThenShrink) {
  Threads t;
  join_all(t, 4, GetParam());
  t.ranks[1]->drop_control();
  for (int r : {0, 2, 3}) {
    auto e = wait_event(*t.ranks[r], EventKind::kPeerLost);
    ASSERT_TRUE(e.ok()) << "rank " << r << ": " << e.status().to_string();
    EXPECT_EQ(e->ranks, std::vector<int>{1});
    EXPECT_EQ(e->alive, (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(e->epoch, 0u);
    EXPECT_FALSE(t.ranks[r]->peer_alive(1));
    EXPECT_EQ(t.ranks[r]->endpoint(1)->status().code(), ErrorCode::kPeerLost);
  }
  // Everyone agreed; an allgather in the old epoch now fails rather than hangs.
  auto ag = t.ranks[0]->allgather("x", Deadline::after(kJoin));
  EXPECT_EQ(ag.status().code(), ErrorCode::kPeerLost) << ag.status().to_string();
  shrink_all({t.ranks[0].get(), t.ranks[2].get(), t.ranks[3].get()});
  EXPECT_EQ(t.ranks[0]->rank(), 0);
  EXPECT_EQ(t.ranks[2]->rank(), 1);
  EXPECT_EQ(t.ranks[3]->rank(), 2);
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(t.ranks[r]->world_size(), 3);
    EXPECT_EQ(t.ranks[r]->epoch(), 1u);
  }
  exchange({t.ranks[0].get(), t.ranks[2].get(), t.ranks[3].get()});
}

TEST_P(Failure, StoppedMemberIsDetectedByEverySurvivorThenShrinkAndItIsEvicted) {
  Threads t;
  join_all(t, 3, GetParam());
  t.ranks[2]->pause_heartbeats(true);
  for (int r : {0, 1}) {
    auto e = wait_event(*t.ranks[r], EventKind::kPeerLost);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ(e->ranks, std::vector<int>{2});
    EXPECT_NE(e->reason.find("silent"), std::string::npos) << e->reason;
  }
  shrink_all({t.ranks[0].get(), t.ranks[1].get()});
  exchange({t.ranks[0].get(), t.ranks[1].get()});
  // Resumed, the stopped rank learns it was dropped, and why; it is fenced: every link lost.
  t.ranks[2]->pause_heartbeats(false);
  auto e = wait_event(*t.ranks[2], EventKind::kEvicted);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_NE(e->reason.find("evicted by the coordinator: declared dead: silent"), std::string::npos) << e->reason;
  EXPECT_NE(t.ranks[2]->control_status().message().find("evicted"), std::string::npos)
      << t.ranks[2]->control_status().to_string();
  for (int p : {0, 1}) {
    EXPECT_FALSE(t.ranks[2]->peer_alive(p));
    EXPECT_NE(t.ranks[2]->endpoint(p)->status().message().find("evicted"), std::string::npos)
        << t.ranks[2]->endpoint(p)->status().to_string();
  }
}

// Posts a 64-byte receive from `peer` on c's link to it into *region (which the caller keeps
// until the receive completed, and drops before the cluster: the provider owns it); returns
// the receive's queue.
fabric::CompletionQueue* post_receive(Cluster& c, int peer, std::unique_ptr<fabric::MemoryRegion>* region) {
  auto links = c.links(peer);
  if (links.empty()) return nullptr;
  auto mr = links[0].provider->allocate_memory(64, fabric::kLocalRead | fabric::kLocalWrite);
  if (!mr.ok()) return nullptr;
  *region = std::move(mr).value();
  if (!links[0].endpoint->post_recv({region->get(), 0, 64}, 7).ok()) return nullptr;
  return links[0].recv_cq;
}

// The completion of that receive (its status), or the wait's own error (kTimeout).
Status receive_outcome(fabric::CompletionQueue* cq) {
  fabric::Completion comp[4];
  auto n = cq->wait(comp, Deadline::after(kDetect));
  if (!n.ok()) return n.status();
  return comp[0].status;
}

TEST_P(Failure, AReceiveInFlightFromAStoppedRankFailsOnceTheClusterDeclaresItDead) {
  // The fabric's own timeout would never fire here (the "stopped" rank is a thread whose
  // endpoints still answer): only the cluster's verdict can end the receive.
  Threads t;
  join_all(t, 3, GetParam());
  std::unique_ptr<fabric::MemoryRegion> region;
  fabric::CompletionQueue* cq = post_receive(*t.ranks[0], 2, &region);
  ASSERT_NE(cq, nullptr);
  t.ranks[2]->pause_heartbeats(true);
  ASSERT_TRUE(wait_event(*t.ranks[0], EventKind::kPeerLost).ok());
  Status s = receive_outcome(cq);
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost) << s.to_string();
  EXPECT_NE(s.message().find("declared lost by the cluster"), std::string::npos) << s.to_string();
  t.ranks[2]->pause_heartbeats(false);
}

TEST_P(Failure, ARestartedNodeRejoinsAtTheNextEpoch) {
  Threads t;
  join_all(t, 3, GetParam());
  t.ranks[2]->drop_control();
  t.ranks[2].reset();
  for (int r : {0, 1}) ASSERT_TRUE(wait_event(*t.ranks[r], EventKind::kPeerLost).ok());
  auto o = options_for(t.address, 0, 1, GetParam());
  o.rejoin = true;
  o.name = "restarted";
  auto joiner = std::async(std::launch::async, [&] { return join_cluster(o, Deadline::after(kJoin)); });
  for (int r : {0, 1}) {
    auto e = wait_event(*t.ranks[r], EventKind::kJoinRequest);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
  }
  shrink_all({t.ranks[0].get(), t.ranks[1].get()});
  auto j = joiner.get();
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ((*j)->rank(), 2);
  EXPECT_EQ((*j)->world_size(), 3);
  EXPECT_EQ((*j)->epoch(), 1u);
  EXPECT_EQ(t.ranks[0]->epoch(), 1u);
  exchange({t.ranks[0].get(), t.ranks[1].get(), j->get()});
}

TEST_P(Failure, AfterShrinkARingKeepsItsCables) {
  // Four hosts cabled in a ring 0-1-2-3-0; host 2 dies. The survivors (hosts 0, 1, 3, now
  // ranks 0, 1, 2) must link only the pairs a cable joins: 0-1 and 3-0, not 1-3.
  Threads t;
  auto c = start_coordinator(4);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  t.coordinator = std::move(c).value();
  t.address = "127.0.0.1:" + std::to_string(t.coordinator->port());
  auto ring = [](int a, int b) { return (a + 1) % 4 == b || (b + 1) % 4 == a; };
  std::vector<std::future<Result<std::unique_ptr<Cluster>>>> f;
  for (int r = 0; r < 4; ++r)
    f.push_back(std::async(std::launch::async, [&, r] {
      auto o = options_for(t.address, r, 4, GetParam());
      o.linked = ring;
      return join_cluster(o, Deadline::after(kJoin));
    }));
  for (int r = 0; r < 4; ++r) {
    auto res = f[r].get();
    ASSERT_TRUE(res.ok()) << "rank " << r << ": " << res.status().to_string();
    t.ranks.push_back(std::move(res).value());
  }
  EXPECT_TRUE(t.ranks[0]->links(2).empty());
  EXPECT_FALSE(t.ranks[0]->links(3).empty());
  t.ranks[2]->drop_control();
  for (int r : {0, 1, 3}) ASSERT_TRUE(wait_event(*t.ranks[r], EventKind::kPeerLost).ok());
  shrink_all({t.ranks[0].get(), t.ranks[1].get(), t.ranks[3].get()});
  Cluster& h0 = *t.ranks[0];
  Cluster& h1 = *t.ranks[1];
  Cluster& h3 = *t.ranks[3];
  EXPECT_EQ(h3.rank(), 2);
  EXPECT_EQ(h0.origins(), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(h3.origins(), (std::vector<int>{0, 1, 3}));
  EXPECT_FALSE(h0.links(1).empty());  // cable 0-1
  EXPECT_FALSE(h0.links(2).empty());  // cable 3-0
  EXPECT_TRUE(h1.links(2).empty());   // no cable 1-3
  EXPECT_TRUE(h3.links(1).empty());
  // The cabled pairs carry data in the new epoch.
  exchange({&h0, &h1, &h3});
}

INSTANTIATE_TEST_SUITE_P(Providers, Failure, ::testing::Values("shm", "tcp"));

TEST(Membership, CoordinatorLossReachesEveryMember) {
  Threads t;
  join_all(t, 3, "tcp");
  t.coordinator.reset();
  for (int r = 0; r < 3; ++r) {
    auto e = wait_event(*t.ranks[r], EventKind::kCoordinatorLost);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_FALSE(t.ranks[r]->control_status().ok());
  }
}

TEST(Membership, ARankThatLostTheCoordinatorFailsEveryOperationInFlight) {
  Threads t;
  join_all(t, 3, "tcp");
  std::vector<fabric::CompletionQueue*> cqs;
  std::vector<std::unique_ptr<fabric::MemoryRegion>> regions(3);
  for (int r = 0; r < 3; ++r) {
    cqs.push_back(post_receive(*t.ranks[r], (r + 1) % 3, &regions[r]));
    ASSERT_NE(cqs.back(), nullptr);
  }
  t.coordinator.reset();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(wait_event(*t.ranks[r], EventKind::kCoordinatorLost).ok());
    Status s = receive_outcome(cqs[r]);
    EXPECT_EQ(s.code(), ErrorCode::kPeerLost) << "rank " << r << ": " << s.to_string();
    const int p = (r + 2) % 3;
    EXPECT_FALSE(t.ranks[r]->peer_alive(p));
    EXPECT_NE(t.ranks[r]->endpoint(p)->status().message().find("lost the coordinator"), std::string::npos)
        << t.ranks[r]->endpoint(p)->status().to_string();
  }
}

TEST(Membership, TheHeartbeatThreadSleepsWhileItsLinkIsPausedOrLost) {
  // Counts wake-ups, not time: polling every millisecond would wake ~300 times per pause.
  Threads t;
  join_all(t, 2, "tcp");
  t.ranks[1]->pause_heartbeats(true);
  uint64_t w0 = t.ranks[1]->heartbeat_wakeups();
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(t.ranks[1]->heartbeat_wakeups() - w0, 3u);
  t.ranks[1]->pause_heartbeats(false);
  t.coordinator.reset();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(wait_event(*t.ranks[r], EventKind::kCoordinatorLost).ok());
  w0 = t.ranks[0]->heartbeat_wakeups();
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(t.ranks[0]->heartbeat_wakeups() - w0, 3u);
}

TEST(Membership, NoFalseAlarmWhileIdle) {
  Threads t;
  join_all(t, 3, "tcp");
  std::this_thread::sleep_for(2500ms);  // > 3 failure timeouts of quiet
  for (int r = 0; r < 3; ++r) {
    auto e = t.ranks[r]->next_event(Deadline::now());
    EXPECT_FALSE(e.ok()) << "rank " << r << ": unexpected " << to_string(*e);
  }
  EXPECT_EQ(t.coordinator->stats().alive.size(), 3u);
}

}  // namespace
}  // namespace lattice::cluster
