#include "fabric_bench.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

namespace lattice::cli {

using fabric::Completion;
using fabric::LocalSlice;
using fabric::RemoteSlice;

namespace {

constexpr uint64_t kCtlMagic = 0x4c41545443544c31ull;  // "LATTCTL1"
constexpr uint64_t kRecvTag = 1ull << 63;              // WorkId high bit: a receive (low bits: slot)
constexpr int kSpinsPerCheck = 1024;                    // spins between deadline/status checks

enum CtlKind : uint32_t { kStart = 1, kReady, kEnd, kAck, kQuit, kBye };
enum CtlFlags : uint32_t { kFlagLatency = 1, kFlagBandwidth = 2, kFlagCheck = 4 };

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The payload of one iteration: a pseudo-random stream from (seed), distinct per iteration.
void fill_pattern(std::byte* p, size_t n, uint64_t seed) {
  uint64_t x = seed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix(x);
    std::memcpy(p + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = splitmix(x);
    std::memcpy(p + i, &v, n - i);
  }
}

// Index of the first byte that differs from the pattern, or n if all match.
size_t mismatch_pattern(const std::byte* p, size_t n, uint64_t seed) {
  uint64_t x = seed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = splitmix(x);
    if (std::memcmp(p + i, &v, 8) != 0) {
      for (size_t k = 0; k < 8; ++k)
        if (p[i + k] != reinterpret_cast<const std::byte*>(&v)[k]) return i + k;
    }
  }
  if (i < n) {
    uint64_t v = splitmix(x);
    for (size_t k = 0; i + k < n; ++k)
      if (p[i + k] != reinterpret_cast<const std::byte*>(&v)[k]) return i + k;
  }
  return n;
}

uint64_t seed_for(BenchOp op, size_t bytes, uint64_t iter, uint64_t direction) {
  return (static_cast<uint64_t>(op) << 56) ^ (static_cast<uint64_t>(bytes) << 20) ^ (iter << 2) ^ direction;
}

inline double ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

}  // namespace

// Control message: 64 bytes, host byte order (both sides of a benchmark run the same binary
// on the same kind of machine; a wrong magic is rejected as corrupt).
struct BenchSide::Ctl {
  uint64_t magic = kCtlMagic;
  uint32_t kind = 0;
  uint32_t op = 0;
  uint64_t bytes = 0;
  uint64_t iters = 0;
  uint64_t warmup = 0;
  uint64_t count = 0;
  uint32_t window = 0;
  uint32_t flags = 0;
  uint64_t value = 0;
};
static_assert(sizeof(BenchSide::Ctl) == 64);

std::string_view to_string(BenchOp op) {
  switch (op) {
    case BenchOp::kSend: return "send";
    case BenchOp::kWrite: return "write";
    case BenchOp::kRead: return "read";
  }
  return "?";
}

Result<BenchOp> parse_bench_op(std::string_view s) {
  if (s == "send") return BenchOp::kSend;
  if (s == "write") return BenchOp::kWrite;
  if (s == "read") return BenchOp::kRead;
  return InvalidArgument("--op must be send, write or read, not '" + std::string(s) + "'");
}

BenchLayout BenchLayout::for_run(size_t max_bytes, int window, bool check) {
  BenchLayout l;
  size_t need = std::max<size_t>(max_bytes, sizeof(BenchSide::Ctl));
  size_t align = need >= 4096 ? 4096 : 64;
  l.slot_bytes = (need + align - 1) / align * align;
  l.n_slots = check ? static_cast<size_t>(std::max(window, 1)) + 2 : 1;
  l.unchecked_recvs = std::clamp<size_t>(static_cast<size_t>(std::max(window, 1)) + 2, 18, kMaxUncheckedRecvs);
  return l;
}

int scaled_iters(int iters, size_t bytes) {
  constexpr size_t kFull = 64 * 1024;
  if (bytes <= kFull || iters <= 20) return iters;
  double scaled = static_cast<double>(iters) * kFull / static_cast<double>(bytes);
  return std::max(20, static_cast<int>(scaled));
}

