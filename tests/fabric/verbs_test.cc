// The verbs provider and its emulated device: every apple-tb5 limit of ANCHORS.md checked on
// the raw function table (the oracle is the documented limit), the provider's path choices
// (port, GID, UC), each injected fault detected or recovered, and the real library reported
// unavailable on a machine without RDMA.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "fabric_testlib.h"
#include "lattice/fabric/verbs/endpoint.h"

namespace lattice::fabric::testing {
namespace {

namespace v = lattice::fabric::verbs;
namespace emu = lattice::fabric::verbs::emu;

// A raw emulated device: context, pd, one cq.
struct RawDev {
  const v::VerbsApi& api = emu::api();
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  explicit RawDev(std::string_view profile) {
    int n = 0;
    ibv_device** list = api.get_device_list(&n);
    for (int i = 0; i < n; ++i)
      if (emu::device_for_profile(profile) == api.get_device_name(list[i])) ctx = api.open_device(list[i]);
    api.free_device_list(list);
    pd = api.alloc_pd(ctx);
    cq = api.create_cq(ctx, 256, nullptr, nullptr, 0);
  }
  ~RawDev() {
    api.destroy_cq(cq);
    api.dealloc_pd(pd);
    api.close_device(ctx);
  }
  ibv_qp* qp(ibv_qp_type type, uint32_t wr = 16) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = type;
    a.cap.max_send_wr = a.cap.max_recv_wr = wr;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return api.create_qp(pd, &a);
  }
  uint8_t active_port() {
    ibv_device_attr da{};
    api.query_device(ctx, &da);
    for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (api.query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) return p;
    }
    return 0;
  }
  std::vector<ibv_wc> poll(int rounds = 1) {
    std::vector<ibv_wc> out;
    for (int r = 0; r < rounds; ++r) {
      ibv_wc wc[16];
      int n = api.poll_cq(cq, 16, wc);
      out.insert(out.end(), wc, wc + n);
    }
    return out;
  }
};

// Brings two raw QPs (UC) to RTS against each other.
void connect_raw(RawDev& da, ibv_qp* a, RawDev& db, ibv_qp* b) {
  for (auto [d, q, peer, pd] : {std::tuple{&da, a, b, &db}, std::tuple{&db, b, a, &da}}) {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = d->active_port();
    ASSERT_EQ(d->api.modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PORT), 0);
  }
  for (auto [d, q, peer, pd] : {std::tuple{&da, a, b, &db}, std::tuple{&db, b, a, &da}}) {
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_RTR;
    at.dest_qp_num = peer->qp_num;
    at.ah_attr.is_global = 1;
    ASSERT_EQ(pd->api.query_gid(pd->ctx, pd->active_port(), 1, &at.ah_attr.grh.dgid), 0);
    ASSERT_EQ(d->api.modify_qp(q, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN), 0);
    at.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(d->api.modify_qp(q, &at, IBV_QP_STATE), 0);
  }
}

int post_send(RawDev& d, ibv_qp* qp, void* buf, uint32_t len, uint64_t id) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), len, 0};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  return d.api.post_send(qp, &wr, &bad);
}
int post_recv(RawDev& d, ibv_qp* qp, void* buf, uint32_t len, uint64_t id) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), len, 0};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return d.api.post_recv(qp, &wr, &bad);
}

TEST(VerbsEmu, AppleRefusesRcQueuePairsLinuxAllowsThem) {
  RawDev apple("apple-tb5"), rc("linux-rc");
  EXPECT_EQ(apple.qp(IBV_QPT_RC), nullptr);
  ibv_qp* uc = apple.qp(IBV_QPT_UC);
  ASSERT_NE(uc, nullptr);
  apple.api.destroy_qp(uc);
  ibv_qp* q = rc.qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  rc.api.destroy_qp(q);
}

// The shared memory this process holds (kB), from /proc/self/status.
long rss_shmem_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("RssShmem:", 0) == 0) return std::stol(line.substr(9));
  return -1;
}

