// The verbs probe of discover_probe.h (ops 5 and 6): each end opens a verbs endpoint on its
// RDMA device, the two swap endpoint addresses over the probe's sealed TCP channel, and the
// figures come from messages over verbs itself: 64-byte echoes for latency, a window of
// 256 KiB sends for bandwidth, up to the server's count of what arrived (sent back over TCP).
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
constexpr int kWindow = 4;      // the initiator's stream sends in flight
constexpr int kRecvSlots = 8;   // receives the server keeps posted
constexpr int kEchoSlots = 8;   // the server's echo buffers (an echo's send may complete late)
constexpr int kWarmupEchoes = 10;
enum Tag : uint32_t { kTagEcho = 1, kTagData = 2, kTagEnd = 3 };
enum WorkIds : fabric::WorkId { kPingSend = 1000, kChunkSend, kEndSend, kEchoSend, kPingRecv = 2000 /* ..+kEchoSlots */ };

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

// Polls for completions until `until` says enough; every completion goes to `on` first. A
// failed completion is the error. It polls rather than waits, as the collectives' and `lattice
// ping`'s loops do: a poller drives the verbs endpoint's progress on its own thread, where a
// waiter relies on the endpoint's thread, which naps when idle (0.5-2 ms one way under load,
// against ping's 30 us on the same emulated device).
// `leftover` says which failed completions to skip: receives still posted from an earlier
// phase, which fail once the peer closes its end.
template <class On, class Until>
Status drive(VerbsEnd& e, Deadline deadline, const char* what, On on, Until until,
             bool (*leftover)(const fabric::Completion&) = nullptr) {
  fabric::Completion comps[16];
  while (!until()) {
    const size_t n = e.cq->poll(comps);
    if (n == 0 && deadline.expired()) return Timeout(std::string("verbs probe: ") + what);
    for (size_t i = 0; i < n; ++i) {
      if (!comps[i].status.ok() && leftover && leftover(comps[i])) continue;
      if (!comps[i].status.ok())
        return comps[i].status.with_context(std::string("verbs probe: ") + what + " (" +
                                            std::string(fabric::to_string(comps[i].op)) + ")");
      LATTICE_RETURN_IF_ERROR(on(comps[i]));
    }
  }
  return Status::Ok();
}