// ---------------------------------------------------------------------------------------
// Setup helpers

Result<BenchEnd> make_bench_end(fabric::Provider& provider, const BenchLayout& layout, int window, int peer_rank) {
  BenchEnd e;
  LATTICE_ASSIGN_OR_RETURN(e.cq, provider.create_cq(static_cast<size_t>(2 * (window + 4) + 64)));
  LATTICE_ASSIGN_OR_RETURN(e.region, provider.allocate_memory(layout.region_bytes(), fabric::kAllAccess));
  fabric::EndpointOptions eo;
  eo.peer_rank = peer_rank;
  LATTICE_ASSIGN_OR_RETURN(e.ep, provider.create_endpoint(e.cq.get(), e.cq.get(), eo));
  return e;
}

std::string encode_peer_info(const BenchEnd& end, std::string_view provider_name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (std::byte b : end.ep->local_address()) {
    hex.push_back(kHex[std::to_integer<uint8_t>(b) >> 4]);
    hex.push_back(kHex[std::to_integer<uint8_t>(b) & 15]);
  }
  nlohmann::json j{{"provider", provider_name},
                   {"address", hex},
                   {"key", end.region->key()},
                   {"size", end.region->size()}};
  return j.dump();
}

Result<PeerInfo> decode_peer_info(std::string_view text, const BenchLayout& expected) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("peer info is not a JSON object");
  if (!j.contains("provider") || !j["provider"].is_string() || !j.contains("address") ||
      !j["address"].is_string() || !j.contains("key") || !j["key"].is_number_unsigned() ||
      !j.contains("size") || !j["size"].is_number_unsigned())
    return Corrupt("peer info lacks provider/address/key/size");
  PeerInfo p;
  p.provider = j["provider"].get<std::string>();
  const std::string hex = j["address"].get<std::string>();
  if (hex.size() % 2 != 0 || hex.size() > 2 * 65536) return Corrupt("peer address has a bad length");
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nib(hex[i]), lo = nib(hex[i + 1]);
    if (hi < 0 || lo < 0) return Corrupt("peer address is not lowercase hex");
    p.address.push_back(static_cast<std::byte>(hi * 16 + lo));
  }
  p.region.key = j["key"].get<uint64_t>();
  p.region.size = j["size"].get<uint64_t>();
  if (p.region.size < expected.region_bytes())
    return Corrupt("peer region of " + std::to_string(p.region.size) + " bytes is smaller than the " +
                   std::to_string(expected.region_bytes()) + " this run needs");
  return p;
}

// ---------------------------------------------------------------------------------------
// BenchSide: plumbing

BenchSide::BenchSide(fabric::Provider* provider, fabric::Endpoint* ep, fabric::CompletionQueue* cq,
                     fabric::MemoryRegion* region, fabric::RemoteRegion peer, BenchLayout layout, int peer_rank)
    : provider_(provider),
      ep_(ep),
      cq_(cq),
      region_(region),
      peer_(peer),
      layout_(layout),
      peer_rank_(peer_rank),
      max_inline_(provider->caps().max_inline) {}

LocalSlice BenchSide::recv_slot(size_t i, size_t n) const { return {region_, layout_.recv_offset(i), n}; }
LocalSlice BenchSide::send_slot(size_t i, size_t n) const { return {region_, layout_.send_offset(i), n}; }
LocalSlice BenchSide::rma_slot(size_t i, size_t n) const { return {region_, layout_.rma_offset(i), n}; }
RemoteSlice BenchSide::peer_rma_slot(size_t i, size_t n) const { return {peer_.key, layout_.rma_offset(i), n}; }

Status BenchSide::start(Deadline deadline) {
  n_recvs_ = layout_.n_recvs();
  for (size_t i = 0; i < n_recvs_; ++i) LATTICE_RETURN_IF_ERROR(repost_recv(i));
  // A recognisable non-zero payload for runs without --check.
  std::memset(send_slot(0, 0).data(), 0x5a, layout_.n_slots * layout_.slot_bytes);
  return Status::Ok();
}

