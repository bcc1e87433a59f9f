// The verbs probe of discover_probe.h (ops 5 and 6): each end opens a verbs endpoint on its
// RDMA device, the two swap endpoint addresses over the probe's sealed TCP channel, and the
// figures come from messages over verbs itself, as `lattice ping` measures them
// (tools/lattice/fabric_bench.cc): first a warm-up that sends kWarmupBytes each way, then
// 64-byte echoes for latency, then a window of 256 KiB sends for bandwidth, timed up to the
// peer's acknowledgement of the last one over verbs. Only then does the count go over TCP.
//
// Why the warm-up: a queue pair's first pass over its memory is not its speed. The emulated
// device gives every QP a 16 MiB ring of fresh shared memory (emu.cc: 4,096 frames of 4 KiB), and
// every staged message takes a whole 32 KiB slot of it, an echo or an ack as much as a chunk of
// data; the first touch of each page is a fault (12 us a write, 6 us a read on the 2-core test
// machine, ~75 ms per ring). Without the warm-up the probe's 30 echoes and 60 ms stream ran
// entirely inside that first pass: 0.5-4 ms one way and 0.1-0.7 Gbit/s, where `lattice ping`
// (550 echoes before its median) read 10-90 us; `lattice ping --iters 20` on the same device
// reads as low as the cold probe did. A NIC's first pass (page pinning, its translation cache)
// has the same shape, cheaper.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "lattice/cluster/discover_probe_channel.h"
#include "lattice/cluster/topology_links.h"
#include "lattice/fabric/fabric.h"

