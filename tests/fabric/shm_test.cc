// White-box tests of the shm provider: a peer that scribbles on its own (peer-readable) ring
// must fail only that endpoint with a clear error, never crash or corrupt this process; a
// wrong protocol version is refused; nothing is left in /dev/shm.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

#include "fabric_testlib.h"
#include "lattice/fabric/shm/endpoint.h"

namespace lattice::fabric::testing {
namespace {

using namespace lattice::fabric::shm;

// Maps the endpoint segment behind an shm address blob read-write, as its owner would.
struct SegmentView {
  explicit SegmentView(const std::vector<std::byte>& blob) {
    AddressBlob b{};
    if (blob.size() != sizeof b) return;
    std::memcpy(&b, blob.data(), sizeof b);
    std::string path = "/proc/self/fd/" + std::to_string(b.endpoint_fd);
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    void* p = mmap(nullptr, kEndpointSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED) base = static_cast<std::byte*>(p);
  }
  ~SegmentView() {
    if (base) munmap(base, kEndpointSegmentBytes);
  }
  SlotHeader* slot(uint64_t pos) { return reinterpret_cast<SlotHeader*>(base + kPage + (pos % kSlots) * kSlotBytes); }
  EndpointHeader* header() { return reinterpret_cast<EndpointHeader*>(base); }
  std::byte* base = nullptr;
};

void publish(SlotHeader* s, uint64_t seq) { std::atomic_ref<uint64_t>(s->seq).store(seq, std::memory_order_release); }

struct Corruption {
  const char* name;
  std::function<void(SlotHeader*)> apply;
};

class ShmCorruptRing : public ::testing::TestWithParam<int> {};

const Corruption kCorruptions[] = {
    {"unknown type", [](SlotHeader* s) { s->type = 99; publish(s, 1); }},
    {"huge fragment",
     [](SlotHeader* s) {
       s->type = kSlotEager;
       s->flags = kFirstFragment;
       s->frag_bytes = 0xffffffffu;
       s->msg_bytes = 100;
       publish(s, 1);
     }},
    {"huge eager message",
     [](SlotHeader* s) {
       s->type = kSlotEager;
       s->flags = kFirstFragment;
       s->frag_bytes = 100;
       s->msg_bytes = uint64_t{1} << 40;
       publish(s, 1);
     }},
    {"fragment overruns message",
     [](SlotHeader* s) {
       s->type = kSlotEager;
       s->flags = kFirstFragment;
       s->frag_bytes = 200;
       s->msg_bytes = 100;
       publish(s, 1);
     }},
    {"continuation without start",
     [](SlotHeader* s) {
       s->type = kSlotEager;
       s->flags = 0;
       s->frag_bytes = 10;
       s->msg_bytes = 10;
       publish(s, 1);
     }},
    {"sequence from the future", [](SlotHeader* s) { publish(s, 12345); }},
    {"rendezvous with an unknown key",
     [](SlotHeader* s) {
       RndvPayload p{0xdeadbeefcafef00dull, 0, 0};
       std::memcpy(reinterpret_cast<std::byte*>(s) + kSlotHeaderBytes, &p, sizeof p);
       s->type = kSlotRndv;
       s->frag_bytes = sizeof p;
       s->msg_bytes = 1 << 20;
       publish(s, 1);
     }},
    {"rendezvous out of sequence",
     [](SlotHeader* s) {
       RndvPayload p{1, 0, 7};
       std::memcpy(reinterpret_cast<std::byte*>(s) + kSlotHeaderBytes, &p, sizeof p);
       s->type = kSlotRndv;
       s->frag_bytes = sizeof p;
       s->msg_bytes = 1 << 20;
       publish(s, 1);
     }},
};

TEST_P(ShmCorruptRing, FailsThatEndpointOnlyWithAClearError) {
  const Corruption& c = kCorruptions[GetParam()];
  SCOPED_TRACE(c.name);
  auto bad = make_pair("shm");
  auto good = make_pair("shm");
  ASSERT_TRUE(bad.ok() && good.ok());
  Side& a = *bad->a;
  Side& b = *bad->b;
  SegmentView view(a.ep->local_address());
  ASSERT_NE(view.base, nullptr);
  c.apply(view.slot(0));  // a's ring, which b reads

  auto buf = b.provider->allocate_memory(1 << 20, kAllAccess);
  ASSERT_TRUE(buf.ok());
  ASSERT_TRUE(b.ep->post_recv({buf->get(), 0, 1 << 20}, 1).ok());
  Completion out[1];
  auto r = b.recv_cq->wait(out, generous());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(out[0].status.code() == ErrorCode::kCorrupt || out[0].status.code() == ErrorCode::kAccessDenied)
      << out[0].status.to_string();
  EXPECT_EQ(out[0].status.peer(), 0) << "the error names the peer rank";
  EXPECT_EQ(b.ep->status().code(), out[0].status.code()) << "sticky";

  // The well-behaved side learns that its peer gave up on the connection.
  auto abuf = a.provider->allocate_memory(8, kAllAccess);
  ASSERT_TRUE(abuf.ok());
  Status posted = a.ep->post_recv({abuf->get(), 0, 8}, 2);
  if (posted.ok()) {
    r = a.recv_cq->wait(out, generous());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    posted = out[0].status;
  }
  EXPECT_EQ(posted.code(), ErrorCode::kPeerLost) << posted.to_string();

  // Other endpoints go on.
  auto src = good->a->provider->allocate_memory(100, kAllAccess);
  auto dst = good->b->provider->allocate_memory(100, kAllAccess);
  fill_pattern((*src)->data(), 100, 3);
  ASSERT_TRUE(good->b->ep->post_recv({dst->get(), 0, 100}, 1).ok());
  ASSERT_TRUE(good->a->ep->post_send({src->get(), 0, 100}, 2).ok());
  r = good->b->recv_cq->wait(out, generous());
  ASSERT_TRUE(r.ok() && out[0].status.ok());
  EXPECT_EQ(std::memcmp((*dst)->data(), (*src)->data(), 100), 0);
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmCorruptRing, ::testing::Range(0, static_cast<int>(std::size(kCorruptions))));

TEST(ShmProvider, BogusConsumedIndexFailsTheSender) {
  auto pair = make_pair("shm");
  ASSERT_TRUE(pair.ok());
  // b claims to have consumed far more than a ever sent; a notices when its ring fills.
  SegmentView view(pair->b->ep->local_address());
  ASSERT_NE(view.base, nullptr);
  std::atomic_ref<uint64_t>(view.header()->rx_consumed).store(1u << 30);
  auto src = pair->a->provider->allocate_memory(64, kAllAccess);
  Status first_error;
  for (int i = 0; i < 2 * static_cast<int>(kSlots) && first_error.ok(); ++i) {
    Status s = pair->a->ep->post_send({src->get(), 0, 8}, i);
    if (!s.ok()) first_error = s;
  }
  Completion out[16];
  for (int i = 0; i < 100 && pair->a->ep->status().ok(); ++i) (void)pair->a->send_cq->poll(out);
  EXPECT_EQ(pair->a->ep->status().code(), ErrorCode::kCorrupt) << pair->a->ep->status().to_string();
}

TEST(ShmProvider, WrongProtocolVersionIsRefused) {
  auto a = make_side("shm");
  auto b = make_side("shm");
  ASSERT_TRUE(a.ok() && b.ok());
  auto blob = (*b)->ep->local_address();
  AddressBlob ab{};
  ASSERT_EQ(blob.size(), sizeof ab);
  std::memcpy(&ab, blob.data(), sizeof ab);
  ab.version = kVersion + 1;
  std::memcpy(blob.data(), &ab, sizeof ab);
  Status s = (*a)->ep->connect(blob, generous());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt) << s.to_string();
  EXPECT_NE(s.message().find("version"), std::string::npos) << s.to_string();
  EXPECT_EQ((*a)->ep->status().code(), ErrorCode::kCorrupt) << "a refused connect fails the endpoint";
}

TEST(ShmProvider, EndpointSegmentMismatchIsRefused) {
  // A blob naming a real fd whose nonce does not match: refused, not mapped blindly.
  auto a = make_side("shm");
  auto b = make_side("shm");
  ASSERT_TRUE(a.ok() && b.ok());
  auto blob = (*b)->ep->local_address();
  AddressBlob ab{};
  std::memcpy(&ab, blob.data(), sizeof ab);
  ab.endpoint_nonce ^= 1;
  std::memcpy(blob.data(), &ab, sizeof ab);
  EXPECT_EQ((*a)->ep->connect(blob, generous()).code(), ErrorCode::kCorrupt);
  // And a provider fd swapped for the endpoint fd: the inode check refuses it.
  auto c = make_side("shm");
  ASSERT_TRUE(c.ok());
  std::memcpy(&ab, blob.data(), sizeof ab);
  ab.endpoint_nonce ^= 1;
  ab.endpoint_fd = ab.provider_fd;
  std::memcpy(blob.data(), &ab, sizeof ab);
  EXPECT_FALSE((*c)->ep->connect(blob, generous()).ok());
}

TEST(ShmProvider, UnsealedSegmentIsRefused) {
  // A blob pointing at a memfd that could shrink under our mapping must not be mapped.
  auto a = make_side("shm");
  auto b = make_side("shm");
  ASSERT_TRUE(a.ok() && b.ok());
  int fd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kEndpointSegmentBytes), 0);
  struct stat st{};
  ASSERT_EQ(fstat(fd, &st), 0);
  auto blob = (*b)->ep->local_address();
  AddressBlob ab{};
  std::memcpy(&ab, blob.data(), sizeof ab);
  ab.endpoint_fd = fd;
  ab.endpoint_ino = st.st_ino;
  std::memcpy(blob.data(), &ab, sizeof ab);
  Status s = (*a)->ep->connect(blob, generous());
  EXPECT_EQ(s.code(), ErrorCode::kCorrupt) << s.to_string();
  close(fd);
}

