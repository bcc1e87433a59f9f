#include "lattice/fabric/verbs/emu/emu.h"

#include "lattice/fabric/tsan_sync.h"
#include "lattice/fabric/verbs/wire.h"  // tamper= fixes up the provider's chunk checksum

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "lattice/core/log.h"

namespace lattice::fabric::verbs::emu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFrame = 4096;
constexpr size_t kRingFrames = 4096;  // >= the largest message (4,095 frames)
constexpr size_t kDescRing = 4096;    // > max outstanding receives (4,095)
constexpr uint64_t kSegMagic = 0x4c41545645'4d55ull;  // "LATVEMU"

struct Profile {
  const char* name;
  const char* device;
  bool rc_allowed;
  int max_qp;
  int max_mr;
  bool frames_must_match;
  bool recv_after_rts;
  size_t max_msg;
  uint32_t max_wr;
  uint8_t n_ports;
  uint8_t active_port;
  bool err_wedges;
};

constexpr Profile kProfiles[] = {
    {"apple-tb5", "emu_tb5_0", false, 10, 100, true, true, 16773120, 4095, 2, 2, true},
    {"linux-rc", "emu_rc_0", true, 256, 4096, false, false, 16u << 20, 4095, 1, 1, false},
};

// Wire layout of a QP's inbound segment. Written by two processes: the owner (receives,
// recv_posted, msgs_read, frames_tail) and its connected peer (desc, data, msgs_written,
// frames_head). Every index is a free-running counter; slots are index % ring size.
struct Desc {
  uint64_t frame_start;
  uint32_t n_frames;
  uint32_t bytes;
  int64_t deliver_after_ns;  // steady clock; 0: at once
  uint32_t flags;            // kDescMismatch
  uint32_t op;               // DescOp
  // RC one-sided requests and their responses
  uint64_t req_id;           // initiator's request number, echoed in the response
  uint64_t remote_off;       // regions are zero-based: the address is an offset into the region
  uint64_t operand0;         // fetch-add: add; compare-swap: expected
  uint64_t operand1;         // compare-swap: desired
  uint32_t rkey;
  uint32_t status;           // response: ibv_wc_status
};
constexpr uint32_t kDescMismatch = 1;
enum DescOp : uint32_t { kOpSend = 0, kOpWrite, kOpRead, kOpFetchAdd, kOpCompareSwap, kOpResponse };

struct Segment {
  uint64_t magic;
  uint32_t qpn;
  uint32_t pid;
  std::atomic<uint32_t> alive;
  // The doorbell (wait_cq): bumped by whoever changed what the owner may be waiting for (the
  // peer publishing into this segment, or freeing credit or ring space the owner's sends
  // wait for; a local wake_cq), and a futex the owner sleeps on while `sleepers` is nonzero.
  std::atomic<uint32_t> bell;
  std::atomic<uint32_t> sleepers;
  // Set by the peer when this segment had no credit or ring space for it: the owner rings the
  // peer's bell when it posts a receive or consumes a message, then clears it.
  std::atomic<uint32_t> writer_blocked;
  std::atomic<uint64_t> recv_posted;
  std::atomic<uint64_t> msgs_written;  // every descriptor
  std::atomic<uint64_t> msgs_read;
  std::atomic<uint64_t> sends_written;  // sends only: they consume posted receives (credit)
  std::atomic<uint64_t> frames_head;
  std::atomic<uint64_t> frames_tail;
  uint32_t recv_bytes[kDescRing];  // capacity of receive #i, set before recv_posted covers it
  Desc desc[kDescRing];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
constexpr size_t kDataOffset = (sizeof(Segment) + kFrame - 1) / kFrame * kFrame;
constexpr size_t kSegBytes = kDataOffset + kRingFrames * kFrame;

struct Device {
  ibv_device base;
  const Profile* profile;
};

Device g_devices[2];
std::once_flag g_devices_once;

void init_devices() {
  for (int i = 0; i < 2; ++i) {
    std::memset(&g_devices[i], 0, sizeof(Device));
    g_devices[i].profile = &kProfiles[i];
    std::snprintf(g_devices[i].base.name, sizeof g_devices[i].base.name, "%s", kProfiles[i].device);
    std::snprintf(g_devices[i].base.dev_name, sizeof g_devices[i].base.dev_name, "%s", kProfiles[i].device);
    g_devices[i].base.node_type = IBV_NODE_RNIC;
    g_devices[i].base.transport_type = IBV_TRANSPORT_IB;
  }
}

struct Qp;
struct Mr;
struct Cq;

struct Context {
  ibv_context base;
  const Profile* profile;
  std::mutex mu;  // guards everything below and every object of this context
  Faults faults;
  Stats stats;
  int n_qp = 0;
  int n_mr = 0;
  std::vector<Mr*> mrs;
  uint64_t rkey_state = 0x9e3779b97f4a7c15ull;
  bool port_dead = false;
};

struct Pd {
  ibv_pd base;
};
struct Mr {
  ibv_mr base;
  int access;
};

struct PendingSend {
  uint64_t wr_id;
  std::byte* addr;
  uint32_t length;
  bool signaled;
  uint32_t op = kOpSend;
  uint64_t remote_off = 0;
  uint32_t rkey = 0;
  uint64_t operand0 = 0, operand1 = 0;
};
struct Awaiting {  // an RC request waiting for its response
  uint64_t wr_id;
  uint32_t op;
  std::byte* addr;
  uint32_t length;
};
struct PostedRecv {
  uint64_t wr_id;
  std::byte* addr;
  uint32_t length;
};

struct Qp {
  ibv_qp base;
  Context* ctx;
  Cq* scq;
  Cq* rcq;
  uint32_t max_send_wr, max_recv_wr;
  int memfd = -1;
  Segment* mine = nullptr;
  Segment* peer = nullptr;
  // ThreadSanitizer's keys for the two segments (tsan_sync.h): a peer in this process maps
  // `mine` at another address, so the counters' edges are announced on these as well.
  const void* mine_key = nullptr;
  const void* peer_key = nullptr;
  uint8_t port = 0;
  std::deque<PendingSend> sq;
  std::deque<PostedRecv> rq;
  uint64_t next_req = 0;
  std::deque<std::pair<uint64_t, Awaiting>> awaiting;  // in request order
  // replay= / reorder=: a copy of one message, delivered once the next message went out.
  std::vector<std::byte> held;
  int held_state = 0;  // 0 none, 1 waiting for the next message, 2 due
  int64_t wire_free_ns = 0;  // latency_us / gbytes_s: when this QP's wire is free again
};

struct Cq {
  ibv_cq base;
  Context* ctx;
  std::atomic<bool> wake_pending{false};  // wake_cq came: the next wait_cq returns at once
  std::deque<ibv_wc> q;
  std::vector<Qp*> qps;
};

Context* ctx_of(ibv_context* c) { return reinterpret_cast<Context*>(c); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}
// Rings a segment's doorbell (Segment::bell): a shared (not process-private) futex, since
// the owner sleeping on it is usually another process.
void ring(Segment* seg) {
  if (seg == nullptr) return;
  seg->bell.fetch_add(1, std::memory_order_seq_cst);
#ifdef __linux__
  if (seg->sleepers.load(std::memory_order_seq_cst) != 0)
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seg->bell), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
#endif
}