// A queue pair's ring is resident when it is made, as registered memory is: faulting it in
// frame by frame during its first pass cost 15x the all-reduce on an oversubscribed host.
TEST(VerbsEmu, QueuePairRingIsResidentWhenMade) {
  RawDev d("apple-tb5");
  const long before = rss_shmem_kb();
  ASSERT_GE(before, 0) << "no RssShmem in /proc/self/status";
  ibv_qp* q = d.qp(IBV_QPT_UC);
  ASSERT_NE(q, nullptr);
  EXPECT_GE(rss_shmem_kb() - before, 16 * 1024) << "the ring's 16 MB are not resident";
  d.api.destroy_qp(q);
}

TEST(VerbsEmu, AppleEleventhQueuePairFails) {
  RawDev d("apple-tb5");
  std::vector<ibv_qp*> qps;
  for (int i = 0; i < 10; ++i) {
    qps.push_back(d.qp(IBV_QPT_UC));
    ASSERT_NE(qps.back(), nullptr) << "QP " << i + 1;
  }
  EXPECT_EQ(d.qp(IBV_QPT_UC), nullptr);
  d.api.destroy_qp(qps.back());
  qps.pop_back();
  ibv_qp* again = d.qp(IBV_QPT_UC);
  EXPECT_NE(again, nullptr) << "a destroyed QP frees its place";
  qps.push_back(again);
  for (ibv_qp* q : qps) d.api.destroy_qp(q);
}

TEST(VerbsEmu, AppleHundredAndFirstRegionFails) {
  RawDev d("apple-tb5");
  std::vector<std::byte> buf(4096);
  std::vector<ibv_mr*> mrs;
  for (int i = 0; i < 100; ++i) {
    mrs.push_back(d.api.reg_mr(d.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_NE(mrs.back(), nullptr) << "MR " << i + 1;
  }
  EXPECT_EQ(d.api.reg_mr(d.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
  for (ibv_mr* m : mrs) d.api.dereg_mr(m);
}

TEST(VerbsEmu, AppleWorkRequestAndMessageLimits) {
  RawDev d("apple-tb5"), peer("apple-tb5");
  EXPECT_EQ(d.qp(IBV_QPT_UC, 4096), nullptr) << "at most 4,095 work requests";
  ibv_qp* a = d.qp(IBV_QPT_UC, 4095);
  ibv_qp* b = peer.qp(IBV_QPT_UC, 16);
  ASSERT_TRUE(a && b);
  connect_raw(d, a, peer, b);
  std::vector<std::byte> big(16773121);
  EXPECT_NE(post_send(d, a, big.data(), 16773121, 1), 0) << "max message is 16,773,120 bytes";
  ASSERT_EQ(post_recv(peer, b, big.data(), 16773120, 2), 0);
  std::vector<std::byte> src(16773120, std::byte{7});
  ASSERT_EQ(post_send(d, a, src.data(), 16773120, 3), 0);
  auto s = d.poll();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  auto r = peer.poll();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 16773120u);
  EXPECT_EQ(big[16773119], std::byte{7});
  d.api.destroy_qp(a);
  peer.api.destroy_qp(b);
}

TEST(VerbsEmu, AppleReceivesOnlyAfterRts) {
  RawDev d("apple-tb5");
  ibv_qp* q = d.qp(IBV_QPT_UC);
  std::byte buf[64];
  EXPECT_NE(post_recv(d, q, buf, 64, 1), 0) << "RESET";
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = d.active_port();
  ASSERT_EQ(d.api.modify_qp(q, &at, IBV_QP_STATE | IBV_QP_PORT), 0);
  EXPECT_NE(post_recv(d, q, buf, 64, 1), 0) << "INIT";
  d.api.destroy_qp(q);
}

TEST(VerbsEmu, AppleMismatchedFrameCountsFailBothSides) {
  RawDev da("apple-tb5"), db("apple-tb5");
  ibv_qp* a = da.qp(IBV_QPT_UC);
  ibv_qp* b = db.qp(IBV_QPT_UC);
  connect_raw(da, a, db, b);
  std::vector<std::byte> src(8192, std::byte{1}), dst(8192);
  // Same frame count (1 frame each, different byte counts): fine.
  ASSERT_EQ(post_recv(db, b, dst.data(), 4096, 10), 0);
  ASSERT_EQ(post_send(da, a, src.data(), 100, 11), 0);
  EXPECT_EQ(da.poll().at(0).status, IBV_WC_SUCCESS);
  auto r = db.poll();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 100u);
  // 2 frames sent into a 1-frame receive: both sides complete in error.
  ASSERT_EQ(post_recv(db, b, dst.data(), 4096, 12), 0);
  ASSERT_EQ(post_send(da, a, src.data(), 4097, 13), 0);
  EXPECT_NE(da.poll().at(0).status, IBV_WC_SUCCESS);
  EXPECT_NE(db.poll().at(0).status, IBV_WC_SUCCESS);
  // 1 frame sent into a 2-frame receive: also an error (frames must match, not just fit).
  ASSERT_EQ(post_recv(db, b, dst.data(), 8192, 14), 0);
  ASSERT_EQ(post_send(da, a, src.data(), 10, 15), 0);
  EXPECT_NE(da.poll().at(0).status, IBV_WC_SUCCESS);
  EXPECT_NE(db.poll().at(0).status, IBV_WC_SUCCESS);
  da.api.destroy_qp(a);
  db.api.destroy_qp(b);
}

TEST(VerbsEmu, SendWaitsForAPostedReceiveAndCompletesBeforeDelivery) {
  RawDev da("apple-tb5"), db("apple-tb5");
  ibv_qp* a = da.qp(IBV_QPT_UC);
  ibv_qp* b = db.qp(IBV_QPT_UC);
  connect_raw(da, a, db, b);
  std::vector<std::byte> src(3000, std::byte{0x42}), dst(4096, std::byte{0});
  ASSERT_EQ(post_send(da, a, src.data(), 3000, 1), 0);
  // No receive posted at the peer: no credit, the send stays queued.
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(da.poll().empty()) << "completed without a posted receive";
  ASSERT_EQ(post_recv(db, b, dst.data(), 4096, 2), 0);
  auto s = da.poll();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  // No hardware acks: the sender's completion came before the receiver saw anything.
  EXPECT_EQ(dst[0], std::byte{0}) << "delivered before the receiver polled";
  auto r = db.poll();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 3000u);
  EXPECT_EQ(dst[2999], std::byte{0x42});
  da.api.destroy_qp(a);
  db.api.destroy_qp(b);
}

// wait_cq: an idle progress thread sleeps in the device until something concerns its QP.
// Each wait below is given 10 s; returning within 5 s means the event woke it (a timeout would
// take the 10 s), and the poll after it finds what woke it.
double wait_ms(RawDev& d, int64_t timeout_ns) {
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(d.api.wait_cq(d.cq, timeout_ns), 0);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
constexpr int64_t kLong = 10'000'000'000;
// How long d's wait lasts while another thread does `later` 20 ms after it began.
template <typename F>
double wait_ms_while(RawDev& d, F later) {
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    later();
  });
  const double ms = wait_ms(d, kLong);
  t.join();
  return ms;
}