Status BenchSide::repost_recv(size_t slot) {
  return ep_->post_recv(recv_slot(slot, layout_.slot_bytes), kRecvTag | slot);
}

Status BenchSide::poll_once(bool block) {
  if (!error_.ok()) return error_;
  std::array<Completion, 32> comps;
  size_t n = 0;
  if (block) {
    auto r = cq_->wait(comps, Deadline::after(std::chrono::milliseconds(1)));
    if (r.ok()) n = *r;
    else if (r.status().code() != ErrorCode::kTimeout) return r.status().with_context("bench: waiting on the queue");
  } else {
    n = cq_->poll(comps);
  }
  // Handle the whole batch even after an error: a message that arrived before the failure
  // (the peer's last word before it exited) is still delivered by wait_recv().
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = comps[i];
    if (!c.status.ok()) {
      if (error_.ok())
        error_ = c.status.with_context("bench: " + std::string(fabric::to_string(c.op)) + " completion");
      continue;
    }
    if (c.id & kRecvTag) {
      ready_recvs_.emplace_back(static_cast<size_t>(c.id & ~kRecvTag), c.bytes);
    } else {
      --outstanding_;
    }
  }
  return error_;
}

Status BenchSide::wait_recv(size_t* slot, size_t* n_bytes, Deadline deadline, bool block) {
  for (int spins = 0;; ++spins) {
    if (!ready_recvs_.empty()) {
      *slot = ready_recvs_.front().first;
      *n_bytes = ready_recvs_.front().second;
      ready_recvs_.pop_front();
      return Status::Ok();
    }
    if (Status st = poll_once(block); !st.ok() && ready_recvs_.empty()) return st;
    if (spins == kSpinsPerCheck || block) {
      spins = 0;
      if (deadline.expired()) return Timeout("bench: waiting for a message from the peer", peer_rank_);
      LATTICE_RETURN_IF_ERROR(ep_->status());
    }
  }
}

Status BenchSide::wait_sends_below(int limit, Deadline deadline) {
  for (int spins = 0; outstanding_ >= limit; ++spins) {
    LATTICE_RETURN_IF_ERROR(poll_once());
    if (spins == kSpinsPerCheck) {
      spins = 0;
      if (deadline.expired()) return Timeout("bench: waiting for our operations to complete", peer_rank_);
      LATTICE_RETURN_IF_ERROR(ep_->status());
    }
  }
  return Status::Ok();
}

Status BenchSide::drain(Deadline deadline) { return wait_sends_below(1, deadline); }

Status BenchSide::post_ctl(const Ctl& c) {
  // Control messages are sent only when nothing else is in flight (see the callers), so the
  // one control buffer is free.
  LocalSlice s{region_, layout_.ctl_offset(), sizeof(Ctl)};
  std::memcpy(s.data(), &c, sizeof c);
  for (;;) {
    Status st = ep_->post_send(s, next_id_++);
    if (st.ok()) break;
    if (st.code() != ErrorCode::kResourceExhausted) return st;
    LATTICE_RETURN_IF_ERROR(poll_once());
  }
  ++outstanding_;
  return Status::Ok();
}

Result<BenchSide::Ctl> BenchSide::wait_ctl(uint32_t kind, Deadline deadline, bool block) {
  size_t slot = 0, n = 0;
  LATTICE_RETURN_IF_ERROR(wait_recv(&slot, &n, deadline, block));
  Ctl c;
  if (n != sizeof(Ctl)) {
    (void)repost_recv(slot);
    return Corrupt("bench: expected a " + std::to_string(sizeof(Ctl)) + "-byte control message, got " +
                       std::to_string(n) + " bytes (is the peer running the same lattice?)",
                   peer_rank_);
  }
  std::memcpy(&c, recv_slot(slot, 0).data(), sizeof c);
  LATTICE_RETURN_IF_ERROR(repost_recv(slot));
  if (c.magic != kCtlMagic) return Corrupt("bench: bad control message magic", peer_rank_);
  if (kind != 0 && c.kind != kind)
    return Corrupt("bench: expected control message " + std::to_string(kind) + ", got " + std::to_string(c.kind),
                   peer_rank_);
  return c;
}