// The owner of `mine` posted receives or consumed messages: wakes the peer if its sends were
// waiting for that (Segment::writer_blocked).
void unblock_writer(Segment* mine, Segment* peer) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the counters' stores before the flag's load
  if (mine->writer_blocked.load(std::memory_order_relaxed) != 0 && mine->writer_blocked.exchange(0) != 0) ring(peer);
}

uint32_t frames_of(uint64_t bytes) { return bytes == 0 ? 1 : static_cast<uint32_t>((bytes + kFrame - 1) / kFrame); }

bool timed(const Faults& f) { return f.latency_us > 0 || f.gbytes_s > 0; }

// latency_us / gbytes_s: when a message of `bytes` put on the QP's wire now is delivered (it
// waits for the messages before it, takes bytes / rate, then the latency). Caller holds ctx->mu.
int64_t timed_delivery(Qp* qp, const Faults& f, uint64_t bytes) {
  const int64_t now = now_ns();
  const int64_t start = std::max(now, qp->wire_free_ns);
  const int64_t on_wire = f.gbytes_s > 0 ? static_cast<int64_t>(static_cast<double>(bytes) / f.gbytes_s) : 0;
  qp->wire_free_ns = start + on_wire;
  return std::max<int64_t>(1, qp->wire_free_ns + static_cast<int64_t>(f.latency_us * 1000.0));
}

void push_wc(Cq* cq, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op, uint32_t bytes, uint32_t qpn) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.byte_len = bytes;
  wc.qp_num = qpn;
  cq->q.push_back(wc);
}

// Copies `n` bytes into / out of the frame ring at frame index `start` (wraps).
void ring_write(Segment* seg, uint64_t start, const std::byte* src, size_t n) {
  auto* data = reinterpret_cast<std::byte*>(seg) + kDataOffset;
  size_t off = (start % kRingFrames) * kFrame;
  size_t first = std::min(n, kRingFrames * kFrame - off);
  std::memcpy(data + off, src, first);
  if (n > first) std::memcpy(data, src + first, n - first);
}
void ring_read(Segment* seg, uint64_t start, std::byte* dst, size_t n) {
  auto* data = reinterpret_cast<std::byte*>(seg) + kDataOffset;
  size_t off = (start % kRingFrames) * kFrame;
  size_t first = std::min(n, kRingFrames * kFrame - off);
  std::memcpy(dst, data + off, first);
  if (n > first) std::memcpy(dst + first, data, n - first);
}
std::byte* ring_byte(Segment* seg, uint64_t frame, size_t in_frame) {
  return reinterpret_cast<std::byte*>(seg) + kDataOffset + (frame % kRingFrames) * kFrame + in_frame;
}

uint32_t frames_for(const PendingSend& s) {
  if (s.op == kOpSend) return frames_of(s.length);
  return s.op == kOpWrite ? static_cast<uint32_t>((uint64_t{s.length} + kFrame - 1) / kFrame) : 0;
}

// Publishes one message or request into the peer's segment; false when it must wait (credit
// or ring space). Caller holds ctx->mu.
bool publish(Qp* qp, const PendingSend& s, int copies, uint32_t* flags_out) {
  Segment* peer = qp->peer;
  uint64_t written = peer->msgs_written.load(std::memory_order_relaxed);
  uint64_t sends = peer->sends_written.load(std::memory_order_relaxed);
  bool is_send = s.op == kOpSend;
  uint64_t posted = peer->recv_posted.load(std::memory_order_acquire);
  if (is_send && posted < sends + static_cast<uint64_t>(copies)) return false;  // credit: a receive must be posted
  if (written + copies - peer->msgs_read.load(std::memory_order_acquire) >= kDescRing) return false;
  uint32_t nf = frames_for(s);
  uint64_t head = peer->frames_head.load(std::memory_order_relaxed);
  uint64_t tail = peer->frames_tail.load(std::memory_order_acquire);
  if (head + static_cast<uint64_t>(nf) * copies - tail > kRingFrames) return false;
  tsan::acquire(qp->peer_key);
  const Profile& p = *qp->ctx->profile;
  uint32_t flags = 0;
  for (int c = 0; c < copies; ++c) {
    bool mismatch = false;
    if (is_send) {
      uint32_t cap = peer->recv_bytes[(sends + c) % kDescRing];
      mismatch = p.frames_must_match ? frames_of(cap) != nf : s.length > cap;
    }
    if (mismatch) flags |= kDescMismatch;
    if (s.op == kOpSend || s.op == kOpWrite) ring_write(peer, head + static_cast<uint64_t>(nf) * c, s.addr, s.length);
    Desc& d = peer->desc[(written + c) % kDescRing];
    d.frame_start = head + static_cast<uint64_t>(nf) * c;
    d.n_frames = nf;
    d.bytes = s.length;
    d.deliver_after_ns = timed(qp->ctx->faults) ? timed_delivery(qp, qp->ctx->faults, s.length) : 0;
    d.flags = mismatch ? kDescMismatch : 0;
    d.op = s.op;
    d.req_id = qp->next_req;
    d.remote_off = s.remote_off;
    d.operand0 = s.operand0;
    d.operand1 = s.operand1;
    d.rkey = s.rkey;
    d.status = 0;
  }
  if (is_send) peer->sends_written.store(sends + copies, std::memory_order_relaxed);
  *flags_out = flags;
  return true;
}