namespace lattice::cluster::detail {
namespace {

constexpr size_t kPingBytes = 64;
constexpr size_t kChunkBytes = 256u << 10;
constexpr size_t kEndBytes = 8;
constexpr size_t kEndAckBytes = 16;  // u32 tag | u32 0 | u64 bytes counted
constexpr int kWindow = 8;           // stream and warm-up sends in flight, as `lattice ping`'s window
constexpr int kSlots = 8;            // chunk-sized receives each end keeps posted
constexpr int kEchoSlots = 8;        // the server's echo buffers (an echo's send may complete late)
constexpr int kWarmupEchoes = 10;
// The warm-up: this much each way (more than the emulator's ring of 4,096 frames takes, at 9
// slots of 8 frames per chunk), cut short after kWarmupMax so a slow device keeps the probe's
// window bounded.
constexpr uint64_t kWarmupBytes = 64 * kChunkBytes;
constexpr auto kWarmupMax = std::chrono::milliseconds(400);
enum Tag : uint32_t { kTagEcho = 1, kTagData = 2, kTagEnd = 3, kTagWarm = 4 };
// Initiator: its sends, and its receives kRecv..kRecv+kSlots-1. Server: its receives 0..kSlots-1,
// its sends.
enum WorkIds : fabric::WorkId {
  kPingSend = 1000, kChunkSend, kEndSend, kEchoSend, kEndAckSend,
  kRecv = 2000,      // ..+kSlots
  kWarmSend = 3000,  // ..+kSlots: the server's warm-up echo of its slot i
};

// One end: the provider on the device, one queue, one endpoint, its regions. Members are
// destroyed in reverse order: the endpoint first, the provider last (fabric.h).
struct VerbsEnd {
  std::unique_ptr<fabric::Provider> provider;
  std::unique_ptr<fabric::CompletionQueue> cq;
  std::vector<std::unique_ptr<fabric::MemoryRegion>> regions;
  std::unique_ptr<fabric::Endpoint> ep;
};

Status open_end(VerbsEnd& e, const crypto::ClusterSecret& secret, const std::string& device, Clock::duration timeout) {
  const std::string uri = verbs_device_uri(device);
  const std::string what = "RDMA device " + device + " (" + uri + ")";
  fabric::ProviderOptions po;
  po.secret = secret.bytes();  // sealed, as the cluster's links are
  auto p = fabric::make_provider(uri, po);
  if (!p.ok()) return p.status().with_context(what);
  e.provider = std::move(*p);
  if (e.provider->caps().max_msg < kChunkBytes)
    return Unavailable(what + ": its largest message is " + std::to_string(e.provider->caps().max_msg) +
                       " bytes, the probe sends " + std::to_string(kChunkBytes));
  auto cq = e.provider->create_cq(64);
  if (!cq.ok()) return cq.status().with_context(what);
  e.cq = std::move(*cq);
  fabric::EndpointOptions eo;
  eo.peer_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  auto ep = e.provider->create_endpoint(e.cq.get(), e.cq.get(), eo);
  if (!ep.ok()) return ep.status().with_context(what);
  e.ep = std::move(*ep);
  return Status::Ok();
}

Result<fabric::MemoryRegion*> region(VerbsEnd& e, size_t n_bytes) {
  auto mr = e.provider->allocate_memory(n_bytes, fabric::kLocalRead | fabric::kLocalWrite);
  if (!mr.ok()) return mr.status().with_context("verbs probe: " + std::to_string(n_bytes) + "-byte region");
  std::memset((*mr)->data(), 0, n_bytes);
  e.regions.push_back(std::move(*mr));
  return e.regions.back().get();
}

void put_tag(fabric::MemoryRegion* mr, size_t offset, uint32_t tag) { std::memcpy(mr->data() + offset, &tag, sizeof tag); }
uint32_t tag_at(const fabric::MemoryRegion* mr, size_t offset) {
  uint32_t tag = 0;
  std::memcpy(&tag, mr->data() + offset, sizeof tag);
  return tag;
}

// Polls for completions until `until` says enough; every completion goes to `on` first. A
// failed completion is the error. It polls rather than waits, as the collectives' and `lattice
// ping`'s loops do: a poller drives the verbs endpoint's progress on its own thread, where a
// waiter relies on the endpoint's thread, which naps when idle.
template <class On, class Until>
Status drive(VerbsEnd& e, Deadline deadline, const char* what, On on, Until until) {
  fabric::Completion comps[16];
  while (!until()) {
    const size_t n = e.cq->poll(comps);
    if (n == 0 && deadline.expired()) return Timeout(std::string("verbs probe: ") + what);
    for (size_t i = 0; i < n; ++i) {
      if (!comps[i].status.ok())
        return comps[i].status.with_context(std::string("verbs probe: ") + what + " (" +
                                            std::string(fabric::to_string(comps[i].op)) + ")");
      LATTICE_RETURN_IF_ERROR(on(comps[i]));
    }
  }
  return Status::Ok();
}

// The initiator's measurement on a connected end. `out`: a chunk (offset 0) and, past it, the
// echo's and the end's messages, so a phase's tag is never rewritten under a send in flight;
// `in`: kSlots chunk-sized receives, posted here, which every reply lands in. The peer's count
// comes back over verbs (timed) and over `ch` (its verdict).
Result<ProbeResult> measure(VerbsEnd& e, fabric::MemoryRegion* out, fabric::MemoryRegion* in, ProbeChannel& ch,
                            const ProbeOptions& o, Deadline deadline) {
  constexpr size_t kPingAt = kChunkBytes, kEndAt = kChunkBytes + kPingBytes;
  put_tag(out, kPingAt, kTagEcho);
  put_tag(out, kEndAt, kTagEnd);
  for (fabric::WorkId k = 0; k < kSlots; ++k)
    LATTICE_RETURN_IF_ERROR(e.ep->post_recv({in, k * kChunkBytes, kChunkBytes}, kRecv + k));
  // What every phase's completions share: chunk sends in flight, ping sends in flight, and the
  // replies, each reposted once read.
  int chunks_inflight = 0, pings_inflight = 0;
  auto is_recv = [](const fabric::Completion& c) {
    return c.op == fabric::Opcode::kRecv && c.id >= kRecv && c.id < kRecv + kSlots;
  };
  auto sends_done = [&](const fabric::Completion& c) {
    if (c.id == kChunkSend) --chunks_inflight;
    if (c.id == kPingSend) --pings_inflight;
  };
  auto repost = [&](const fabric::Completion& c) {
    return e.ep->post_recv({in, (c.id - kRecv) * kChunkBytes, kChunkBytes}, c.id);
  };
  auto reply_tag = [&](const fabric::Completion& c) { return tag_at(in, (c.id - kRecv) * kChunkBytes); };

  // Warm-up: chunks the peer sends back whole, so both directions' memory has been through once.
  put_tag(out, 0, kTagWarm);
  uint64_t warm_posted = 0, warm_back = 0;
  Status post_error;  // a post that failed: the phase stops there
  const auto warm_stop = Clock::now() + kWarmupMax;
  LATTICE_RETURN_IF_ERROR(drive(
      e, deadline, "warm-up",
      [&](const fabric::Completion& c) -> Status {
        sends_done(c);
        if (!is_recv(c)) return Status::Ok();
        if (c.bytes != kChunkBytes || reply_tag(c) != kTagWarm)
          return Corrupt("verbs probe: a warm-up reply of " + std::to_string(c.bytes) + " bytes");
        ++warm_back;
        return repost(c);
      },
      [&]() -> bool {
        const bool more = warm_posted * kChunkBytes < kWarmupBytes && Clock::now() < warm_stop;
        while (more && chunks_inflight < kWindow && warm_posted - warm_back < static_cast<uint64_t>(kSlots)) {
          post_error = e.ep->post_send({out, 0, kChunkBytes}, kChunkSend);
          if (!post_error.ok()) return true;
          ++chunks_inflight;
          ++warm_posted;
        }
        return !more && chunks_inflight == 0 && warm_back == warm_posted;
      }));
  LATTICE_RETURN_IF_ERROR(post_error.with_context("verbs probe: warm-up"));

  // Latency: echoes, one at a time, timed from the send to the echo's arrival (a send's own
  // completion is not waited for: it may follow the echo). The first kWarmupEchoes are not timed.
  std::vector<double> rtts;
  for (int i = 0; i < kWarmupEchoes + std::max(1, o.pings); ++i) {
    bool got = false;
    const auto t0 = Clock::now();
    LATTICE_RETURN_IF_ERROR(e.ep->post_send({out, kPingAt, kPingBytes}, kPingSend));
    ++pings_inflight;
    LATTICE_RETURN_IF_ERROR(drive(
        e, deadline, "echo",
        [&](const fabric::Completion& c) -> Status {
          sends_done(c);
          if (!is_recv(c)) return Status::Ok();
          if (c.bytes != kPingBytes || reply_tag(c) != kTagEcho)
            return Corrupt("verbs probe: an echo of " + std::to_string(c.bytes) + " bytes");
          got = true;
          return repost(c);
        },
        [&] { return got && pings_inflight < kWindow; }));
    if (i >= kWarmupEchoes) rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  LATTICE_RETURN_IF_ERROR(drive(
      e, deadline, "echo sends", [&](const fabric::Completion& c) -> Status { sends_done(c); return Status::Ok(); },
      [&] { return pings_inflight == 0; }));
  std::nth_element(rtts.begin(), rtts.begin() + static_cast<long>(rtts.size() / 2), rtts.end());
  ProbeResult r;
  r.latency_us = rtts[rtts.size() / 2] / 2;

  // Bandwidth, as `lattice ping` times it: a window of sends for stream_time, every one
  // completed, then the end; the clock stops at the peer's acknowledgement over verbs.
  put_tag(out, 0, kTagData);  // every warm-up send completed: nothing reads the chunk now
  uint64_t sent = 0, acked = 0;
  bool ending = false, got_ack = false;
  const auto t0 = Clock::now();
  const auto stop = t0 + o.stream_time;
  LATTICE_RETURN_IF_ERROR(drive(
      e, deadline, "stream",
      [&](const fabric::Completion& c) -> Status {
        sends_done(c);
        if (!is_recv(c)) return Status::Ok();
        if (c.bytes != kEndAckBytes || reply_tag(c) != kTagEnd)
          return Corrupt("verbs probe: a stream reply of " + std::to_string(c.bytes) + " bytes");
        std::memcpy(&acked, in->data() + (c.id - kRecv) * kChunkBytes + 8, sizeof acked);
        got_ack = true;
        return Status::Ok();
      },
      [&]() -> bool {
        while (!ending && chunks_inflight < kWindow && Clock::now() < stop) {
          post_error = e.ep->post_send({out, 0, kChunkBytes}, kChunkSend);
          if (!post_error.ok()) return true;
          ++chunks_inflight;
          sent += kChunkBytes;
        }
        if (!ending && chunks_inflight == 0 && Clock::now() >= stop) {
          post_error = e.ep->post_send({out, kEndAt, kEndBytes}, kEndSend);
          if (!post_error.ok()) return true;
          ending = true;
        }
        // Not the end's own completion: the acknowledgement says it arrived, and the peer
        // may close its end before that completion comes back.
        return got_ack;
      }));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  LATTICE_RETURN_IF_ERROR(post_error.with_context("verbs probe: stream"));
  ProbeReply rep{};
  std::string msg;
  LATTICE_RETURN_IF_ERROR(recv_reply(ch, &rep, &msg, deadline));
  if (!rep.ok) return Unavailable("the peer: " + msg);
  if (rep.bytes != sent || acked != sent)
    return Corrupt("verbs probe stream: sent " + std::to_string(sent) + " bytes, the peer counted " +
                   std::to_string(rep.bytes) + " (" + std::to_string(acked) + " over verbs)");
  r.bytes = sent;
  r.gbps = secs > 0 ? static_cast<double>(sent) * 8 / secs / 1e9 : 0;
  return r;
}

}  // namespace

Result<ProbeResult> verbs_probe_initiator(ProbeChannel& ch, const crypto::ClusterSecret& secret,
                                          const std::string& my_device, const std::string& peer_device,
                                          const ProbeOptions& o, Deadline deadline) {
  if (my_device.empty() || peer_device.empty()) return InvalidArgument("verbs probe: a device name is empty");
  VerbsEnd e;
  LATTICE_RETURN_IF_ERROR(open_end(e, secret, my_device, o.timeout));
  LATTICE_ASSIGN_OR_RETURN(fabric::MemoryRegion * out, region(e, kChunkBytes + 2 * kPingBytes));
  LATTICE_ASSIGN_OR_RETURN(fabric::MemoryRegion * in, region(e, kChunkBytes * kSlots));
  const std::vector<std::byte> mine = e.ep->local_address();
  if (mine.size() > kMaxBlobFrame) return Internal("verbs probe: endpoint address of " + std::to_string(mine.size()) + " bytes");

  // Set up: the peer opens its device and answers its endpoint's address.
  const uint64_t ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout).count());
  ProbeHeader h{kOpVerbsServe, 0, 0, 0, ms};
  LATTICE_RETURN_IF_ERROR(ch.send(&h, sizeof h, deadline));
  LATTICE_RETURN_IF_ERROR(ch.send_text(peer_device, deadline));
  LATTICE_RETURN_IF_ERROR(ch.send(mine.data(), mine.size(), deadline));
  ProbeReply rep{};
  std::string msg;
  LATTICE_RETURN_IF_ERROR(recv_reply(ch, &rep, &msg, deadline));
  if (!rep.ok) return Unavailable("the peer could not open its end: " + msg);
  LATTICE_ASSIGN_OR_RETURN(size_t n, ch.recv(kMaxBlobFrame, deadline));
  const std::vector<std::byte> theirs(ch.buf.begin(), ch.buf.begin() + static_cast<long>(n));
  LATTICE_RETURN_IF_ERROR(e.ep->connect(theirs, deadline).with_context("verbs probe: connecting " + my_device + " to the peer's " + peer_device));