// ---------------------------------------------------------------------------------------
// Latency

Status BenchSide::lat_send(const PhaseSpec& s, bool initiator, std::vector<double>* rtt_ns, uint64_t* errors,
                           Deadline d) {
  const int total = s.warmup + s.iters;
  const bool can_reuse = s.bytes <= max_inline_;  // else wait for the send completion before rewriting
  LocalSlice src = send_slot(0, s.bytes);
  for (int i = 0; i < total; ++i) {
    size_t slot = 0, n = 0;
    if (initiator) {
      if (s.check) {
        LATTICE_RETURN_IF_ERROR(wait_sends_below(1, d));
        fill_pattern(src.data(), s.bytes, seed_for(s.op, s.bytes, static_cast<uint64_t>(i), 0));
      } else if (!can_reuse) {
        LATTICE_RETURN_IF_ERROR(wait_sends_below(8, d));
      }
      auto t0 = Clock::now();
      LATTICE_RETURN_IF_ERROR(ep_->post_send(src, next_id_++));
      ++outstanding_;
      LATTICE_RETURN_IF_ERROR(wait_recv(&slot, &n, d));
      auto t1 = Clock::now();
      if (i >= s.warmup) rtt_ns->push_back(ns_between(t0, t1));
    } else {
      LATTICE_RETURN_IF_ERROR(wait_recv(&slot, &n, d));
    }
    if (n != s.bytes)
      return Corrupt("bench: expected a " + std::to_string(s.bytes) + "-byte message, got " + std::to_string(n),
                     peer_rank_);
    if (s.check &&
        mismatch_pattern(recv_slot(slot, 0).data(), n, seed_for(s.op, s.bytes, static_cast<uint64_t>(i), initiator ? 1 : 0)) != n)
      ++*errors;
    LATTICE_RETURN_IF_ERROR(repost_recv(slot));
    if (!initiator) {
      if (s.check) {
        LATTICE_RETURN_IF_ERROR(wait_sends_below(1, d));
        fill_pattern(src.data(), s.bytes, seed_for(s.op, s.bytes, static_cast<uint64_t>(i), 1));
      } else if (!can_reuse) {
        LATTICE_RETURN_IF_ERROR(wait_sends_below(8, d));
      }
      LATTICE_RETURN_IF_ERROR(ep_->post_send(src, next_id_++));
      ++outstanding_;
    }
    // Keep the completion queue from filling with send completions.
    if (outstanding_ > 8) LATTICE_RETURN_IF_ERROR(poll_once());
  }
  return Status::Ok();
}