// Two connected UC QPs on two Apple-profile devices; `faults` (a timed wire) set on da first.
struct UcPair {
  RawDev da{"apple-tb5"}, db{"apple-tb5"};
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  explicit UcPair(const emu::Faults* faults = nullptr) {
    if (faults) emu::set_faults(da.ctx, *faults);
    a = da.qp(IBV_QPT_UC);
    b = db.qp(IBV_QPT_UC);
    connect_raw(da, a, db, b);
  }
  ~UcPair() {
    da.api.destroy_qp(a);
    db.api.destroy_qp(b);
  }
};

TEST(VerbsEmu, WaitCqSleepsUntilTheTimeoutWhenNothingComes) {
  UcPair p;
  EXPECT_GE(wait_ms(p.db, 30'000'000), 25.0) << "returned with nothing to do";
  EXPECT_TRUE(p.db.poll().empty());
}

TEST(VerbsEmu, WaitCqWakesForAMessageCreditAndALocalWake) {
  UcPair p;
  RawDev &da = p.da, &db = p.db;
  ibv_qp *a = p.a, *b = p.b;
  std::vector<std::byte> src(3000, std::byte{0x42}), dst(4096, std::byte{0});
  // A message published into b's segment rings b's bell.
  ASSERT_EQ(post_recv(db, b, dst.data(), 4096, 2), 0);
  EXPECT_LT(wait_ms_while(db, [&] { post_send(da, a, src.data(), 3000, 1); }), 5000.0)
      << "the peer's message did not wake the receiver";
  auto r = db.poll();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 3000u);
  EXPECT_EQ(da.poll().size(), 1u);
  // A send without credit waits; the peer's posted receive rings the sender's bell.
  ASSERT_EQ(post_send(da, a, src.data(), 3000, 3), 0);
  EXPECT_TRUE(da.poll().empty());
  EXPECT_LT(wait_ms_while(da, [&] { post_recv(db, b, dst.data(), 4096, 4); }), 5000.0)
      << "the peer's receive did not wake the sender waiting for credit";
  auto s = da.poll();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 3u);
  EXPECT_EQ(db.poll().size(), 1u);
  // wake_cq from another thread ends a wait; one before the wait makes it return at once.
  EXPECT_LT(wait_ms_while(da, [&] { da.api.wake_cq(da.cq); }), 5000.0) << "wake_cq did not end the wait";
  ASSERT_EQ(da.api.wake_cq(da.cq), 0);
  EXPECT_LT(wait_ms(da, kLong), 5000.0) << "a wake before the wait was lost";
}