// Delivers the held copy of replay= / reorder= once it is due. Caller holds ctx->mu.
void flush_held(Qp* qp) {
  if (qp->held_state != 2 || qp->peer == nullptr || qp->peer->alive.load(std::memory_order_acquire) == 0) return;
  PendingSend h{0, qp->held.data(), static_cast<uint32_t>(qp->held.size()), false};
  uint32_t flags = 0;
  if (!publish(qp, h, 1, &flags)) return;  // no receive posted yet: next time
  Segment* peer = qp->peer;
  tsan::release(qp->peer_key);
  peer->frames_head.store(peer->frames_head.load(std::memory_order_relaxed) + frames_for(h), std::memory_order_relaxed);
  peer->msgs_written.store(peer->msgs_written.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  ring(peer);
  qp->held.clear();
  qp->held_state = 0;
}

// Moves the QP's pending sends out in order. Caller holds ctx->mu.
void progress_sends(Qp* qp) {
  Context* ctx = qp->ctx;
  flush_held(qp);
  while (!qp->sq.empty()) {
    PendingSend s = qp->sq.front();
    if (ctx->port_dead || qp->peer == nullptr) {
      qp->sq.pop_front();
      push_wc(qp->scq, s.wr_id, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, 0, qp->base.qp_num);
      continue;
    }
    if (qp->peer->alive.load(std::memory_order_acquire) == 0) {
      qp->sq.pop_front();
      // UC: nobody acks, the frames vanish. RC: retries exhausted.
      ibv_wc_status st = qp->base.qp_type == IBV_QPT_RC ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS;
      if (s.signaled || st != IBV_WC_SUCCESS) push_wc(qp->scq, s.wr_id, st, IBV_WC_SEND, s.length, qp->base.qp_num);
      continue;
    }
    uint32_t nf = std::max<uint32_t>(frames_for(s), 1);
    uint64_t first = ctx->stats.frames_sent + 1, last = ctx->stats.frames_sent + nf;
    auto hits = [&](uint64_t n) { return n != 0 && n >= first && n <= last; };
    int copies = hits(ctx->faults.dup_frame) ? 2 : 1;
    bool drop = hits(ctx->faults.drop_frame);
    std::vector<std::byte> tampered;
    if (s.op == kOpSend && s.length >= sizeof(ChunkHeader) && hits(ctx->faults.tamper_frame)) {
      tampered.assign(s.addr, s.addr + s.length);
      size_t off = (ctx->faults.tamper_frame - first) * kFrame + 17;
      ChunkHeader h;
      std::memcpy(&h, tampered.data(), sizeof h);
      size_t covered = chunk_body_offset(h) + std::min<size_t>(h.payload_bytes, chunk_capacity(h));
      if (off >= covered) off = covered - 1;
      tampered[off] ^= std::byte{0x5a};
      if (off < offsetof(ChunkHeader, crc) || off >= offsetof(ChunkHeader, crc) + 4) {
        std::memcpy(&h, tampered.data(), sizeof h);  // the flip may have hit the flags or the length
        if (s.length >= kSlotBytes) {
          h.crc = chunk_crc(tampered.data());
          std::memcpy(tampered.data() + offsetof(ChunkHeader, crc), &h.crc, sizeof h.crc);
        }
      }
      s.addr = tampered.data();
      ctx->stats.tampered++;
    }
    const bool replay = s.op == kOpSend && qp->held_state == 0 && hits(ctx->faults.replay_frame);
    const bool reorder = s.op == kOpSend && qp->held_state == 0 && hits(ctx->faults.reorder_frame);
    if (replay || reorder) {
      qp->held.assign(s.addr, s.addr + s.length);
      qp->held_state = 1;
      (replay ? ctx->stats.replayed : ctx->stats.reordered)++;
    }
    const bool releases_held = !replay && !reorder && s.op == kOpSend && qp->held_state == 1;
    uint32_t flags = 0;
    if (reorder) {
      // Held back: it goes out after the next message (its completion fires now, as UC's would).
    } else if (!drop) {
      if (!publish(qp, s, copies, &flags)) {
        // Wait for credit or ring space: the peer rings us once it frees some (then clears the
        // flag); the retry after setting it closes the race with a free just before.
        qp->peer->writer_blocked.store(1, std::memory_order_seq_cst);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (!publish(qp, s, copies, &flags)) return;
      }
      Segment* peer = qp->peer;
      uint64_t written = peer->msgs_written.load(std::memory_order_relaxed);
      if (hits(ctx->faults.corrupt_frame) && s.length > 0) {
        size_t off = (ctx->faults.corrupt_frame - first) * kFrame + 17;
        if (off >= s.length) off = s.length - 1;
        *ring_byte(peer, peer->desc[written % kDescRing].frame_start + off / kFrame, off % kFrame) ^= std::byte{0x5a};
        ctx->stats.corrupted++;
      }
      if (hits(ctx->faults.delay_frame)) {
        peer->desc[written % kDescRing].deliver_after_ns =
            std::max(peer->desc[written % kDescRing].deliver_after_ns,
                     now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(ctx->faults.delay).count());
        ctx->stats.delayed++;
      }
      if (copies == 2) ctx->stats.duplicated++;
      tsan::release(qp->peer_key);
      peer->frames_head.store(peer->frames_head.load(std::memory_order_relaxed) + static_cast<uint64_t>(nf) * copies,
                              std::memory_order_relaxed);
      peer->msgs_written.store(written + copies, std::memory_order_release);
      ring(peer);
    } else {
      ctx->stats.dropped++;
    }
    ctx->stats.frames_sent += nf;
    qp->sq.pop_front();
    if (releases_held) qp->held_state = 2;  // this message went out: the held one follows it
    flush_held(qp);
    if (s.op != kOpSend) {
      // RC one-sided: completes when the target's response comes back.
      qp->awaiting.emplace_back(qp->next_req++, Awaiting{s.wr_id, s.op, s.addr, s.length});
      continue;
    }
    qp->next_req++;
    // No hardware acks: the completion fires when the frames left, before the peer saw them.
    ibv_wc_status st = (flags & kDescMismatch) ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_SUCCESS;
    if (s.signaled || st != IBV_WC_SUCCESS) push_wc(qp->scq, s.wr_id, st, IBV_WC_SEND, s.length, qp->base.qp_num);
    if (ctx->faults.kill_port_after != 0 && ctx->stats.frames_sent >= ctx->faults.kill_port_after) {
      ctx->port_dead = true;
      ctx->stats.port_killed = true;
    }
  }
}

ibv_wc_opcode wc_opcode(uint32_t op) {
  switch (op) {
    case kOpWrite: return IBV_WC_RDMA_WRITE;
    case kOpRead: return IBV_WC_RDMA_READ;
    case kOpFetchAdd: return IBV_WC_FETCH_ADD;
    case kOpCompareSwap: return IBV_WC_COMP_SWAP;
    default: return IBV_WC_SEND;
  }
}

// Target side of an RC request: checks the region (rkey, rights, bounds, alignment), applies
// it and publishes the response (with read data or the old atomic value) into the
// initiator's segment. False when the response does not fit yet. Caller holds ctx->mu.
bool serve_request(Qp* qp, const Desc& d) {
  Segment* peer = qp->peer;
  if (peer == nullptr) return true;
  uint32_t resp_bytes = d.op == kOpRead ? d.bytes : (d.op == kOpFetchAdd || d.op == kOpCompareSwap) ? 8 : 0;
  uint32_t nf = static_cast<uint32_t>((uint64_t{resp_bytes} + kFrame - 1) / kFrame);
  uint64_t written = peer->msgs_written.load(std::memory_order_relaxed);
  auto full = [&] {
    return written + 1 - peer->msgs_read.load(std::memory_order_acquire) >= kDescRing ||
           peer->frames_head.load(std::memory_order_relaxed) + nf - peer->frames_tail.load(std::memory_order_acquire) >
               kRingFrames;
  };
  if (full()) {
    peer->writer_blocked.store(1, std::memory_order_seq_cst);  // as progress_sends does
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (full()) return false;
  }
  uint64_t head = peer->frames_head.load(std::memory_order_relaxed);
  tsan::acquire(qp->peer_key);
  Mr* mr = nullptr;
  for (Mr* m : qp->ctx->mrs)
    if (m->base.rkey == d.rkey && m->base.pd == qp->base.pd) mr = m;
  int need = d.op == kOpWrite ? IBV_ACCESS_REMOTE_WRITE : d.op == kOpRead ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_ATOMIC;
  uint64_t len = d.op == kOpWrite || d.op == kOpRead ? d.bytes : 8;
  ibv_wc_status st = IBV_WC_SUCCESS;
  if (mr == nullptr || !(mr->access & need) || d.remote_off > mr->base.length || len > mr->base.length - d.remote_off)
    st = IBV_WC_REM_ACCESS_ERR;
  else if (len == 8 && d.op != kOpWrite && d.op != kOpRead && d.remote_off % 8 != 0)
    st = IBV_WC_REM_INV_REQ_ERR;
  auto* base = static_cast<std::byte*>(mr ? mr->base.addr : nullptr);
  uint64_t old = 0;
  if (st == IBV_WC_SUCCESS) {
    std::byte* at = base + d.remote_off;
    switch (d.op) {
      case kOpWrite: ring_read(qp->mine, d.frame_start, at, d.bytes); break;
      case kOpRead: ring_write(peer, head, at, d.bytes); break;
      case kOpFetchAdd:
      case kOpCompareSwap: {
        std::memcpy(&old, at, 8);
        uint64_t now = d.op == kOpFetchAdd ? old + d.operand0 : (old == d.operand0 ? d.operand1 : old);
        std::memcpy(at, &now, 8);
        auto* b = reinterpret_cast<const std::byte*>(&old);
        ring_write(peer, head, b, 8);
        break;
      }
      default: break;
    }
  }
  Desc& r = peer->desc[written % kDescRing];
  r.frame_start = head;
  r.n_frames = nf;
  r.bytes = st == IBV_WC_SUCCESS ? resp_bytes : 0;
  r.deliver_after_ns = timed(qp->ctx->faults) ? timed_delivery(qp, qp->ctx->faults, r.bytes) : 0;
  r.flags = 0;
  r.op = kOpResponse;
  r.req_id = d.req_id;
  r.status = st;
  tsan::release(qp->peer_key);
  peer->frames_head.store(head + nf, std::memory_order_relaxed);
  peer->msgs_written.store(written + 1, std::memory_order_release);
  ring(peer);
  return true;
}

// Drains the QP's segment in order: sends into posted receives, RC requests served, responses
// completing our requests. True when it consumed any (ring space freed). Caller holds ctx->mu.
bool drain_recvs(Qp* qp) {
  Segment* seg = qp->mine;
  if (seg == nullptr || qp->ctx->port_dead) return false;
  bool consumed = false;
  while (true) {
    uint64_t read = seg->msgs_read.load(std::memory_order_relaxed);
    if (read == seg->msgs_written.load(std::memory_order_acquire)) return consumed;
    tsan::acquire(qp->mine_key);
    const Desc& d = seg->desc[read % kDescRing];
    if (d.deliver_after_ns != 0 && now_ns() < d.deliver_after_ns) return consumed;
    if (d.op == kOpSend) {
      if (qp->rq.empty()) return consumed;
      PostedRecv r = qp->rq.front();
      qp->rq.pop_front();
      ibv_wc_status st = IBV_WC_SUCCESS;
      uint32_t n = d.bytes;
      if ((d.flags & kDescMismatch) || n > r.length) {
        st = IBV_WC_LOC_LEN_ERR;
        n = 0;
      } else {
        ring_read(seg, d.frame_start, r.addr, n);
      }
      push_wc(qp->rcq, r.wr_id, st, IBV_WC_RECV, n, qp->base.qp_num);
    } else if (d.op == kOpResponse) {
      if (!qp->awaiting.empty() && qp->awaiting.front().first == d.req_id) {
        Awaiting a = qp->awaiting.front().second;
        qp->awaiting.pop_front();
        auto st = static_cast<ibv_wc_status>(d.status);
        if (st == IBV_WC_SUCCESS && d.bytes > 0) ring_read(seg, d.frame_start, a.addr, std::min(d.bytes, a.length));
        push_wc(qp->scq, a.wr_id, st, wc_opcode(a.op), st == IBV_WC_SUCCESS ? a.length : 0, qp->base.qp_num);
      }
    } else if (qp->base.qp_type == IBV_QPT_RC) {
      if (!serve_request(qp, d)) return consumed;  // response ring full: later
    }
    tsan::release(qp->mine_key);
    seg->frames_tail.store(seg->frames_tail.load(std::memory_order_relaxed) + d.n_frames, std::memory_order_release);
    seg->msgs_read.store(read + 1, std::memory_order_release);
    consumed = true;
  }
}

// Drains the segment; wakes the peer if its sends waited for the ring space that freed.
void progress_recvs(Qp* qp) {
  if (drain_recvs(qp)) unblock_writer(qp->mine, qp->peer);
}

// LATTICE_VERBS_EMU_FAULT, read at every query (an unknown word is logged once and ignored).
MachineFaults env_faults() {
  auto f = machine_faults_from_env();
  if (f.ok()) return *f;
  static std::once_flag warned;
  std::call_once(warned, [&] { LATTICE_LOG_WARN("{} (ignored)", f.status().message()); });
  return {};
}

// ---- the table ----

ibv_device** emu_get_device_list(int* n) {
  std::call_once(g_devices_once, init_devices);
  if (env_faults().no_device) {
    if (n) *n = 0;
    return new ibv_device*[1]{nullptr};
  }
  auto** list = new ibv_device*[3];
  list[0] = &g_devices[0].base;
  list[1] = &g_devices[1].base;
  list[2] = nullptr;
  if (n) *n = 2;
  return list;
}
void emu_free_device_list(ibv_device** list) { delete[] list; }
const char* emu_get_device_name(ibv_device* dev) { return dev->name; }

ibv_context* emu_open_device(ibv_device* dev) {
  auto* ctx = new Context();
  std::memset(&ctx->base, 0, sizeof ctx->base);
  ctx->base.device = dev;
  ctx->base.cmd_fd = -1;
  ctx->base.async_fd = -1;
  ctx->profile = reinterpret_cast<Device*>(dev)->profile;
  return &ctx->base;
}
int emu_close_device(ibv_context* c) {
  delete ctx_of(c);
  return 0;
}

int emu_query_device(ibv_context* c, ibv_device_attr* a) {
  const Profile& p = *ctx_of(c)->profile;
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "emulated-1");
  a->max_qp = p.max_qp;
  a->max_qp_wr = static_cast<int>(p.max_wr);
  a->max_sge = 1;
  a->max_cq = 64;
  a->max_cqe = 65536;
  a->max_mr = p.max_mr;
  a->max_pd = 32;
  a->max_mr_size = p.max_msg;
  a->atomic_cap = p.rc_allowed ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
  a->phys_port_cnt = p.n_ports;
  a->vendor_id = 0x10ad;
  return 0;
}