Status BenchSide::lat_write(const PhaseSpec& s, bool initiator, std::vector<double>* rtt_ns, uint64_t* errors,
                            Deadline d) {
  // ib_write_lat: the last byte of the region carries a sequence value 1..255; the receiver
  // spins on it (and on the completion queue, which drives progress for providers that need
  // the caller's thread). Both rma areas were zeroed before the phase's handshake.
  const int total = s.warmup + s.iters;
  LocalSlice src = send_slot(0, s.bytes);
  volatile const uint8_t* mine = reinterpret_cast<volatile const uint8_t*>(rma_slot(0, 0).data() + s.bytes - 1);
  uint8_t seq = 0;
  auto wait_seq = [&](uint8_t want) -> Status {
    for (int spins = 0; __atomic_load_n(mine, __ATOMIC_ACQUIRE) != want; ++spins) {
      LATTICE_RETURN_IF_ERROR(poll_once());
      if (spins == kSpinsPerCheck) {
        spins = 0;
        if (d.expired()) return Timeout("bench: waiting for the peer's write", peer_rank_);
        LATTICE_RETURN_IF_ERROR(ep_->status());
      }
    }
    return Status::Ok();
  };
  auto check_payload = [&](int i, uint64_t dir) -> Status {
    if (!s.check || s.bytes < 2) return Status::Ok();
    // The sequence byte may become visible before the rest of the payload (no ordering within
    // one write is promised): retry briefly before calling it a mismatch.
    auto until = Deadline::after(std::chrono::milliseconds(200)).min(d);
    const std::byte* p = rma_slot(0, 0).data();
    while (mismatch_pattern(p, s.bytes - 1, seed_for(s.op, s.bytes, static_cast<uint64_t>(i), dir)) != s.bytes - 1) {
      if (until.expired()) {
        ++*errors;
        break;
      }
      LATTICE_RETURN_IF_ERROR(poll_once());
    }
    return Status::Ok();
  };
  auto post = [&](int i, uint64_t dir) -> Status {
    LATTICE_RETURN_IF_ERROR(wait_sends_below(1, d));  // the source buffer is about to change
    if (s.check) fill_pattern(src.data(), s.bytes, seed_for(s.op, s.bytes, static_cast<uint64_t>(i), dir));
    src.data()[s.bytes - 1] = static_cast<std::byte>(seq);
    LATTICE_RETURN_IF_ERROR(ep_->post_write(src, peer_rma_slot(0, s.bytes), next_id_++));
    ++outstanding_;
    return Status::Ok();
  };
  for (int i = 0; i < total; ++i) {
    seq = static_cast<uint8_t>(seq % 255 + 1);
    if (initiator) {
      auto t0 = Clock::now();
      LATTICE_RETURN_IF_ERROR(post(i, 0));
      LATTICE_RETURN_IF_ERROR(wait_seq(seq));
      auto t1 = Clock::now();
      if (i >= s.warmup) rtt_ns->push_back(ns_between(t0, t1));
      LATTICE_RETURN_IF_ERROR(check_payload(i, 1));
    } else {
      LATTICE_RETURN_IF_ERROR(wait_seq(seq));
      LATTICE_RETURN_IF_ERROR(check_payload(i, 0));
      LATTICE_RETURN_IF_ERROR(post(i, 1));
    }
  }
  return Status::Ok();
}