TEST(VerbsEmu, WaitCqWakesWhenATimedLinksMessageIsDue) {
  emu::Faults f;
  f.latency_us = 30000;  // 30 ms one way
  UcPair p(&f);
  RawDev &da = p.da, &db = p.db;
  ibv_qp *a = p.a, *b = p.b;
  std::vector<std::byte> src(100, std::byte{7}), dst(4096);
  ASSERT_EQ(post_recv(db, b, dst.data(), 4096, 2), 0);
  ASSERT_EQ(post_send(da, a, src.data(), 100, 1), 0);
  // The bell rang at once, but the message is not due yet: the receiver sleeps on until it is.
  double total = 0;
  std::vector<ibv_wc> r;
  for (int i = 0; i < 8 && r.empty(); ++i) {
    total += wait_ms(db, kLong);
    r = db.poll();
  }
  ASSERT_EQ(r.size(), 1u) << "the message never came";
  EXPECT_GE(total, 20.0) << "delivered before the link's latency";
  EXPECT_LT(total, 5000.0);
}

TEST(VerbsEmu, AppleGidTablePortsAndErrWedge) {
  RawDev d("apple-tb5");
  ibv_port_attr p1{}, p2{};
  ASSERT_EQ(d.api.query_port(d.ctx, 1, &p1), 0);
  ASSERT_EQ(d.api.query_port(d.ctx, 2, &p2), 0);
  EXPECT_EQ(p1.state, IBV_PORT_DOWN) << "the active port is not always 1";
  EXPECT_EQ(p2.state, IBV_PORT_ACTIVE);
  ibv_gid g0{}, g1{}, g2{};
  ASSERT_EQ(d.api.query_gid(d.ctx, 2, 0, &g0), 0);
  ASSERT_EQ(d.api.query_gid(d.ctx, 2, 1, &g1), 0);
  ASSERT_EQ(d.api.query_gid(d.ctx, 2, 2, &g2), 0);
  EXPECT_TRUE(v::gid_to_string(g0).starts_with("fe80::21a:7eff:fe")) << v::gid_to_string(g0);  // EUI-64 of a MAC
  EXPECT_TRUE(v::gid_is_ipv4_mapped(g1)) << v::gid_to_string(g1);
  EXPECT_TRUE(v::gid_to_string(g2).starts_with("fe80::")) << v::gid_to_string(g2);
  // Moving a QP to ERR wedges the port (the hazard the provider avoids).
  ibv_qp* q = d.qp(IBV_QPT_UC);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(d.api.modify_qp(q, &at, IBV_QP_STATE), 0);
  EXPECT_TRUE(emu::stats(d.ctx).wedged);
  d.api.destroy_qp(q);
}