// The echoes and the stream, on a connected initiator end (`out`: a chunk-sized send region,
// `in`: kEchoSlots echo buffers); the peer's count comes back over `ch`.
Result<ProbeResult> measure(VerbsEnd& e, fabric::MemoryRegion* out, fabric::MemoryRegion* in, ProbeChannel& ch,
                            const ProbeOptions& o, Deadline deadline) {
  // Latency: echoes, one at a time, timed from the send to the echo's arrival (a send's own
  // completion is not waited for: it may follow the echo). The first kWarmupEchoes are not
  // timed: the peer's endpoint may still be napping between polls.
  std::vector<double> rtts;
  put_tag(out, 0, kTagEcho);
  int pings_inflight = 0;
  // Receives posted ahead, as `lattice ping` does: one posted just before each send left the
  // echo waiting (5-30 ms a round trip on the emulator, against 0.6 ms with these).
  for (fabric::WorkId k = 0; k < kEchoSlots; ++k)
    LATTICE_RETURN_IF_ERROR(e.ep->post_recv({in, k * kPingBytes, kPingBytes}, kPingRecv + k));
  for (int i = 0; i < kWarmupEchoes + std::max(1, o.pings); ++i) {
    bool got = false;
    auto t0 = Clock::now();
    LATTICE_RETURN_IF_ERROR(e.ep->post_send({out, 0, kPingBytes}, kPingSend));
    ++pings_inflight;
    LATTICE_RETURN_IF_ERROR(drive(
        e, deadline, "echo",
        [&](const fabric::Completion& c) -> Status {
          if (c.id == kPingSend) --pings_inflight;
          if (c.op == fabric::Opcode::kRecv && c.id >= kPingRecv && c.id < kPingRecv + kEchoSlots) {
            if (c.bytes != kPingBytes) return Corrupt("verbs probe: an echo of " + std::to_string(c.bytes) + " bytes");
            got = true;
            return e.ep->post_recv({in, (c.id - kPingRecv) * kPingBytes, kPingBytes}, c.id);
          }
          return Status::Ok();
        },
        [&] { return got && pings_inflight < kWindow; }));
    if (i >= kWarmupEchoes) rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  LATTICE_RETURN_IF_ERROR(drive(
      e, deadline, "echo sends",
      [&](const fabric::Completion& c) -> Status {
        if (c.id == kPingSend) --pings_inflight;
        return Status::Ok();
      },
      [&] { return pings_inflight == 0; }));
  std::nth_element(rtts.begin(), rtts.begin() + static_cast<long>(rtts.size() / 2), rtts.end());
  ProbeResult r;
  r.latency_us = rtts[rtts.size() / 2] / 2;

  // Bandwidth: a window of sends for stream_time, then the end, then the peer's count.
  put_tag(out, 0, kTagData);  // every echo's send completed: nothing reads `out` now
  int inflight = 0;
  uint64_t sent = 0;
  bool ending = false;
  Status post_error;  // a post that failed: the stream stops there
  const auto t0 = Clock::now();
  const auto stop = t0 + o.stream_time;
  LATTICE_RETURN_IF_ERROR(drive(
      e, deadline, "stream",
      [&](const fabric::Completion& c) -> Status {
        if (c.id == kChunkSend) --inflight;
        return Status::Ok();
      },
      [&]() -> bool {
        while (!ending && inflight < kWindow && Clock::now() < stop) {
          post_error = e.ep->post_send({out, 0, kChunkBytes}, kChunkSend);
          if (!post_error.ok()) return true;
          ++inflight;
          sent += kChunkBytes;
        }
        if (!ending && inflight == 0 && Clock::now() >= stop) {
          put_tag(out, 0, kTagEnd);  // every chunk's send completed: nothing reads `out` now
          post_error = e.ep->post_send({out, 0, kEndBytes}, kEndSend);
          if (!post_error.ok()) return true;
          ending = true;
        }
        // Not the end's own completion: the peer's count over TCP says it all arrived, and the
        // peer may close its end before that completion comes back.
        return ending;
      },
      [](const fabric::Completion& c) { return c.op == fabric::Opcode::kRecv && c.id >= kPingRecv; }));
  LATTICE_RETURN_IF_ERROR(post_error.with_context("verbs probe: stream"));
  ProbeReply rep{};
  std::string msg;
  LATTICE_RETURN_IF_ERROR(recv_reply(ch, &rep, &msg, deadline));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!rep.ok) return Unavailable("the peer: " + msg);
  if (rep.bytes != sent)
    return Corrupt("verbs probe stream: sent " + std::to_string(sent) + " bytes, the peer counted " + std::to_string(rep.bytes));
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
  LATTICE_ASSIGN_OR_RETURN(fabric::MemoryRegion * out, region(e, kChunkBytes));
  LATTICE_ASSIGN_OR_RETURN(fabric::MemoryRegion * in, region(e, kPingBytes * kEchoSlots));
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
  auto slots = region(e, kChunkBytes * kRecvSlots);
  if (!slots.ok()) return send_failure(ch, slots.status(), deadline);
  auto echo = region(e, kPingBytes * kEchoSlots);
  if (!echo.ok()) return send_failure(ch, echo.status(), deadline);
  const std::vector<std::byte> mine = e.ep->local_address();
  if (mine.size() > kMaxBlobFrame) return send_failure(ch, Internal("verbs probe: endpoint address too long"), deadline);
  LATTICE_RETURN_IF_ERROR(send_reply(ch, ProbeReply{1, {}, 0, 0, 0, 0, 0}, "", deadline));
  LATTICE_RETURN_IF_ERROR(ch.send(mine.data(), mine.size(), deadline));
  if (Status s = e.ep->connect(theirs, deadline); !s.ok())
    return send_failure(ch, s.with_context("verbs probe: connecting " + device + " to the initiator"), deadline);

  auto post_slot = [&](fabric::WorkId i) { return e.ep->post_recv({*slots, i * kChunkBytes, kChunkBytes}, i); };
  for (fabric::WorkId i = 0; i < kRecvSlots; ++i)
    if (Status s = post_slot(i); !s.ok()) return send_failure(ch, s, deadline);
  uint64_t counted = 0;
  bool end = false;
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
          --echoes_inflight;
          if (echo_pending >= 0) {
            const auto slot = static_cast<fabric::WorkId>(echo_pending);
            echo_pending = -1;
            return echo_from(slot);
          }
          return Status::Ok();
        }
        if (c.op != fabric::Opcode::kRecv || c.id >= kRecvSlots) return Status::Ok();
        uint32_t tag = 0;
        if (c.bytes < sizeof tag) return Corrupt("verbs probe: a message of " + std::to_string(c.bytes) + " bytes");
        std::memcpy(&tag, (*slots)->data() + c.id * kChunkBytes, sizeof tag);
        switch (tag) {
          case kTagEcho:
            if (c.bytes != kPingBytes) return Corrupt("verbs probe: an echo of " + std::to_string(c.bytes) + " bytes");
            if (echoes_inflight == kEchoSlots) {
              echo_pending = static_cast<int>(c.id);
              return Status::Ok();
            }
            return echo_from(c.id);
          case kTagData: counted += c.bytes; return post_slot(c.id);
          case kTagEnd: end = true; return Status::Ok();
          default: return Corrupt("verbs probe: unknown message tag " + std::to_string(tag));
        }
      },
      [&] { return end; });
  if (!s.ok()) return send_failure(ch, s, deadline);
  ProbeReply done{};
  done.ok = 1;
  done.bytes = counted;
  return send_reply(ch, done, "", deadline);
}

}  // namespace lattice::cluster::detail