Status BenchSide::lat_read(const PhaseSpec& s, std::vector<double>* rtt_ns, uint64_t* errors, Deadline d) {
  const int total = s.warmup + s.iters;
  LocalSlice dst = send_slot(0, s.bytes);
  const uint64_t seed = seed_for(s.op, s.bytes, 0, 2);
  for (int i = 0; i < total; ++i) {
    if (s.check) std::memset(dst.data(), 0, s.bytes);
    auto t0 = Clock::now();
    LATTICE_RETURN_IF_ERROR(ep_->post_read(dst, peer_rma_slot(0, s.bytes), next_id_++));
    ++outstanding_;
    LATTICE_RETURN_IF_ERROR(wait_sends_below(1, d));
    auto t1 = Clock::now();
    if (i >= s.warmup) rtt_ns->push_back(ns_between(t0, t1));
    if (s.check && mismatch_pattern(dst.data(), s.bytes, seed) != s.bytes) ++*errors;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Bandwidth

Status BenchSide::bw_initiator(const PhaseSpec& s, PhaseResult* r, Deadline d) {
  const int window = std::max(1, s.window);
  uint64_t posted = 0;
  auto post_one = [&]() -> Status {
    for (;;) {
      size_t slot = posted % layout_.n_slots;
      if (s.check && s.op != BenchOp::kRead)
        fill_pattern(send_slot(slot, 0).data(), s.bytes, seed_for(s.op, s.bytes, posted, 3));
      Status st;
      switch (s.op) {
        case BenchOp::kSend: st = ep_->post_send(send_slot(slot, s.bytes), next_id_++); break;
        case BenchOp::kWrite: st = ep_->post_write(send_slot(slot, s.bytes), peer_rma_slot(slot, s.bytes), next_id_++); break;
        case BenchOp::kRead: st = ep_->post_read(send_slot(slot, s.bytes), peer_rma_slot(0, s.bytes), next_id_++); break;
      }
      if (st.ok()) break;
      if (st.code() != ErrorCode::kResourceExhausted) return st;
      LATTICE_RETURN_IF_ERROR(poll_once());
      if (d.expired()) return Timeout("bench: send queue stayed full", peer_rank_);
    }
    ++posted;
    ++outstanding_;
    return Status::Ok();
  };
  // Warm-up ops, untimed.
  const uint64_t warm = static_cast<uint64_t>(std::max(s.warmup, window));
  while (posted < warm) {
    // With --check, a slot is rewritten only once the op that used it completed (n_slots = window + 2
    // and completions of one endpoint arrive in order).
    LATTICE_RETURN_IF_ERROR(wait_sends_below(window, d));
    LATTICE_RETURN_IF_ERROR(post_one());
  }
  LATTICE_RETURN_IF_ERROR(drain(d));
  const uint64_t first = posted;
  const auto t0 = Clock::now();
  const auto stop = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.bw_seconds));
  for (int spins = 0;; ++spins) {
    while (outstanding_ < window) LATTICE_RETURN_IF_ERROR(post_one());
    LATTICE_RETURN_IF_ERROR(poll_once());
    if (Clock::now() >= stop) break;
    if (spins == kSpinsPerCheck) {
      spins = 0;
      if (d.expired()) return Timeout("bench: bandwidth phase ran past its deadline", peer_rank_);
    }
  }
  LATTICE_RETURN_IF_ERROR(drain(d));
  Ctl end;
  end.kind = kEnd;
  end.count = posted;
  LATTICE_RETURN_IF_ERROR(post_ctl(end));
  LATTICE_ASSIGN_OR_RETURN(Ctl ack, wait_ctl(kAck, d));
  const auto t1 = Clock::now();
  if (s.op == BenchOp::kRead && s.check) {
    const size_t used = std::min<uint64_t>(posted, layout_.n_slots);
    for (size_t k = 0; k < used; ++k)
      if (mismatch_pattern(send_slot(k, 0).data(), s.bytes, seed_for(s.op, s.bytes, 0, 2)) != s.bytes) ++r->check_errors;
  }
  if (s.op == BenchOp::kSend && ack.count != posted)
    return Corrupt("bench: peer received " + std::to_string(ack.count) + " messages of the " + std::to_string(posted) +
                       " sent",
                   peer_rank_);
  r->check_errors += ack.value;
  const uint64_t ops = posted - first;
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  r->bw_ops = ops;
  r->bw_seconds = secs;
  r->bw_gbps = static_cast<double>(ops) * static_cast<double>(s.bytes) / secs / 1e9;
  r->bw_msgs_per_s = static_cast<double>(ops) / secs;
  return Status::Ok();
}

Status BenchSide::bw_responder(const PhaseSpec& s, uint64_t* errors, Deadline d) {
  uint64_t received = 0;
  Ctl end;
  if (s.op == BenchOp::kSend) {
    for (;;) {
      size_t slot = 0, n = 0;
      LATTICE_RETURN_IF_ERROR(wait_recv(&slot, &n, d));
      const std::byte* p = recv_slot(slot, 0).data();
      // The end marker is a control message; data of the same length is told apart by the magic
      // (a data pattern that starts with it and a kEnd kind is practically impossible).
      if (n == sizeof(Ctl)) {
        std::memcpy(&end, p, sizeof end);
        if (end.magic == kCtlMagic && end.kind == kEnd) {
          LATTICE_RETURN_IF_ERROR(repost_recv(slot));
          break;
        }
      }
      if (n != s.bytes)
        return Corrupt("bench: expected a " + std::to_string(s.bytes) + "-byte message, got " + std::to_string(n),
                       peer_rank_);
      if (s.check && mismatch_pattern(p, n, seed_for(s.op, s.bytes, received, 3)) != n) ++*errors;
      ++received;
      LATTICE_RETURN_IF_ERROR(repost_recv(slot));
    }
  } else {
    // The target of one-sided operations only waits (like an RDMA target, whose CPU is not
    // involved): sleeping here leaves the core to the initiator on a busy machine.
    LATTICE_ASSIGN_OR_RETURN(end, wait_ctl(kEnd, d, /*block=*/true));
    received = end.count;
    if (s.op == BenchOp::kWrite && s.check) {
      // Each slot holds the last write made to it.
      for (size_t k = 0; k < layout_.n_slots && k < end.count; ++k) {
        uint64_t last = (end.count - 1) - ((end.count - 1 - k) % layout_.n_slots);
        if (mismatch_pattern(rma_slot(k, 0).data(), s.bytes, seed_for(s.op, s.bytes, last, 3)) != s.bytes) ++*errors;
      }
    }
  }
  LATTICE_RETURN_IF_ERROR(drain(d));
  Ctl ack;
  ack.kind = kAck;
  ack.count = received;
  ack.value = *errors;
  return post_ctl(ack);
}