size_t dev_shm_entries() {
  size_t n = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST(ShmProvider, LeavesNothingInDevShm) {
  size_t before = dev_shm_entries();
  {
    auto pair = make_pair("shm");
    ASSERT_TRUE(pair.ok());
    auto r = pair->a->provider->allocate_memory(1 << 20, kAllAccess);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(dev_shm_entries(), before) << "segments are memfds, never named";
  }
  EXPECT_EQ(dev_shm_entries(), before);
}

TEST(ShmProvider, AtomicsOnCallerMemoryAreRefusedClearly) {
  auto pair = make_pair("shm");
  ASSERT_TRUE(pair.ok());
  alignas(8) uint64_t word = 5;
  auto target = pair->b->provider->register_memory(&word, 8, kAllAccess);
  auto res = pair->a->provider->allocate_memory(8, kAllAccess);
  ASSERT_TRUE(target.ok() && res.ok());
  ASSERT_TRUE(pair->a->ep->post_fetch_add({res->get(), 0, 8}, {(*target)->key(), 0, 8}, 1, 1).ok());
  Completion out[1];
  auto r = pair->a->send_cq->wait(out, generous());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(out[0].status.code(), ErrorCode::kAccessDenied);
  EXPECT_NE(out[0].status.message().find("allocate_memory"), std::string::npos) << out[0].status.to_string();
  EXPECT_EQ(word, 5u);
}

TEST(ShmProvider, DeregisteredRegionIsNoLongerReachable) {
  auto pair = make_pair("shm");
  ASSERT_TRUE(pair.ok());
  auto target = pair->b->provider->allocate_memory(64, kAllAccess);
  auto src = pair->a->provider->allocate_memory(8, kAllAccess);
  ASSERT_TRUE(target.ok() && src.ok());
  uint64_t key = (*target)->key();
  ASSERT_TRUE(pair->a->ep->post_write({src->get(), 0, 8}, {key, 0, 8}, 1).ok());
  Completion out[1];
  ASSERT_TRUE(pair->a->send_cq->wait(out, generous()).ok());
  ASSERT_TRUE(out[0].status.ok());  // the mapping is now cached on a's side
  target->reset();
  ASSERT_TRUE(pair->a->ep->post_write({src->get(), 0, 8}, {key, 0, 8}, 2).ok());
  ASSERT_TRUE(pair->a->send_cq->wait(out, generous()).ok());
  EXPECT_EQ(out[0].status.code(), ErrorCode::kAccessDenied) << out[0].status.to_string();
}

TEST(ShmProvider, MappedPeerRegionTakesPlainLoadsAndStores) {
  auto pair = make_pair("shm");
  ASSERT_TRUE(pair.ok());
  ASSERT_TRUE(pair->a->provider->caps().map_remote);
  auto target = pair->b->provider->allocate_memory(4096, kAllAccess);
  auto ro = pair->b->provider->allocate_memory(64, kLocalRead | kLocalWrite | kRemoteRead);
  ASSERT_TRUE(target.ok() && ro.ok());
  const uint64_t key = (*target)->key();
  auto m = pair->a->ep->map_remote({key, 128, 256}, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->size(), 256u);
  EXPECT_TRUE((*m)->live());
  // A store through the mapping is the peer's memory, and the peer's stores are seen here.
  std::vector<std::byte> bytes = pattern(256, 7);
  std::memcpy((*m)->data(), bytes.data(), bytes.size());
  EXPECT_EQ(std::memcmp((*target)->data() + 128, bytes.data(), bytes.size()), 0);
  (*target)->data()[128] = std::byte{0x5a};
  EXPECT_EQ((*m)->data()[0], std::byte{0x5a});
  // Out of bounds, rights the region does not grant, bad access bits, unknown keys: refused.
  EXPECT_EQ(pair->a->ep->map_remote({key, 4000, 200}, kRemoteWrite).status().code(), ErrorCode::kAccessDenied);
  EXPECT_EQ(pair->a->ep->map_remote({(*ro)->key(), 0, 64}, kRemoteWrite).status().code(), ErrorCode::kAccessDenied);
  EXPECT_TRUE(pair->a->ep->map_remote({(*ro)->key(), 0, 64}, kRemoteRead).ok());
  EXPECT_EQ(pair->a->ep->map_remote({key, 0, 8}, kRemoteAtomic).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pair->a->ep->map_remote({key ^ 1, 0, 8}, kRemoteRead).status().code(), ErrorCode::kAccessDenied);
  // The peer's caller-registered memory does not map (it is not a shared segment).
  std::vector<std::byte> user(64);
  auto reg = pair->b->provider->register_memory(user.data(), user.size(), kAllAccess);
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(pair->a->ep->map_remote({(*reg)->key(), 0, 64}, kRemoteRead).status().code(), ErrorCode::kUnavailable);
  // The peer lets go of the region: the mapping stays usable (stores go nowhere) and says so.
  target->reset();
  EXPECT_FALSE((*m)->live());
  std::memset((*m)->data(), 1, (*m)->size());
  EXPECT_EQ(pair->a->ep->map_remote({key, 0, 8}, kRemoteRead).status().code(), ErrorCode::kAccessDenied);
}

TEST(ShmProvider, MappingOutlivesItsEndpoint) {
  auto pair = make_pair("shm");
  ASSERT_TRUE(pair.ok());
  auto target = pair->b->provider->allocate_memory(64, kAllAccess);
  ASSERT_TRUE(target.ok());
  auto m = pair->a->ep->map_remote({(*target)->key(), 0, 64}, kRemoteWrite);
  ASSERT_TRUE(m.ok());
  pair->a->ep.reset();
  std::memset((*m)->data(), 3, 64);
  EXPECT_EQ((*target)->data()[63], std::byte{3});
  EXPECT_TRUE((*m)->live());
}

TEST(ShmProvider, WithoutCrossMemoryAttachLargeSendsUseTheRing) {
  // As on hosts where Yama refuses process_vm_readv between siblings: large sends from caller
  // memory still arrive (through the ring), one-sided access to caller memory says why not.
  auto pair = make_pair("shm://?cma=0");
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  const size_t size = (size_t{1} << 20) + 3;
  std::vector<std::byte> src = pattern(size, 31), dst(size + 8, std::byte{0});
  auto rs = pair->a->provider->register_memory(src.data(), src.size(), kAllAccess);
  auto rd = pair->b->provider->register_memory(dst.data(), dst.size(), kAllAccess);
  ASSERT_TRUE(rs.ok() && rd.ok());
  Pump pump({pair->a->send_cq.get(), pair->b->recv_cq.get()});
  ASSERT_TRUE(pair->b->ep->post_recv({rd->get(), 0, size}, 1).ok());
  ASSERT_TRUE(pair->a->ep->post_send({rs->get(), 0, size}, 2).ok());
  auto r = pump.next(pair->b->recv_cq.get(), generous());
  ASSERT_TRUE(r.ok() && r->status.ok()) << (r.ok() ? r->status.to_string() : r.status().to_string());
  EXPECT_EQ(r->bytes, size);
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), size), 0);
  auto s = pump.next(pair->a->send_cq.get(), generous());
  ASSERT_TRUE(s.ok() && s->status.ok());
  // One-sided access to the peer's caller memory needs cross-memory attach.
  auto local = pair->a->provider->allocate_memory(64, kAllAccess);
  ASSERT_TRUE(pair->a->ep->post_write({local->get(), 0, 64}, {(*rd)->key(), 0, 64}, 3).ok());
  auto w = pump.next(pair->a->send_cq.get(), generous());
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->status.code(), ErrorCode::kUnavailable) << w->status.to_string();
  EXPECT_NE(w->status.message().find("cross-memory attach"), std::string::npos);
}

TEST(ShmProvider, UriOptions) {
  EXPECT_TRUE(make_provider("shm").ok());
  EXPECT_TRUE(make_provider("shm://?busy_poll=1").ok());
  EXPECT_TRUE(make_provider("shm://?busy_poll=0&cma=0").ok());
  EXPECT_EQ(make_provider("shm://?frobnicate=1").status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lattice::fabric::testing