  auto r = measure(e, out, in, ch, o, deadline);
  if (r.ok() || r.status().code() == ErrorCode::kCorrupt) return r;
  // A verbs failure on our side is often the peer's: it sends why before it closes its end.
  ProbeReply why{};
  std::string peer_msg;
  if (recv_reply(ch, &why, &peer_msg, Deadline::after(std::chrono::milliseconds(500))).ok() && !why.ok)
    return r.status().with_context("the peer: " + peer_msg);
  return r;
}

Status verbs_probe_responder(ProbeChannel& ch, const crypto::ClusterSecret& secret, const ProbeHeader& h) {
  const auto timeout = std::chrono::milliseconds(std::clamp<uint64_t>(h.b, 100, 10000));
  const Deadline deadline = Deadline::after(timeout);
  LATTICE_ASSIGN_OR_RETURN(std::string device, ch.recv_text(kMaxNameFrame, deadline));
  LATTICE_ASSIGN_OR_RETURN(size_t n, ch.recv(kMaxBlobFrame, deadline));
  const std::vector<std::byte> theirs(ch.buf.begin(), ch.buf.begin() + static_cast<long>(n));
  if (device.empty()) return send_failure(ch, InvalidArgument("verbs probe: no device named"), deadline);
  VerbsEnd e;
  if (Status s = open_end(e, secret, device, timeout); !s.ok()) return send_failure(ch, s, deadline);
  auto slots = region(e, kChunkBytes * kSlots);
  if (!slots.ok()) return send_failure(ch, slots.status(), deadline);
  // kEchoSlots echo buffers, then the end's acknowledgement.
  constexpr size_t kEndAckAt = kPingBytes * kEchoSlots;
  auto echo = region(e, kEndAckAt + kEndAckBytes);
  if (!echo.ok()) return send_failure(ch, echo.status(), deadline);
  const std::vector<std::byte> mine = e.ep->local_address();
  if (mine.size() > kMaxBlobFrame) return send_failure(ch, Internal("verbs probe: endpoint address too long"), deadline);
  LATTICE_RETURN_IF_ERROR(send_reply(ch, ProbeReply{1, {}, 0, 0, 0, 0, 0}, "", deadline));
  LATTICE_RETURN_IF_ERROR(ch.send(mine.data(), mine.size(), deadline));
  if (Status s = e.ep->connect(theirs, deadline); !s.ok())
    return send_failure(ch, s.with_context("verbs probe: connecting " + device + " to the initiator"), deadline);

  auto post_slot = [&](fabric::WorkId i) { return e.ep->post_recv({*slots, i * kChunkBytes, kChunkBytes}, i); };
  for (fabric::WorkId i = 0; i < kSlots; ++i)
    if (Status s = post_slot(i); !s.ok()) return send_failure(ch, s, deadline);
  uint64_t counted = 0;
  bool end_acked = false;  // the end's acknowledgement was delivered (its send completed)
  int echoes_inflight = 0;  // echo sends not completed: their buffers are still the endpoint's
  uint64_t echoes = 0;
  int echo_pending = -1;  // a slot holding an echo that waits for a free echo buffer
  auto echo_from = [&](fabric::WorkId slot) -> Status {
    const size_t at = (echoes++ % kEchoSlots) * kPingBytes;
    std::memcpy((*echo)->data() + at, (*slots)->data() + slot * kChunkBytes, kPingBytes);
    LATTICE_RETURN_IF_ERROR(e.ep->post_send({*echo, at, kPingBytes}, kEchoSend));
    ++echoes_inflight;
    return post_slot(slot);
  };
  Status s = drive(
      e, deadline, "serving the initiator",
      [&](const fabric::Completion& c) -> Status {
        if (c.op == fabric::Opcode::kSend) {
          // A warm-up chunk went back whole from its slot: the slot is free again.
          if (c.id >= kWarmSend && c.id < kWarmSend + kSlots) return post_slot(c.id - kWarmSend);
          if (c.id == kEndAckSend) end_acked = true;
          if (c.id != kEchoSend) return Status::Ok();
          --echoes_inflight;
          if (echo_pending >= 0) {
            const auto slot = static_cast<fabric::WorkId>(echo_pending);
            echo_pending = -1;
            return echo_from(slot);
          }
          return Status::Ok();
        }
        if (c.op != fabric::Opcode::kRecv || c.id >= kSlots) return Status::Ok();
        if (c.bytes < sizeof(uint32_t)) return Corrupt("verbs probe: a message of " + std::to_string(c.bytes) + " bytes");
        const uint32_t tag = tag_at(*slots, c.id * kChunkBytes);
        switch (tag) {
          case kTagEcho:
            if (c.bytes != kPingBytes) return Corrupt("verbs probe: an echo of " + std::to_string(c.bytes) + " bytes");
            if (echoes_inflight == kEchoSlots) {
              echo_pending = static_cast<int>(c.id);
              return Status::Ok();
            }
            return echo_from(c.id);
          case kTagWarm:
            if (c.bytes != kChunkBytes) return Corrupt("verbs probe: a warm-up chunk of " + std::to_string(c.bytes) + " bytes");
            return e.ep->post_send({*slots, c.id * kChunkBytes, kChunkBytes}, kWarmSend + c.id);
          case kTagData: counted += c.bytes; return post_slot(c.id);
          case kTagEnd: {
            // Acknowledged over verbs: the initiator's clock stops on it, as `lattice ping`'s does.
            std::byte* ack = (*echo)->data() + kEndAckAt;
            const uint32_t words[2] = {kTagEnd, 0};
            std::memcpy(ack, words, sizeof words);
            std::memcpy(ack + sizeof words, &counted, sizeof counted);
            return e.ep->post_send({*echo, kEndAckAt, kEndAckBytes}, kEndAckSend);
          }
          default: return Corrupt("verbs probe: unknown message tag " + std::to_string(tag));
        }
      },
      [&] { return end_acked; });
  if (!s.ok()) return send_failure(ch, s, deadline);
  ProbeReply done{};
  done.ok = 1;
  done.bytes = counted;
  return send_reply(ch, done, "", deadline);
}

}  // namespace lattice::cluster::detail