// ---------------------------------------------------------------------------------------
// Phases

namespace {
void summarize(std::vector<double>& rtt_ns, double scale, PhaseResult* r) {
  if (rtt_ns.empty()) return;
  std::sort(rtt_ns.begin(), rtt_ns.end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(std::min<double>(rtt_ns.size() - 1, std::floor(q * (rtt_ns.size() - 1) + 0.5)));
    return rtt_ns[i] * scale / 1000.0;
  };
  const size_t n = rtt_ns.size();
  double median_ns = n % 2 ? rtt_ns[n / 2] : (rtt_ns[n / 2 - 1] + rtt_ns[n / 2]) / 2;
  r->lat_us_min = rtt_ns.front() * scale / 1000.0;
  r->lat_us_median = median_ns * scale / 1000.0;
  r->lat_us_avg = std::accumulate(rtt_ns.begin(), rtt_ns.end(), 0.0) / n * scale / 1000.0;
  r->lat_us_p99 = at(0.99);
  r->lat_us_max = rtt_ns.back() * scale / 1000.0;
}
}  // namespace

Result<PhaseResult> BenchSide::run_phase(const PhaseSpec& s, Deadline d) {
  if (s.bytes == 0 || s.bytes > layout_.slot_bytes)
    return InvalidArgument("bench: message size " + std::to_string(s.bytes) + " outside 1.." +
                           std::to_string(layout_.slot_bytes));
  if (s.check && layout_.n_slots < static_cast<size_t>(s.window) + 2)
    return InvalidArgument("bench: --check needs a layout made with check");
  PhaseResult r;
  r.bytes = s.bytes;
  r.iters = s.iters;
  LATTICE_RETURN_IF_ERROR(drain(d));
  if (s.op == BenchOp::kWrite) std::memset(rma_slot(0, 0).data(), 0, s.bytes);
  Ctl start;
  start.kind = kStart;
  start.op = static_cast<uint32_t>(s.op);
  start.bytes = s.bytes;
  start.iters = static_cast<uint64_t>(s.iters);
  start.warmup = static_cast<uint64_t>(s.warmup);
  start.window = static_cast<uint32_t>(s.window);
  start.flags = (s.latency ? uint32_t{kFlagLatency} : 0u) | (s.bandwidth ? uint32_t{kFlagBandwidth} : 0u) |
                (s.check ? uint32_t{kFlagCheck} : 0u);
  start.value = static_cast<uint64_t>(s.bw_seconds * 1e6);
  LATTICE_RETURN_IF_ERROR(post_ctl(start));
  LATTICE_RETURN_IF_ERROR(wait_ctl(kReady, d).status());
  if (s.latency) {
    std::vector<double> rtt;
    rtt.reserve(static_cast<size_t>(s.iters));
    switch (s.op) {
      case BenchOp::kSend: LATTICE_RETURN_IF_ERROR(lat_send(s, true, &rtt, &r.check_errors, d)); break;
      case BenchOp::kWrite: LATTICE_RETURN_IF_ERROR(lat_write(s, true, &rtt, &r.check_errors, d)); break;
      case BenchOp::kRead: LATTICE_RETURN_IF_ERROR(lat_read(s, &rtt, &r.check_errors, d)); break;
    }
    LATTICE_RETURN_IF_ERROR(drain(d));
    Ctl end;
    end.kind = kEnd;
    LATTICE_RETURN_IF_ERROR(post_ctl(end));
    LATTICE_ASSIGN_OR_RETURN(Ctl ack, wait_ctl(kAck, d));
    r.check_errors += ack.value;
    summarize(rtt, s.op == BenchOp::kRead ? 1.0 : 0.5, &r);
  }
  if (s.bandwidth) LATTICE_RETURN_IF_ERROR(bw_initiator(s, &r, d));
  return r;
}