TEST(VerbsEmu, FaultParametersAreValidated) {
  EXPECT_TRUE(emu::parse_faults("drop=17&corrupt=40&dup=9&delay=5:10ms&kill_port_after=100").ok());
  auto f = emu::parse_faults("delay=5:10ms");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->delay_frame, 5u);
  EXPECT_EQ(f->delay, std::chrono::milliseconds(10));
  EXPECT_FALSE(emu::parse_faults("drop=x").ok());
  EXPECT_FALSE(emu::parse_faults("drop=0").ok());
  EXPECT_FALSE(emu::parse_faults("lose=3").ok());
  EXPECT_FALSE(emu::parse_faults("delay=5").ok());
  auto p = make_provider("verbs-emu://apple-tb5?bogus=1");
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
  p = make_provider("verbs-emu://cray");
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument);
}

TEST(VerbsProvider, RealVerbsIsUnavailableHereWithAReason) {
  auto p = make_provider("verbs");
  if (p.ok()) GTEST_SKIP() << "this machine has RDMA";
  EXPECT_EQ(p.status().code(), ErrorCode::kUnavailable) << p.status().to_string();
  EXPECT_NE(p.status().to_string().find("verbs"), std::string::npos);
  auto avail = available_providers();
  EXPECT_EQ(std::find(avail.begin(), avail.end(), "verbs"), avail.end());
  EXPECT_NE(std::find(avail.begin(), avail.end(), "verbs-emu"), avail.end());
}

TEST(VerbsProvider, ProbesPortGidAndPath) {
  auto p = make_provider("verbs-emu://apple-tb5");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto* vp = dynamic_cast<v::VerbsProvider*>(p->get());
  ASSERT_NE(vp, nullptr);
  EXPECT_EQ(vp->device().port, 2) << "probed past the DOWN port 1";
  EXPECT_EQ(vp->device().gid_index, 1) << "the IPv4-mapped entry";
  EXPECT_EQ(vp->device().qp_type, IBV_QPT_UC);
  EXPECT_EQ((*p)->caps().frame_bytes, 4096u);
  EXPECT_FALSE((*p)->caps().rma_write);
  auto fallback = make_provider("verbs-emu://apple-tb5?no_ipv4=1");
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(dynamic_cast<v::VerbsProvider*>(fallback->get())->device().gid_index, 0) << "no IPv4: MAC-derived";
  auto rc = make_provider("verbs-emu://linux-rc");
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(dynamic_cast<v::VerbsProvider*>(rc->get())->device().qp_type, IBV_QPT_RC);
  EXPECT_TRUE((*rc)->caps().rma_write && (*rc)->caps().rma_read && (*rc)->caps().atomics);
}

TEST(VerbsEmu, AppleRefusesOneSidedWorkRequests) {
  RawDev da("apple-tb5"), db("apple-tb5");
  ibv_qp* a = da.qp(IBV_QPT_UC);
  ibv_qp* b = db.qp(IBV_QPT_UC);
  connect_raw(da, a, db, b);
  std::byte buf[64] = {};
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), 64, 0};
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    ibv_send_wr* bad = nullptr;
    EXPECT_NE(da.api.post_send(a, &wr, &bad), 0) << "opcode " << op << ": two-sided only";
  }
  da.api.destroy_qp(a);
  db.api.destroy_qp(b);
}

TEST(VerbsProvider, TenEndpointsFitUnderTheAppleLimitsAndTeardownNeverWedges) {
  // Ten pairs (each side a provider = one device): staging costs one MR per endpoint.
  auto a = make_provider("verbs-emu://apple-tb5");
  ASSERT_TRUE(a.ok());
  auto cq = (*a)->create_cq(64);
  std::vector<std::unique_ptr<Endpoint>> eps;
  for (int i = 0; i < 10; ++i) {
    auto ep = (*a)->create_endpoint(cq->get(), cq->get(), {});
    ASSERT_TRUE(ep.ok()) << i << ": " << ep.status().to_string();
    eps.push_back(std::move(*ep));
  }
  auto eleventh = (*a)->create_endpoint(cq->get(), cq->get(), {});
  EXPECT_EQ(eleventh.status().code(), ErrorCode::kResourceExhausted) << eleventh.status().to_string();
  eps.clear();
  EXPECT_FALSE(v::emulator_stats(a->get()).wedged);
}

// A pair over a faulty device, `n` messages a -> b with distinct payloads; every byte checked.
// Frames counted per device from 1; each staged message is 8 frames, so N = 8k+1 is the header
// frame of the sender's (k+1)th message: well past the handshake, inside the data.
constexpr int kMessages = 200;  // frame 961 is the 121st message: far past any handshake