int emu_query_port(ibv_context* c, uint8_t port, ibv_port_attr* a) {
  Context* ctx = ctx_of(c);
  const Profile& p = *ctx->profile;
  if (port < 1 || port > p.n_ports) return EINVAL;
  std::memset(a, 0, sizeof *a);
  std::lock_guard lock(ctx->mu);
  a->state = (port == p.active_port && !ctx->port_dead && !env_faults().port_down) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 3;
  a->max_msg_sz = static_cast<uint32_t>(p.max_msg);
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int emu_query_gid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  Context* ctx = ctx_of(c);
  if (port < 1 || port > ctx->profile->n_ports || index < 0 || index > 2) return EINVAL;
  std::memset(gid->raw, 0, sizeof gid->raw);
  uint32_t pid = static_cast<uint32_t>(getpid()) & 0xffffff;
  uint8_t p0 = static_cast<uint8_t>(pid >> 16), p1 = static_cast<uint8_t>(pid >> 8), p2 = static_cast<uint8_t>(pid);
  if (index == 1) {
    if (ctx->faults.no_ipv4 || env_faults().no_gid1) return 0;  // no IPv4 on the paired interface: the entry is empty
    gid->raw[10] = gid->raw[11] = 0xff;
    gid->raw[12] = 127;  // ::ffff:127.x.y.z, x.y.z = pid: loopback, and names the process
    gid->raw[13] = p0, gid->raw[14] = p1, gid->raw[15] = p2;
    return 0;
  }
  gid->raw[0] = 0xfe;
  gid->raw[1] = 0x80;
  // Index 0: EUI-64 from a locally administered MAC (02:1a:7e:x:y:z); index 2: link-local.
  gid->raw[8] = index == 0 ? 0x02 : 0x00;
  gid->raw[9] = index == 0 ? 0x1a : 0x4c;
  gid->raw[10] = index == 0 ? 0x7e : 0x61;
  gid->raw[11] = 0xff;
  gid->raw[12] = 0xfe;
  gid->raw[13] = p0, gid->raw[14] = p1, gid->raw[15] = p2;
  (void)port;
  return 0;
}

