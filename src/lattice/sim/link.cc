// Link presets. Sources:
//  [tn3205]  Apple TN3205 "Low-latency communication with RDMA over Thunderbolt" and ANCHORS.md:
//            ib_send_lat 64 B about 4.2 us one way; 4 KiB 4.64 us (hellas-ai/thunderbolt-ibverbs issue 27);
//            JACCL bulk 7.4-8 GB/s per cable; ib_send_bw 64 KiB 75 Gb/s.
//  [tbnet]   TCP over the same Thunderbolt cable: 52-64 Gbit/s iperf3, round trips of 0.3-0.7 ms
//            (ANCHORS.md, reports gathered from MLX / exo users); 0.5 ms round trip modelled.
//  [eth]     10 GbE: 9.4 Gbit/s TCP goodput, about 50 us TCP round trip between two hosts through one
//            switch (typical sockperf figures); 100 GbE: 11.5 GB/s, 10 us TCP round trip (kernel TCP;
//            RDMA NICs reach 2-3 us, not modelled here).
//  [here]    this machine (ANCHORS.md): UCX shared memory 0.15 us / 11.8 GB/s; TCP loopback ping-pong
//            25 us blocking, 4-5.5 us busy polling; iperf3 loopback 22.6-23.9 Gbit/s. `sim --calibrate`
//            measures lattice's own figures and they take precedence.
#include <cmath>
#include <map>

#include "lattice/fabric/verbs/wire.h"
#include "lattice/sim/link.h"

namespace lattice::sim {
namespace {

const std::map<std::string, LinkModel>& table() {
  static const std::map<std::string, LinkModel> t = {
      {"tb5-rdma", {"tb5-rdma", "[tn3205]", 4.5, 7.5, 1.0, true}},
      {"tb5-tcp", {"tb5-tcp", "[tbnet]", 250, 7.0, 5.0, true}},
      {"10gbe", {"10gbe", "[eth]", 25, 1.17, 5.0, false}},
      {"100gbe", {"100gbe", "[eth]", 5, 11.5, 3.0, false}},
      {"shm", {"shm", "[here]", 0.3, 10.0, 0.2, false}},
      {"loopback-tcp", {"loopback-tcp", "[here]", 12, 2.9, 2.0, false}},
  };
  return t;
}

}  // namespace

double LinkModel::slots(double bytes) const {
  return slot_payload > 0 ? std::max(1.0, std::ceil(bytes / slot_payload)) : 1.0;
}

LinkModel with_verbs_staging(LinkModel m) {
  // Every staged message is whole slots (Apple's driver fails a send and a receive of different
  // frame counts); acks are slots too (wire.h, chunk_rx.cc).
  m.slot_bytes = double(fabric::verbs::kSlotBytes);
  m.slot_payload = double(fabric::verbs::kChunkPayload);
  m.ack_every = static_cast<int>(fabric::verbs::kAckEveryChunks);
  m.window = static_cast<int>(fabric::verbs::kDataSlots);
  return m;
}

std::vector<std::string> link_preset_names() {
  std::vector<std::string> v;
  for (const auto& [k, l] : table()) v.push_back(k);
  return v;
}

Result<LinkModel> link_preset(const std::string& medium) {
  auto it = table().find(medium);
  if (it != table().end()) return it->second;
  if (medium == "tb5") return table().at("tb5-rdma");
  std::string all;
  for (const auto& n : link_preset_names()) all += (all.empty() ? "" : ", ") + n;
  return NotFound("no link medium '" + medium + "' (media: " + all + ")");
}

Result<LinkModel> link_for(const cluster::Link& link, const Machine& a, const Machine& b) {
  LinkModel m;
  const std::string prov(cluster::to_string(link.provider));
  if (!link.medium.empty()) {
    std::string medium = link.medium;
    // "tb5" names the cable; the provider says whether RDMA or TCP runs over it.
    if (medium == "tb5") medium = link.provider == cluster::LinkProvider::kTcp ? "tb5-tcp" : "tb5-rdma";
    LATTICE_ASSIGN_OR_RETURN(m, link_preset(medium));
  } else if (link.provider == cluster::LinkProvider::kVerbs) {
    LATTICE_ASSIGN_OR_RETURN(m, link_preset("tb5-rdma"));
  } else if (a.links.count(prov) && b.links.count(prov)) {
    const MeasuredLink& x = a.links.at(prov);
    const MeasuredLink& y = b.links.at(prov);
    m.medium = prov + " (measured)";
    m.source = "sim --calibrate: " + a.name;
    m.latency_us = std::max(x.latency_us, y.latency_us);
    m.gbytes_s = std::min(x.gbytes_s, y.gbytes_s);
    m.per_message_us = 0;  // inside the measured one-way latency
  } else {
    LATTICE_ASSIGN_OR_RETURN(m, link_preset(link.provider == cluster::LinkProvider::kShm ? "shm" : "10gbe"));
  }
  if (link.gbps) m.gbytes_s = std::min(m.gbytes_s, *link.gbps / 8.0);  // nominal: a cap, not a figure reached
  if (link.latency_us) m.latency_us = *link.latency_us;
  return m;
}

}  // namespace lattice::sim