TEST(VerbsFault, DroppedFrameIsRetransmitted) {
  auto r = run_faulty("verbs-emu://apple-tb5?drop=961", kMessages);
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  for (auto& s : r.recv_status) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).dropped, 1u);
  EXPECT_GT(v::endpoint_stats(r.pair.a->ep.get()).retransmits, 0u);
}

TEST(VerbsFault, DuplicatedFrameIsDiscarded) {
  auto r = run_faulty("verbs-emu://apple-tb5?dup=961", kMessages);
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  for (auto& s : r.recv_status) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).duplicated, 1u);
  EXPECT_GT(v::endpoint_stats(r.pair.b->ep.get()).duplicates, 0u);
}

TEST(VerbsFault, CorruptedFrameIsDetectedAndRetransmitted) {
  auto r = run_faulty("verbs-emu://apple-tb5?corrupt=961", kMessages);
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  for (auto& s : r.recv_status) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(r.data_ok) << "silent wrong data";
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).corrupted, 1u);
  EXPECT_GT(v::endpoint_stats(r.pair.b->ep.get()).bad_crc, 0u);
  EXPECT_GT(v::endpoint_stats(r.pair.a->ep.get()).retransmits, 0u);
}

TEST(VerbsFault, CorruptedPayloadFrameOnLinuxRcIsDetected) {
  // 30 KB messages: frame 8k+2 is payload, not header.
  auto r = run_faulty("verbs-emu://linux-rc?corrupt=962", kMessages, 30000);
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  for (auto& s : r.recv_status) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(r.data_ok) << "silent wrong data";
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).corrupted, 1u);
  EXPECT_GT(v::endpoint_stats(r.pair.b->ep.get()).bad_crc, 0u);
}

TEST(VerbsFault, DelayedFrameStillArrivesInOrder) {
  auto r = run_faulty("verbs-emu://apple-tb5?delay=961:30ms", kMessages);
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  for (auto& s : r.recv_status) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(r.data_ok);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).delayed, 1u);
}

TEST(VerbsFault, KilledPortIsPeerLostOnBothSides) {
  EndpointOptions opts;
  opts.peer_timeout = std::chrono::milliseconds(300);
  auto p = make_pair("verbs-emu://apple-tb5?kill_port_after=321", opts);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Side* a = p->a.get();
  Side* b = p->b.get();
  auto src = a->provider->allocate_memory(1000, kAllAccess);
  auto dst = b->provider->allocate_memory(1000, kAllAccess);
  Pump pump({a->send_cq.get(), a->recv_cq.get(), b->send_cq.get(), b->recv_cq.get()});
  Status last;
  for (int i = 0; i < 200 && last.ok(); ++i) {
    if (!b->ep->post_recv({dst->get(), 0, 1000}, i).ok()) break;
    last = a->ep->post_send({src->get(), 0, 1000}, i);
    if (!last.ok()) break;
    auto c = pump.next(a->send_cq.get(), generous());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    last = c->status;
  }
  EXPECT_EQ(last.code(), ErrorCode::kPeerLost) << last.to_string();
  EXPECT_TRUE(v::emulator_stats(a->provider.get()).port_killed);
  // b hears nothing more: declared lost within its peer timeout.
  Deadline d = generous();
  while (b->ep->status().ok() && !d.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(b->ep->status().code(), ErrorCode::kPeerLost) << b->ep->status().to_string();
}

// A staged send completes once its last chunk is in the staging slots (the caller's buffer is
// free then: go-back-N resends from the slots), not a round trip later at the ack: over a wire
// of 400 ms one way its completion comes while the message is still on its way.
TEST(VerbsStaged, SendCompletesWhenStagedNotAtTheAck) {
  auto p = make_pair("verbs-emu://apple-tb5?latency_us=400000");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Side* a = p->a.get();
  Side* b = p->b.get();
  auto src = a->provider->allocate_memory(1000, kAllAccess);
  auto dst = b->provider->allocate_memory(1000, kAllAccess);
  ASSERT_TRUE(src.ok() && dst.ok());
  fill_pattern((*src)->data(), 1000, 7);
  Pump pump({a->send_cq.get(), a->recv_cq.get(), b->send_cq.get(), b->recv_cq.get()});
  ASSERT_TRUE(b->ep->post_recv({dst->get(), 0, 1000}, 1).ok());
  ASSERT_TRUE(a->ep->post_send({src->get(), 0, 1000}, 2).ok());
  auto s = pump.next(a->send_cq.get(), generous());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->status.ok()) << s->status.to_string();
  EXPECT_EQ(s->id, 2u);
  EXPECT_EQ(s->bytes, 1000u);
  // Nothing has arrived yet (it cannot for 400 ms): the completion did not wait for the peer.
  auto early = pump.next(b->recv_cq.get(), Deadline::now());
  EXPECT_EQ(early.status().code(), ErrorCode::kTimeout) << "the receive completed before the send";
  auto r = pump.next(b->recv_cq.get(), generous());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->status.ok()) << r->status.to_string();
  EXPECT_EQ(r->bytes, 1000u);
  EXPECT_EQ(std::memcmp((*dst)->data(), (*src)->data(), 1000), 0);
}