Status BenchSide::stop_peer(Deadline d) {
  LATTICE_RETURN_IF_ERROR(drain(d));
  Ctl q;
  q.kind = kQuit;
  LATTICE_RETURN_IF_ERROR(post_ctl(q));
  // After the bye the peer may exit at once; what its exit does to this side's queue (flushed
  // receives) is expected, so nothing more is polled here.
  return wait_ctl(kBye, d).status();
}

Status BenchSide::serve(Deadline d) {
  for (;;) {
    LATTICE_ASSIGN_OR_RETURN(Ctl c, wait_ctl(0, d));
    if (c.kind == kQuit) {
      LATTICE_RETURN_IF_ERROR(drain(d));
      Ctl bye;
      bye.kind = kBye;
      LATTICE_RETURN_IF_ERROR(post_ctl(bye));
      (void)drain(Deadline::after(std::chrono::milliseconds(500)).min(d));  // best effort: the peer may be gone
      return Status::Ok();
    }
    if (c.kind != kStart) return Corrupt("bench: unexpected control message " + std::to_string(c.kind), peer_rank_);
    // Validate what the initiator asked for (it is another process, maybe another host).
    PhaseSpec s;
    if (c.op < 1 || c.op > 3) return Corrupt("bench: bad op in control message", peer_rank_);
    s.op = static_cast<BenchOp>(c.op);
    s.bytes = static_cast<size_t>(c.bytes);
    if (s.bytes == 0 || s.bytes > layout_.slot_bytes)
      return Corrupt("bench: peer asked for " + std::to_string(c.bytes) + "-byte messages, beyond the " +
                         std::to_string(layout_.slot_bytes) + "-byte slots",
                     peer_rank_);
    if (c.iters > (1u << 30) || c.warmup > (1u << 30) || c.window == 0 || c.window > (1u << 16))
      return Corrupt("bench: bad iteration counts in control message", peer_rank_);
    s.iters = static_cast<int>(c.iters);
    s.warmup = static_cast<int>(c.warmup);
    s.window = static_cast<int>(c.window);
    s.latency = c.flags & kFlagLatency;
    s.bandwidth = c.flags & kFlagBandwidth;
    s.check = c.flags & kFlagCheck;
    if (s.check && layout_.n_slots < static_cast<size_t>(s.window) + 2)
      return Corrupt("bench: peer asked for --check but this side's layout has no room for it", peer_rank_);
    if (s.op == BenchOp::kWrite) std::memset(rma_slot(0, 0).data(), 0, s.bytes);
    if (s.op == BenchOp::kRead) fill_pattern(rma_slot(0, 0).data(), s.bytes, seed_for(s.op, s.bytes, 0, 2));
    Ctl ready;
    ready.kind = kReady;
    LATTICE_RETURN_IF_ERROR(post_ctl(ready));
    uint64_t errors = 0;
    if (s.latency) {
      std::vector<double> unused;
      if (s.op == BenchOp::kSend) LATTICE_RETURN_IF_ERROR(lat_send(s, false, &unused, &errors, d));
      if (s.op == BenchOp::kWrite) LATTICE_RETURN_IF_ERROR(lat_write(s, false, &unused, &errors, d));
      // Reads need nothing from this side but progress, which wait_ctl drives.
      LATTICE_ASSIGN_OR_RETURN(Ctl end, wait_ctl(kEnd, d));
      (void)end;
      LATTICE_RETURN_IF_ERROR(drain(d));
      Ctl ack;
      ack.kind = kAck;
      ack.value = errors;
      LATTICE_RETURN_IF_ERROR(post_ctl(ack));
    }
    if (s.bandwidth) {
      errors = 0;
      LATTICE_RETURN_IF_ERROR(bw_responder(s, &errors, d));
    }
  }
}

}  // namespace lattice::cli
