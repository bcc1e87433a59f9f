#include "fabric_testlib.h"

#include <cstdlib>
#include <cstring>
#include <thread>

namespace lattice::fabric::testing {

const std::vector<std::string>& provider_uris() {
  // "?secure=1" loads the cluster secret from LATTICE_SECRET: a fixed test secret unless the
  // caller set one (set before any peer process is spawned, so they inherit it).
  ::setenv("LATTICE_SECRET", "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2", 0);
  static const std::vector<std::string> uris = {"shm", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0?secure=1",
                                                "verbs-emu://apple-tb5", "verbs-emu://apple-tb5?secure=1",
                                                "verbs-emu://linux-rc", "verbs-emu://linux-rc?secure=1"};
  return uris;
}

std::string uri_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string out;
  for (char c : info.param) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) {
      out += c;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

Side::~Side() {
  ep.reset();
  send_cq.reset();
  recv_cq.reset();
  provider.reset();
}

Result<std::unique_ptr<Side>> make_side(const std::string& uri, const EndpointOptions& options,
                                        const ProviderOptions& provider_options) {
  auto side = std::make_unique<Side>();
  LATTICE_ASSIGN_OR_RETURN(side->provider, make_provider(uri, provider_options));
  LATTICE_ASSIGN_OR_RETURN(side->send_cq, side->provider->create_cq(4096));
  LATTICE_ASSIGN_OR_RETURN(side->recv_cq, side->provider->create_cq(4096));
  LATTICE_ASSIGN_OR_RETURN(side->ep,
                           side->provider->create_endpoint(side->send_cq.get(), side->recv_cq.get(), options));
  return side;
}

Status connect_pair(Side& a, Side& b, Deadline deadline) {
  auto addr_a = a.ep->local_address();
  auto addr_b = b.ep->local_address();
  Status sa;
  std::thread t([&] { sa = a.ep->connect(addr_b, deadline); });
  Status sb = b.ep->connect(addr_a, deadline);
  t.join();
  LATTICE_RETURN_IF_ERROR(sa);
  return sb;
}

Result<Pair> make_pair(const std::string& uri, EndpointOptions options) {
  Pair p;
  options.peer_rank = 1;
  LATTICE_ASSIGN_OR_RETURN(p.a, make_side(uri, options));
  options.peer_rank = 0;
  LATTICE_ASSIGN_OR_RETURN(p.b, make_side(uri, options));
  LATTICE_RETURN_IF_ERROR(connect_pair(*p.a, *p.b, generous()));
  return p;
}

FaultRun run_faulty(const std::string& uri, int n, size_t len) {
  FaultRun out;
  auto p = make_pair(uri);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return out;
  out.pair = std::move(*p);
  Side* a = out.pair.a.get();
  Side* b = out.pair.b.get();
  const size_t kLen = len;
  auto src_r = a->provider->allocate_memory(kLen * n, kAllAccess);
  auto dst_r = b->provider->allocate_memory(kLen * n, kAllAccess);
  EXPECT_TRUE(src_r.ok() && dst_r.ok());
  if (!src_r.ok() || !dst_r.ok()) return out;
  out.src = std::move(*src_r);
  out.dst = std::move(*dst_r);
  MemoryRegion* src = out.src.get();
  MemoryRegion* dst = out.dst.get();
  fill_pattern(src->data(), kLen * n, 99);
  for (int i = 0; i < n; ++i) EXPECT_TRUE(b->ep->post_recv({dst, kLen * i, kLen}, i).ok());
  for (int i = 0; i < n; ++i) {
    Status st = a->ep->post_send({src, kLen * i, kLen}, 1000 + i);
    if (!st.ok()) break;
  }
  Pump pump({a->send_cq.get(), b->recv_cq.get()});
  for (int i = 0; i < n; ++i) {
    auto c = pump.next(b->recv_cq.get(), generous());
    if (!c.ok()) break;
    out.recv_status.push_back(c->status);
    if (c->status.ok() &&
        std::memcmp(dst->data() + kLen * c->id, src->data() + kLen * c->id, kLen) != 0)
      out.data_ok = false;
  }
  return out;
}

void Pump::poll_all() {
  Completion buf[64];
  for (CompletionQueue* q : cqs_) {
    size_t n = q->poll(buf);
    for (size_t i = 0; i < n; ++i) pending_[q].push_back(std::move(buf[i]));
  }
}

Result<Completion> Pump::next(CompletionQueue* cq, Deadline deadline) {
  for (;;) {
    auto& pend = pending_[cq];
    if (!pend.empty()) {
      Completion c = std::move(pend.front());
      pend.pop_front();
      return c;
    }
    if (deadline.expired()) return Timeout("test pump: no completion before the deadline");
    poll_all();
    if (pending_[cq].empty()) std::this_thread::yield();
  }
}

void fill_pattern(std::byte* dst, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 0x9e3779b9u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    dst[i] = static_cast<std::byte>((x & 0xff) | 1);  // never zero: zero means "untouched"
  }
}

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

std::string hex_encode(const std::vector<std::byte>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte b : bytes) {
    s += digits[std::to_integer<unsigned>(b) >> 4];
    s += digits[std::to_integer<unsigned>(b) & 15];
  }
  return s;
}

std::vector<std::byte> hex_decode(const std::string& hex) {
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::byte> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    int h = val(hex[i]), l = val(hex[i + 1]);
    if (h < 0 || l < 0) break;
    out.push_back(static_cast<std::byte>(h * 16 + l));
  }
  return out;
}

}  // namespace lattice::fabric::testing