// The ack of a message's end rides on the next slot going back: a ping-pong sends its acks in
// the replies' headers, not as slots of their own (one per message took the wire from the peer's
// next message). A few standalone acks may still go when a side is descheduled past
// kTailAckDelay; every message but the last few has a reply.
TEST(VerbsStaged, PingPongAcksRideOnTheReplies) {
  auto p = make_pair("verbs-emu://apple-tb5");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Side* a = p->a.get();
  Side* b = p->b.get();
  auto abuf = a->provider->allocate_memory(1000, kAllAccess);
  auto bbuf = b->provider->allocate_memory(1000, kAllAccess);
  ASSERT_TRUE(abuf.ok() && bbuf.ok());
  Pump pump({a->send_cq.get(), a->recv_cq.get(), b->send_cq.get(), b->recv_cq.get()});
  constexpr int kTrips = 200;
  const uint64_t acks_before = v::endpoint_stats(a->ep.get()).acks_sent + v::endpoint_stats(b->ep.get()).acks_sent;
  for (int i = 0; i < kTrips; ++i) {
    ASSERT_TRUE(b->ep->post_recv({bbuf->get(), 0, 1000}, i).ok());
    ASSERT_TRUE(a->ep->post_send({abuf->get(), 0, 1000}, i).ok());
    auto got = pump.next(b->recv_cq.get(), generous());
    ASSERT_TRUE(got.ok() && got->status.ok()) << i;
    ASSERT_TRUE(a->ep->post_recv({abuf->get(), 0, 1000}, i).ok());
    ASSERT_TRUE(b->ep->post_send({bbuf->get(), 0, 1000}, i).ok());
    auto back = pump.next(a->recv_cq.get(), generous());
    ASSERT_TRUE(back.ok() && back->status.ok()) << i;
    for (auto* cq : {a->send_cq.get(), b->send_cq.get()}) {
      auto c = pump.next(cq, generous());
      ASSERT_TRUE(c.ok() && c->status.ok()) << i;
    }
  }
  const uint64_t acks = v::endpoint_stats(a->ep.get()).acks_sent + v::endpoint_stats(b->ep.get()).acks_sent - acks_before;
  EXPECT_LT(acks, uint64_t{2 * kTrips / 4}) << "standalone acks for " << 2 * kTrips << " messages";
}

TEST(VerbsWire, Crc32cKnownVectorsAndAddressValidation) {
  EXPECT_EQ(v::crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(v::crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(v::crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  v::AddressBlob b{};
  b.mode = 1;
  b.qpn = 5;
  b.slot_bytes = v::kSlotBytes;
  b.recv_slots = v::kRecvSlots;
  auto bytes = v::encode_address(b);
  EXPECT_TRUE(v::decode_address(bytes).ok());
  bytes[20] ^= std::byte{1};
  EXPECT_FALSE(v::decode_address(bytes).ok()) << "checksum";
  EXPECT_FALSE(v::decode_address(std::span(bytes).first(10)).ok());
}

}  // namespace
}  // namespace lattice::fabric::testing