ibv_pd* emu_alloc_pd(ibv_context* c) {
  if (env_faults().no_pd) {
    errno = EPERM;
    return nullptr;
  }
  auto* pd = new Pd();
  pd->base.context = c;
  return &pd->base;
}
int emu_dealloc_pd(ibv_pd* pd) {
  delete reinterpret_cast<Pd*>(pd);
  return 0;
}

ibv_mr* emu_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  Context* ctx = ctx_of(pd->context);
  std::lock_guard lock(ctx->mu);
  if (ctx->n_mr >= ctx->profile->max_mr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (addr == nullptr || length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  ctx->n_mr++;
  auto* mr = new Mr();
  mr->base.context = pd->context;
  mr->base.pd = pd;
  mr->base.addr = addr;
  mr->base.length = length;
  mr->access = access;
  // Keys are unpredictable and never reused while registered (splitmix64 over a seeded state).
  uint32_t key = 0;
  while (key == 0 || std::any_of(ctx->mrs.begin(), ctx->mrs.end(), [&](Mr* m) { return m->base.rkey == key; })) {
    uint64_t z = (ctx->rkey_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    key = static_cast<uint32_t>(z ^ (z >> 31));
  }
  mr->base.lkey = mr->base.rkey = key;
  ctx->mrs.push_back(mr);
  return &mr->base;
}
int emu_dereg_mr(ibv_mr* m) {
  Context* ctx = ctx_of(m->context);
  {
    std::lock_guard lock(ctx->mu);
    ctx->n_mr--;
    std::erase(ctx->mrs, reinterpret_cast<Mr*>(m));
  }
  delete reinterpret_cast<Mr*>(m);
  return 0;
}

ibv_cq* emu_create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel*, int) {
  if (cqe <= 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new Cq();
  cq->base.context = c;
  cq->base.cqe = cqe;
  cq->base.cq_context = cq_context;
  cq->ctx = ctx_of(c);
  return &cq->base;
}
int emu_destroy_cq(ibv_cq* c) {
  auto* cq = reinterpret_cast<Cq*>(c);
  std::lock_guard lock(cq->ctx->mu);
  if (!cq->qps.empty()) return EBUSY;
  delete cq;
  return 0;
}

ibv_qp* emu_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  Context* ctx = ctx_of(pd->context);
  const Profile& p = *ctx->profile;
  std::lock_guard lock(ctx->mu);
  if (attr->qp_type != IBV_QPT_UC && !(attr->qp_type == IBV_QPT_RC && p.rc_allowed)) {
    errno = EOPNOTSUPP;  // apple-tb5: UC only
    return nullptr;
  }
  if (ctx->n_qp >= p.max_qp) {
    errno = ENOMEM;
    return nullptr;
  }
  if (attr->cap.max_send_wr > p.max_wr || attr->cap.max_recv_wr > p.max_wr || attr->cap.max_send_sge > 1 ||
      attr->cap.max_recv_sge > 1 || attr->send_cq == nullptr || attr->recv_cq == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  int fd = memfd_create("lattice-verbs-emu-qp", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  if (ftruncate(fd, static_cast<off_t>(kSegBytes)) != 0 || fd > 0xffffff) {
    int e = errno;
    close(fd);
    errno = e ? e : EMFILE;
    return nullptr;
  }
  // Resident from the start, as a NIC's registered memory is pinned: the ring's first pass
  // otherwise faulted in a page per 4 KB frame sent, which held an 8 KiB all-reduce among 3
  // ranks on 2 cores at 2.4 ms (median of 300) against 0.16 ms resident (docs/SIM.md, session 21).
  void* mem = mmap(nullptr, kSegBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (mem == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return nullptr;
  }
  auto* seg = static_cast<Segment*>(mem);  // zero-filled by ftruncate
  seg->qpn = static_cast<uint32_t>(fd);
  seg->pid = static_cast<uint32_t>(getpid());
  seg->alive.store(1);
  seg->magic = kSegMagic;
  auto* qp = new Qp();
  qp->base.context = pd->context;
  qp->base.pd = pd;
  qp->base.send_cq = attr->send_cq;
  qp->base.recv_cq = attr->recv_cq;
  qp->base.qp_num = static_cast<uint32_t>(fd);
  qp->base.qp_type = attr->qp_type;
  qp->base.state = IBV_QPS_RESET;
  qp->ctx = ctx;
  qp->scq = reinterpret_cast<Cq*>(attr->send_cq);
  qp->rcq = reinterpret_cast<Cq*>(attr->recv_cq);
  qp->max_send_wr = attr->cap.max_send_wr;
  qp->max_recv_wr = attr->cap.max_recv_wr;
  qp->memfd = fd;
  qp->mine = seg;
  qp->mine_key = tsan::segment_key(fd);
  qp->scq->qps.push_back(qp);
  if (qp->rcq != qp->scq) qp->rcq->qps.push_back(qp);
  ctx->n_qp++;
  return &qp->base;
}

Segment* attach_peer(const ibv_gid& dgid, uint32_t qpn, const void** key) {
  uint32_t pid = (uint32_t{dgid.raw[13]} << 16) | (uint32_t{dgid.raw[14]} << 8) | dgid.raw[15];
  std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(qpn);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* mem = mmap(nullptr, kSegBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);  // mapped now too
  *key = tsan::segment_key(fd);
  close(fd);
  if (mem == MAP_FAILED) return nullptr;
  auto* seg = static_cast<Segment*>(mem);
  if (seg->magic != kSegMagic || seg->qpn != qpn || (seg->pid & 0xffffff) != pid || seg->alive.load() == 0) {
    munmap(mem, kSegBytes);
    return nullptr;
  }
  return seg;
}

int emu_modify_qp(ibv_qp* q, ibv_qp_attr* attr, int mask) {
  auto* qp = reinterpret_cast<Qp*>(q);
  Context* ctx = qp->ctx;
  const Profile& p = *ctx->profile;
  std::lock_guard lock(ctx->mu);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  ibv_qp_state to = attr->qp_state;
  switch (to) {
    case IBV_QPS_INIT:
      if (q->state != IBV_QPS_RESET || !(mask & IBV_QP_PORT)) return EINVAL;
      if (attr->port_num < 1 || attr->port_num > p.n_ports) return EINVAL;
      if (attr->port_num != p.active_port || ctx->port_dead) return ENETDOWN;  // a DOWN port
      qp->port = attr->port_num;
      break;
    case IBV_QPS_RTR: {
      if (q->state != IBV_QPS_INIT || !(mask & IBV_QP_AV) || !(mask & IBV_QP_DEST_QPN)) return EINVAL;
      if (ctx->stats.wedged) return EIO;
      if (!attr->ah_attr.is_global) return EINVAL;  // RoCE-like: the GID is the address
      const void* key = nullptr;
      Segment* peer = attach_peer(attr->ah_attr.grh.dgid, attr->dest_qp_num, &key);
      if (peer == nullptr) return ENOENT;
      qp->peer = peer;
      qp->peer_key = key;
      break;
    }
    case IBV_QPS_RTS:
      if (q->state != IBV_QPS_RTR) return EINVAL;
      break;
    case IBV_QPS_ERR:
      if (p.err_wedges) ctx->stats.wedged = true;  // the documented hazard: never do this on TB5
      break;
    case IBV_QPS_RESET:
      break;
    default:
      return EINVAL;
  }
  q->state = to;
  return 0;
}

int emu_destroy_qp(ibv_qp* q) {
  auto* qp = reinterpret_cast<Qp*>(q);
  Context* ctx = qp->ctx;
  std::lock_guard lock(ctx->mu);
  for (Cq* cq : {qp->scq, qp->rcq}) std::erase(cq->qps, qp);
  qp->mine->alive.store(0, std::memory_order_release);
  ring(qp->peer);  // its sends to us now fail (or vanish) at once
  munmap(qp->mine, kSegBytes);
  if (qp->peer) munmap(qp->peer, kSegBytes);
  close(qp->memfd);
  ctx->n_qp--;
  delete qp;
  return 0;
}

int emu_post_send(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto* qp = reinterpret_cast<Qp*>(q);
  Context* ctx = qp->ctx;
  std::lock_guard lock(ctx->mu);
  for (; wr != nullptr; wr = wr->next) {
    *bad = wr;
    if (q->state != IBV_QPS_RTS) return EINVAL;
    if (wr->num_sge > 1) return EINVAL;
    uint32_t op = kOpSend;
    switch (wr->opcode) {
      case IBV_WR_SEND: op = kOpSend; break;
      case IBV_WR_RDMA_WRITE: op = kOpWrite; break;
      case IBV_WR_RDMA_READ: op = kOpRead; break;
      case IBV_WR_ATOMIC_FETCH_AND_ADD: op = kOpFetchAdd; break;
      case IBV_WR_ATOMIC_CMP_AND_SWP: op = kOpCompareSwap; break;
      default: return EOPNOTSUPP;
    }
    if (op != kOpSend && q->qp_type != IBV_QPT_RC) return EOPNOTSUPP;  // UC: two-sided only
    if (qp->sq.size() >= qp->max_send_wr) return ENOMEM;
    uint64_t len = wr->num_sge == 1 ? wr->sg_list[0].length : 0;
    if (len > ctx->profile->max_msg) return EMSGSIZE;
    if ((op == kOpFetchAdd || op == kOpCompareSwap) && len != 8) return EINVAL;
    PendingSend ps{wr->wr_id, wr->num_sge ? reinterpret_cast<std::byte*>(wr->sg_list[0].addr) : nullptr,
                   static_cast<uint32_t>(len), (wr->send_flags & IBV_SEND_SIGNALED) != 0};
    ps.op = op;
    if (op == kOpWrite || op == kOpRead) {
      ps.remote_off = wr->wr.rdma.remote_addr;
      ps.rkey = wr->wr.rdma.rkey;
    } else if (op != kOpSend) {
      ps.remote_off = wr->wr.atomic.remote_addr;
      ps.rkey = wr->wr.atomic.rkey;
      ps.operand0 = wr->wr.atomic.compare_add;
      ps.operand1 = wr->wr.atomic.swap;
    }
    qp->sq.push_back(ps);
  }
  *bad = nullptr;
  progress_sends(qp);
  return 0;
}

int emu_post_recv(ibv_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto* qp = reinterpret_cast<Qp*>(q);
  Context* ctx = qp->ctx;
  std::lock_guard lock(ctx->mu);
  for (; wr != nullptr; wr = wr->next) {
    *bad = wr;
    bool ready = ctx->profile->recv_after_rts ? q->state == IBV_QPS_RTS : q->state != IBV_QPS_RESET;
    if (!ready) return EINVAL;
    if (wr->num_sge > 1) return EINVAL;
    if (qp->rq.size() >= qp->max_recv_wr) return ENOMEM;
    uint32_t len = wr->num_sge == 1 ? wr->sg_list[0].length : 0;
    qp->rq.push_back({wr->wr_id, wr->num_sge ? reinterpret_cast<std::byte*>(wr->sg_list[0].addr) : nullptr, len});
    uint64_t posted = qp->mine->recv_posted.load(std::memory_order_relaxed);
    qp->mine->recv_bytes[posted % kDescRing] = len;
    tsan::release(qp->mine_key);
    qp->mine->recv_posted.store(posted + 1, std::memory_order_release);
  }
  *bad = nullptr;
  unblock_writer(qp->mine, qp->peer);  // credit for the peer's sends
  return 0;
}

int emu_poll_cq(ibv_cq* c, int n, ibv_wc* wc) {
  auto* cq = reinterpret_cast<Cq*>(c);
  std::lock_guard lock(cq->ctx->mu);
  for (Qp* qp : cq->qps) {
    if (qp->base.state != IBV_QPS_RTS) continue;
    progress_sends(qp);
    progress_recvs(qp);
  }
  int got = 0;
  while (got < n && !cq->q.empty()) {
    wc[got++] = cq->q.front();
    cq->q.pop_front();
  }
  return got;
}

// Sleeps until the CQ may have work: a completion to poll, a message due in the QP's segment,
// the peer's bell (a message published, credit or ring space freed), wake_cq, or the timeout.
// Progresses the QP first, as a poll would (its completions wait in the CQ for poll_cq).
int emu_wait_cq(ibv_cq* c, int64_t timeout_ns) {
  auto* cq = reinterpret_cast<Cq*>(c);
  Context* ctx = cq->ctx;
  int64_t until = now_ns() + std::max<int64_t>(timeout_ns, 0);
  Segment* seg = nullptr;
  uint32_t seen = 0;
  {
    std::lock_guard lock(ctx->mu);
    if (cq->qps.size() == 1 && cq->qps[0]->mine != nullptr) seg = cq->qps[0]->mine;
    if (seg != nullptr) {
      seg->sleepers.fetch_add(1, std::memory_order_seq_cst);
      seen = seg->bell.load(std::memory_order_seq_cst);
    }
    bool ready = cq->wake_pending.exchange(false);
    for (Qp* qp : cq->qps) {
      if (qp->base.state != IBV_QPS_RTS) continue;
      progress_sends(qp);
      progress_recvs(qp);
    }
    ready = ready || !cq->q.empty();
    if (seg != nullptr) {
      uint64_t read = seg->msgs_read.load(std::memory_order_relaxed);
      if (!ready && read != seg->msgs_written.load(std::memory_order_acquire)) {
        const Desc& d = seg->desc[read % kDescRing];
        // Due later (a timed link): wake then. Due now, it waits for a receive we post.
        if (d.deliver_after_ns != 0) until = std::min(until, d.deliver_after_ns);
      }
    }
    if (ready) {
      if (seg != nullptr) seg->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return 0;
    }
  }
  int64_t left = until - now_ns();
  if (left > 0) {
#ifdef __linux__
    if (seg != nullptr) {
      timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seg->bell), FUTEX_WAIT, seen, &ts, nullptr, 0);
    } else
#endif
    {
      timespec ts{0, static_cast<long>(std::min<int64_t>(left, 50000))};  // several QPs: a short nap
      ::nanosleep(&ts, nullptr);
    }
  }
  if (seg != nullptr) seg->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  return 0;
}

// Ends a wait_cq now (or makes the next one return at once).
int emu_wake_cq(ibv_cq* c) {
  auto* cq = reinterpret_cast<Cq*>(c);
  std::lock_guard lock(cq->ctx->mu);
  cq->wake_pending.store(true);
  if (cq->qps.size() == 1) ring(cq->qps[0]->mine);
  return 0;
}

const char* emu_wc_status_str(ibv_wc_status st) {
  switch (st) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_WR_FLUSH_ERR: return "work request flushed error";
    default: return "other error";
  }
}

VerbsApi make_api() {
  VerbsApi a;
  a.library = "emulator";
  a.emulated = true;
  a.get_device_list = emu_get_device_list;
  a.free_device_list = emu_free_device_list;
  a.get_device_name = emu_get_device_name;
  a.open_device = emu_open_device;
  a.close_device = emu_close_device;
  a.query_device = emu_query_device;
  a.query_port = emu_query_port;
  a.query_gid = emu_query_gid;
  a.alloc_pd = emu_alloc_pd;
  a.dealloc_pd = emu_dealloc_pd;
  a.reg_mr = emu_reg_mr;
  a.dereg_mr = emu_dereg_mr;
  a.create_cq = emu_create_cq;
  a.destroy_cq = emu_destroy_cq;
  a.create_qp = emu_create_qp;
  a.modify_qp = emu_modify_qp;
  a.destroy_qp = emu_destroy_qp;
  a.post_send = emu_post_send;
  a.post_recv = emu_post_recv;
  a.poll_cq = emu_poll_cq;
  a.wait_cq = emu_wait_cq;
  a.wake_cq = emu_wake_cq;
  a.wc_status_str = emu_wc_status_str;
  return a;
}

bool parse_u64(std::string_view s, uint64_t* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

const VerbsApi& api() {
  static const VerbsApi a = make_api();
  return a;
}

std::string_view device_for_profile(std::string_view profile) {
  for (const Profile& p : kProfiles)
    if (profile == p.name) return p.device;
  return {};
}

void set_faults(ibv_context* c, const Faults& faults) {
  Context* ctx = ctx_of(c);
  std::lock_guard lock(ctx->mu);
  ctx->faults = faults;
}

Stats stats(ibv_context* c) {
  Context* ctx = ctx_of(c);
  std::lock_guard lock(ctx->mu);
  return ctx->stats;
}

Result<MachineFaults> parse_machine_faults(std::string_view words) {
  MachineFaults f;
  while (!words.empty()) {
    const size_t comma = words.find(',');
    std::string_view w = words.substr(0, comma);
    words = comma == std::string_view::npos ? std::string_view{} : words.substr(comma + 1);
    if (w == "no-device") f.no_device = true;
    else if (w == "port-down") f.port_down = true;
    else if (w == "no-gid1") f.no_gid1 = true;
    else if (w == "no-pd") f.no_pd = true;
    else if (!w.empty())
      return InvalidArgument(std::string(kMachineFaultEnv) + ": unknown fault '" + std::string(w) +
                             "' (known: no-device, port-down, no-gid1, no-pd)");
  }
  return f;
}

Result<MachineFaults> machine_faults_from_env() {
  const char* env = std::getenv(kMachineFaultEnv);
  return parse_machine_faults(env ? env : "");
}

Result<Faults> parse_faults(std::string_view query) {
  Faults f;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (kv.empty()) continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) return InvalidArgument("verbs-emu: parameter '" + std::string(kv) + "' needs a value");
    std::string_view key = kv.substr(0, eq), val = kv.substr(eq + 1);
    auto bad = [&] { return InvalidArgument("verbs-emu: bad value '" + std::string(val) + "' for " + std::string(key)); };
    uint64_t n = 0;
    if (key == "drop" || key == "dup" || key == "corrupt" || key == "tamper" || key == "replay" || key == "reorder" ||
        key == "kill_port_after") {
      if (!parse_u64(val, &n) || n == 0) return bad();
      (key == "drop"      ? f.drop_frame
       : key == "dup"     ? f.dup_frame
       : key == "corrupt" ? f.corrupt_frame
       : key == "tamper"  ? f.tamper_frame
       : key == "replay"  ? f.replay_frame
       : key == "reorder" ? f.reorder_frame
                          : f.kill_port_after) = n;
    } else if (key == "delay") {
      size_t colon = val.find(':');
      if (colon == std::string_view::npos) return bad();
      std::string_view ms = val.substr(colon + 1);
      if (ms.ends_with("ms")) ms.remove_suffix(2);
      uint64_t d = 0;
      if (!parse_u64(val.substr(0, colon), &n) || n == 0 || !parse_u64(ms, &d) || d > 600000) return bad();
      f.delay_frame = n;
      f.delay = std::chrono::milliseconds(d);
    } else if (key == "latency_us" || key == "gbytes_s") {
      double v = 0;
      auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
      // A link of more than a second one way, or slower than 1 KB/s, is a typo, not a cable.
      if (ec != std::errc() || p != val.data() + val.size() || !(v > 0) ||
          (key == "latency_us" ? v > 1e6 : v < 1e-6 || v > 1e4))
        return bad();
      (key == "latency_us" ? f.latency_us : f.gbytes_s) = v;
    } else if (key == "no_ipv4") {
      if (val != "0" && val != "1") return bad();
      f.no_ipv4 = val == "1";
    } else {
      return InvalidArgument("verbs-emu: unknown parameter '" + std::string(key) +
                             "' (known: drop, dup, corrupt, tamper, replay, reorder, delay, kill_port_after, no_ipv4, "
                             "latency_us, gbytes_s)");
    }
  }
  return f;
}

}  // namespace lattice::fabric::verbs::emu
